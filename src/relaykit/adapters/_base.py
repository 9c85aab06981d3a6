"""What every framework adapter shares: the executor base, the streamed text artifact, tool-call status updates,
the user's answer to a question, and the card built from what the framework declares.

Invariants every adapter keeps (the per-framework modules only translate their framework's events):

* a new task is published (WORKING) before the framework runs, so streams and ``returnImmediately`` see it at once;
  a continuation (the answer to INPUT_REQUIRED) publishes WORKING;
* text output is ONE artifact per turn, streamed chunk by chunk in the framework's order (``append`` after the first
  chunk, ``lastChunk`` on the last), and the final answer completes the task; structured output is a data part;
* a tool call is a WORKING status update whose message names the tool (never its arguments);
* the framework's run happens inside ``execute``'s own coroutine (or is cancelled with it), so a cancel stops it:
  no model call is made after the cancel reaches ``execute``; an exception propagates, and the engine fails the
  task with its safe message;
* the conversation is loaded at the start of a turn and saved once, at its end, under a per-conversation lock
  (``_conversations`` states the storage rules).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any, ClassVar

from relaykit._card import AgentCard, AgentSkill
from relaykit._enums import TaskState
from relaykit._types import Message, Part, Task, TaskStatus
from relaykit.adapters._conversations import (
    ConversationKey,
    ConversationStore,
    MemoryConversationStore,
    open_conversations,
)
from relaykit.backends._base import TaskStore
from relaykit.server._context import RequestContext
from relaykit.server._executor import AgentExecutor
from relaykit.server._queue import EventQueue
from relaykit.server._updater import TaskUpdater

__all__ = ["APPROVALS", "FrameworkExecutor", "TextStream", "derive_card", "first_paragraph", "user_answer"]

# Answers that approve a tool call waiting for a human's consent (compared lower-cased and stripped).
APPROVALS = frozenset({"y", "yes", "ok", "okay", "approve", "approved", "allow", "confirm", "confirmed", "true", "go"})


class TextStream:
    """One text artifact, streamed chunk by chunk: the last chunk is held back so it can carry ``lastChunk``."""

    __slots__ = ("_pending", "artifact_id", "name", "updater")

    def __init__(self, updater: TaskUpdater, name: str = "response") -> None:
        self.updater = updater
        self.name = name
        self.artifact_id: str | None = None
        self._pending: str | None = None

    @property
    def started(self) -> bool:
        """Whether any text arrived this turn."""
        return self._pending is not None or self.artifact_id is not None

    async def add(self, chunk: str) -> None:
        """Queue ``chunk``; the chunk before it goes out now."""
        if not chunk:
            return
        pending = self._pending
        self._pending = chunk
        if pending is not None:
            self.artifact_id = await self.updater.artifact(
                pending, artifact_id=self.artifact_id, name=self.name, append=self.artifact_id is not None
            )

    async def close(self) -> None:
        """Send the held-back chunk as the last one (nothing if no text arrived)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self.artifact_id = await self.updater.artifact(
                pending,
                artifact_id=self.artifact_id,
                name=self.name,
                append=self.artifact_id is not None,
                last_chunk=True,
            )


def user_answer(context: RequestContext) -> tuple[str, Any]:
    """The incoming message's text and, when it has one, the value of its first data part (``None`` otherwise)."""
    message = context.message
    if message is None:
        return "", None
    data = next((p.data for p in message.parts if p.data is not None), None)
    return context.get_user_input(), data


def approved(text: str, data: Any) -> bool:
    """Whether the user's answer approves: a data part ``{"approved": true}`` or a yes-like text."""
    if isinstance(data, dict) and isinstance(data.get("approved"), bool):
        return bool(data["approved"])
    if isinstance(data, bool):
        return data
    return text.strip().lower().rstrip(".!") in APPROVALS


def first_paragraph(text: Any) -> str:
    """The first paragraph of a docstring-like text (``""`` for anything that is not a non-empty string)."""
    if not isinstance(text, str):
        return ""
    return text.strip().split("\n\n", 1)[0].strip()


def derive_card(name: str, description: str, tools: Iterable[tuple[str, str]] = ()) -> AgentCard:
    """A card for a framework agent: its name and description, one skill per declared tool (or one for the agent)."""
    description = description or f"{name} agent"
    skills = [
        AgentSkill(id=tool, name=tool, description=about or f"the {tool} tool", tags=["tool"]) for tool, about in tools
    ]
    if not skills:
        skills = [AgentSkill(id=name, name=name, description=description, tags=["agent"])]
    return AgentCard(name=name, description=description, version="1.0.0", skills=skills)


class FrameworkExecutor(AgentExecutor):
    """The executor behind a framework object: subclasses translate one framework's run into A2A events.

    ``conversations``: where the framework's memory lives; by default the store the app serves from (``create_app``
    binds it), memory until then.
    """

    kind: ClassVar[str] = ""
    """The framework's extra name (``pydantic-ai``, ``langgraph``, ``openai-agents``, ``adk``); also the key kind."""

    def __init__(
        self, target: Any, *, card: AgentCard | None = None, conversations: ConversationStore | None = None
    ) -> None:
        self.target = target
        self._own_conversations = conversations is not None
        self.conversations: ConversationStore = conversations or MemoryConversationStore()
        self._locks: dict[ConversationKey, asyncio.Lock] = {}
        self.card = card if card is not None else self.derive_card()
        self.name = self.card.name

    def derive_card(self) -> AgentCard:
        """The card built from the framework object (overridden per framework)."""
        return derive_card(type(self.target).__name__, "")

    def bind_store(self, store: TaskStore) -> None:
        """Keep conversations with ``store``'s tasks (unless a conversation store was given explicitly)."""
        if not self._own_conversations:
            self.conversations = open_conversations(store)

    def key(self, context: RequestContext) -> ConversationKey:
        """The conversation of this request: its context id, scoped by the caller's tenant and principal."""
        return ConversationKey(context.context_id, self.kind, context.call.tenant, context.call.user)

    @contextlib.asynccontextmanager
    async def turn(self, context: RequestContext) -> AsyncIterator[ConversationKey]:
        """Hold the conversation for one turn: two turns of one context in this process run one after the other."""
        key = self.key(context)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        try:
            async with lock:
                yield key
        finally:
            # Forget the lock once nobody holds or waits for it, so the dict does not grow with every context.
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    async def begin(self, context: RequestContext, queue: EventQueue) -> TaskUpdater:
        """Publish the task (new: WORKING at once) or its WORKING status (a continuation); returns its updater."""
        updater = TaskUpdater(queue, context)
        if context.task is None:
            await queue.enqueue_event(
                Task(id=context.task_id, context_id=context.context_id, status=TaskStatus(state=TaskState.WORKING))
            )
        else:
            await updater.working()
        return updater

    @staticmethod
    async def tool_called(updater: TaskUpdater, name: str) -> None:
        """The WORKING status update that shows a tool call: its name only, arguments stay private."""
        await updater.working(updater.message(f"Calling tool {name}", tool=name))

    @staticmethod
    def question(updater: TaskUpdater, text: str, data: Any = None) -> Message:
        """The INPUT_REQUIRED message: the question as text, and the framework's details as a data part."""
        parts = [Part(text=text)]
        if data is not None:
            parts.append(Part(data=data))
        return updater.message(parts)
