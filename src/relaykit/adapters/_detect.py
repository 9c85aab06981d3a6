"""Which framework an object belongs to, and the executor that serves it.

Detection reads only the object's class hierarchy (module and class names), never imports a framework: serving
``examples/echo.py`` or importing ``relaykit`` loads none of them. The adapter module of a framework is imported
only once an object of that framework is seen (and the framework is then already imported, by whoever made it).
"""

from __future__ import annotations

import importlib
from typing import Any

from relaykit._card import AgentCard
from relaykit.adapters._conversations import ConversationStore
from relaykit.backends._base import TaskStore
from relaykit.server._executor import AgentExecutor

__all__ = ["FRAMEWORKS", "as_executor", "framework_of"]

# framework (its extra's name) -> (adapter module, (module prefix, class name) of the base class recognised)
FRAMEWORKS: dict[str, tuple[str, tuple[str, str]]] = {
    "pydantic-ai": ("relaykit.adapters._pydantic_ai", ("pydantic_ai.", "AbstractAgent")),
    "langgraph": ("relaykit.adapters._langgraph", ("langgraph.pregel", "Pregel")),
    "openai-agents": ("relaykit.adapters._openai_agents", ("agents.agent", "Agent")),
    "adk": ("relaykit.adapters._adk", ("google.adk.agents", "BaseAgent")),
}


def framework_of(obj: Any) -> str | None:
    """The framework ``obj`` is an agent (or compiled graph) of, or ``None``.

    >>> framework_of(object()) is None
    True
    """
    if isinstance(obj, type | AgentExecutor):
        return None
    for cls in type(obj).__mro__:
        module = cls.__module__ or ""
        for name, (_, (prefix, base)) in FRAMEWORKS.items():
            if cls.__name__ == base and (module == prefix.rstrip(".") or module.startswith(prefix)):
                return name
    return None


def as_executor(
    obj: Any,
    *,
    store: TaskStore | None = None,
    card: AgentCard | None = None,
    conversations: ConversationStore | None = None,
    **options: Any,
) -> AgentExecutor:
    """``obj`` as an ``AgentExecutor``: a framework object gets its adapter, an executor is returned as it is.

    ``store``: the task store the app serves from; the adapter keeps its conversations there (``create_app`` passes
    it). ``card`` overrides the card derived from the agent; ``conversations`` the conversation store; other
    ``options`` go to the framework's adapter (e.g. ``input_key`` for LangGraph).

    >>> from relaykit import agent
    >>> @agent
    ... async def echo(context):
    ...     return context.text
    >>> as_executor(echo) is echo
    True
    """
    from relaykit.adapters._base import FrameworkExecutor

    if isinstance(obj, FrameworkExecutor):
        if store is not None:
            obj.bind_store(store)
        return obj
    if isinstance(obj, AgentExecutor):
        return obj
    framework = framework_of(obj)
    if framework is None:
        raise TypeError(
            f"expected an AgentExecutor, or an agent of {', '.join(FRAMEWORKS)} (a LangGraph graph compiled), "
            f"got {type(obj).__name__}"
        )
    module = importlib.import_module(FRAMEWORKS[framework][0])
    executor: FrameworkExecutor = module.adapt(obj, card=card, conversations=conversations, **options)
    if store is not None:
        executor.bind_store(store)
    return executor
