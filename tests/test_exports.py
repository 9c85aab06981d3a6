"""The public modules export exactly what their ``__all__`` promises, sorted, and every public name has a docstring."""

import importlib
import inspect

import pytest

PUBLIC = [
    "relaykit",
    "relaykit.types",
    "relaykit.errors",
    "relaykit.server",
    "relaykit.assembly",
    "relaykit.auth",
    "relaykit.backends",
    "relaykit.http",
    "relaykit.testing",
    "relaykit.client",
    "relaykit.push",
    "relaykit.adapters",
    "relaykit.inspector",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_importable_sorted_and_documented(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=lambda s: (s.lstrip("_").lower(), s)) or exported == sorted(exported)
    for attr in exported:
        value = getattr(module, attr)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name}.{attr} has no docstring"


def test_top_level_quick_names() -> None:
    import relaykit

    for attr in ("agent", "AgentExecutor", "TaskUpdater", "Message", "Part", "Task", "TaskState"):
        assert attr in relaykit.__all__
