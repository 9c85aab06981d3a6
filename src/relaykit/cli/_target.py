"""Resolve ``relaykit serve TARGET``: ``path/to/file.py[:name]`` or ``package.module:name``.

``name`` may be an ``AgentExecutor`` instance or class, an ``@agent`` function, an ASGI app made with
``create_app``, or a framework's agent (pydantic-ai, a compiled LangGraph graph, OpenAI Agents SDK, Google ADK).
Without ``:name`` the module's ``agent`` is used, else its only executor.

Every way this can fail raises ``CliError`` with one line that says what to pass instead; an exception raised by the
user's own module while it is imported (a syntax error, a missing import, ``raise`` at top level) is reported as
``FILE:LINE: Type: message`` in the user's file (see ``_fail``).
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
from relaykit.cli._fail import CliError, user_code_error
from relaykit.server._executor import AgentExecutor

__all__ = ["load_target", "target_file"]

_HINTS = 3  # Python files named when TARGET is a directory


def _split(target: str) -> tuple[str, str | None]:
    head, sep, tail = target.rpartition(":")
    if sep and tail and "/" not in tail and "\\" not in tail and tail.isidentifier():
        return head, tail
    return target, None


def _is_path(spec: str) -> bool:
    # A bare directory name is a path too (a mistake to explain), unless it is a package to import.
    plain_dir = Path(spec).is_dir() and not (Path(spec) / "__init__.py").is_file()
    return spec.endswith(".py") or "/" in spec or "\\" in spec or plain_dir


def _check_path(spec: str) -> Path:
    """The file ``spec`` names, or a ``CliError`` saying what to pass instead."""
    path = Path(spec)
    if path.is_dir():
        files = sorted(str(p) for p in path.glob("*.py") if p.name != "__init__.py")
        if files:
            some = ", ".join(files[:_HINTS]) + (", …" if len(files) > _HINTS else "")
            raise CliError(f"{spec} is a directory: pass the agent's Python file, e.g. {some}")
        raise CliError(f"{spec} is a directory: pass the agent's Python file (path/to/agent.py)")
    if not path.is_file():
        raise CliError(f"no such file: {spec}")
    return path.resolve()


def target_file(target: str) -> Path | None:
    """The agent file ``target`` names (checked to be a file, without running it), ``None`` for a module."""
    spec, _ = _split(target)
    return _check_path(spec) if _is_path(spec) else None


def _import(spec: str) -> ModuleType:
    if _is_path(spec):
        path = _check_path(spec)
        name = f"relaykit_target_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise CliError(f"cannot import {spec}")
        module = importlib.util.module_from_spec(module_spec)
        # The file's own directory comes first on the path, so it can import its sibling modules.
        sys.path.insert(0, str(path.parent))
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:  # the user's module failed while it ran: say where, in their file
            sys.modules.pop(name, None)
            raise user_code_error(exc, path, spec) from exc
        return module
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (spec == exc.name or spec.startswith(exc.name + ".")):
            hint = f" (did you mean {spec}.py?)" if Path(f"{spec}.py").is_file() else ""
            raise CliError(f"cannot import module {spec!r}: {exc}{hint}") from exc
        raise user_code_error(exc, spelled=spec) from exc
    except Exception as exc:
        raise user_code_error(exc, spelled=spec) from exc


def _is_app(obj: Any) -> bool:
    return getattr(getattr(obj, "state", None), "relaykit", None) is not None


def _usable(obj: Any) -> Any:
    if isinstance(obj, AgentExecutor) or _is_app(obj):
        return obj
    if framework_of(obj) is not None:
        return as_executor(obj)
    if inspect.isclass(obj) and issubclass(obj, AgentExecutor) and not inspect.isabstract(obj):
        try:
            return obj()
        except Exception as exc:  # the user's __init__
            raise user_code_error(exc) from exc
    return None


def _candidates(module: ModuleType) -> dict[str, Any]:
    """The module's public agents: executors, executor classes defined in it, relaykit apps, framework agents."""
    return {
        key: value
        for key, value in vars(module).items()
        if not key.startswith("_")
        and (
            isinstance(value, AgentExecutor)
            or _is_app(value)
            or framework_of(value) is not None
            or (inspect.isclass(value) and issubclass(value, AgentExecutor) and value.__module__ == module.__name__)
        )
    }


def load_target(target: str) -> Any:
    """The executor (or relaykit ASGI app) that ``target`` names."""
    spec, name = _split(target)
    module = _import(spec)
    if name is not None:
        if not hasattr(module, name):
            found_names = ", ".join(_candidates(module))
            known = f" (its agents: {found_names})" if found_names else ""
            raise CliError(f"{spec} has no attribute {name!r}{known}")
        found = _usable(getattr(module, name))
        if found is None:
            raise CliError(
                f"{target} is neither an AgentExecutor (instance or class), an @agent function, "
                "an app made with create_app, nor an agent of pydantic-ai, LangGraph, OpenAI Agents or ADK"
            )
        return found
    if hasattr(module, "agent"):
        found = _usable(module.agent)
        if found is not None:
            return found
    candidates = _candidates(module)
    instances = {type(value) for value in candidates.values() if isinstance(value, AgentExecutor)}
    if instances:
        # A class and the one instance made of it are one executor: the instance is what the file serves.
        candidates = {key: value for key, value in candidates.items() if not any(value is c for c in instances)}
    if len(candidates) == 1:
        found = _usable(next(iter(candidates.values())))
        if found is not None:
            return found
    if not candidates:
        raise CliError(f"{spec} defines no agent: add one, or name it as {spec}:NAME")
    names = ", ".join(candidates)
    raise CliError(f"{spec} defines several agents ({names}); name one as {spec}:{next(iter(candidates))}")
