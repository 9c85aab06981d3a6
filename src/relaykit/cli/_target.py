"""Resolve ``relaykit serve TARGET``: ``path/to/file.py[:name]`` or ``package.module:name``.

``name`` may be an ``AgentExecutor`` instance or class, an ``@agent`` function, an ASGI app made with
``create_app``, or a framework's agent (pydantic-ai, a compiled LangGraph graph, OpenAI Agents SDK, Google ADK).
Without ``:name`` the module's ``agent`` is used, else its only executor.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from relaykit.adapters._detect import as_executor, framework_of
from relaykit.server._executor import AgentExecutor

__all__ = ["TargetError", "load_target"]


class TargetError(Exception):
    """The target cannot be loaded; the message says why and what to pass instead."""


def _split(target: str) -> tuple[str, str | None]:
    head, sep, tail = target.rpartition(":")
    if sep and tail and "/" not in tail and "\\" not in tail and tail.isidentifier():
        return head, tail
    return target, None


def _import(spec: str) -> ModuleType:
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        path = Path(spec).resolve()
        if not path.is_file():
            raise TargetError(f"no such file: {spec}")
        name = f"relaykit_target_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise TargetError(f"cannot import {spec}")
        module = importlib.util.module_from_spec(module_spec)
        # The file's own directory comes first on the path, so it can import its sibling modules.
        sys.path.insert(0, str(path.parent))
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        raise TargetError(f"cannot import module {spec!r}: {exc}") from exc


def _is_app(obj: Any) -> bool:
    return getattr(getattr(obj, "state", None), "relaykit", None) is not None


def _usable(obj: Any) -> Any:
    if isinstance(obj, AgentExecutor) or _is_app(obj):
        return obj
    if framework_of(obj) is not None:
        return as_executor(obj)
    if inspect.isclass(obj) and issubclass(obj, AgentExecutor) and not inspect.isabstract(obj):
        return obj()
    return None


def load_target(target: str) -> Any:
    """The executor (or relaykit ASGI app) that ``target`` names."""
    spec, name = _split(target)
    module = _import(spec)
    if name is not None:
        if not hasattr(module, name):
            raise TargetError(f"{spec} has no attribute {name!r}")
        found = _usable(getattr(module, name))
        if found is None:
            raise TargetError(
                f"{target} is neither an AgentExecutor (instance or class), an @agent function, "
                "an app made with create_app, nor an agent of pydantic-ai, LangGraph, OpenAI Agents or ADK"
            )
        return found
    if hasattr(module, "agent"):
        found = _usable(module.agent)
        if found is not None:
            return found
    candidates = [
        value
        for key, value in vars(module).items()
        if not key.startswith("_")
        and (
            isinstance(value, AgentExecutor)
            or _is_app(value)
            or framework_of(value) is not None
            or (inspect.isclass(value) and issubclass(value, AgentExecutor) and value.__module__ == module.__name__)
        )
    ]
    if len(candidates) == 1:
        found = _usable(candidates[0])
        if found is not None:
            return found
    if not candidates:
        raise TargetError(f"{spec} defines no agent: add one, or name it as {spec}:NAME")
    raise TargetError(f"{spec} defines several agents; name one as {spec}:NAME")
