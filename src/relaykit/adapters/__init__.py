"""Framework adapters: serve a pydantic-ai, LangGraph, OpenAI Agents SDK or Google ADK agent as an A2A agent, and
call any A2A agent as a tool of those frameworks.

Serving: ``create_app(obj)`` and ``relaykit serve FILE.py:NAME`` accept the framework's object as it is;
``as_executor(obj, card=…, …)`` gives its ``AgentExecutor`` explicitly (for options). The A2A context id is the
conversation: the framework's memory is kept with relaykit's tasks (``open_conversations``), so it survives a
restart on a durable store and is shared by the replicas of a scale-out deployment.

Calling: ``await pydantic_ai_tool(url)``, ``await langchain_tool(url)`` (LangGraph), ``await openai_agents_tool(url)``
and ``await adk_tool(url)`` wrap a remote A2A agent (relaykit's ``Client``: negotiation, resume, typed errors, 0.3).

Nothing here imports a framework until it is used: detection reads class names only, and each framework's module
is loaded when one of its objects is served or one of its tools is made (with an install hint if it is missing).

>>> from relaykit.adapters import framework_of
>>> framework_of("not an agent") is None
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from relaykit.adapters._base import FrameworkExecutor
from relaykit.adapters._conversations import (
    ConversationKey,
    ConversationStore,
    MemoryConversationStore,
    open_conversations,
)
from relaykit.adapters._detect import as_executor, framework_of

if TYPE_CHECKING:
    from relaykit.adapters._remote import RemoteAgent

__all__ = [
    "ConversationKey",
    "ConversationStore",
    "FrameworkExecutor",
    "MemoryConversationStore",
    "RemoteAgent",
    "adk_tool",
    "as_executor",
    "framework_of",
    "langchain_tool",
    "open_conversations",
    "openai_agents_tool",
    "pydantic_ai_tool",
]

# name -> (module, extra to install, the framework's import name)
_LAZY = {
    "pydantic_ai_tool": ("relaykit.adapters._pydantic_ai", "pydantic-ai", "pydantic_ai"),
    "langchain_tool": ("relaykit.adapters._langgraph", "langgraph", "langgraph"),
    "openai_agents_tool": ("relaykit.adapters._openai_agents", "openai-agents", "agents"),
    "adk_tool": ("relaykit.adapters._adk", "adk", "google.adk"),
}


def __getattr__(name: str) -> Any:
    # RemoteAgent (the calling side) needs relaykit's client: loaded on first use, so the composition root, which
    # imports this package to detect framework objects, never pulls the client into a server.
    if name == "RemoteAgent":
        from relaykit.adapters._remote import RemoteAgent

        globals()[name] = RemoteAgent
        return RemoteAgent
    # The tool factories live in their framework's module: imported on first use, with an install hint.
    if name not in _LAZY:
        raise AttributeError(f"module 'relaykit.adapters' has no attribute {name!r}")
    module, extra, framework = _LAZY[name]
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (exc.name == framework or exc.name.startswith(framework.split(".")[0])):
            raise ImportError(f"{name} needs {framework}: pip install 'relaykit[{extra}]'") from exc
        raise
    globals()[name] = value
    return value
