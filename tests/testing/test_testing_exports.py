"""``relaykit.testing`` exports exactly its sorted ``__all__``, each public name documented (as tests/test_exports.py
checks for the other public modules)."""

import importlib
import inspect

import pytest


@pytest.mark.parametrize("name", ["relaykit.testing", "relaykit.testing.plugin"])
def test_all_is_importable_sorted_and_documented(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    for attr in exported:
        value = getattr(module, attr)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name}.{attr} has no docstring"
