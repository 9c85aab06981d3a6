"""A remote A2A agent as something a framework can call: a tool or sub-agent that sends text and returns text.

Built on ``relaykit.client.Client``, so a call gets what the client does: card discovery and transport negotiation
(JSON-RPC, HTTP+JSON, gRPC; A2A 1.0 and 0.3 agents alike), retries, and the typed errors. The per-framework
wrappers (``pydantic_ai_tool``, ``langchain_tool``, ``openai_agents_tool``, ``adk_tool``) only adapt ``ask``.

Rules:

* each call opens a client from the remote card (fetched once, then cached), unless a ``Client`` was given: a tool
  is often made in one event loop and called in another (the server's), and connections do not cross loops;
* one remote conversation (A2A context) per local conversation: the caller passes its own conversation key (the
  framework's conversation or thread id), so two users of the local agent never share a remote context;
* a remote question (INPUT_REQUIRED) is returned as the tool's text, prefixed so the model knows to answer it; the
  next call in the same local conversation continues that remote task (the answer resumes it);
* COMPLETED returns the artifacts' text (data parts as JSON); FAILED, REJECTED and AUTH_REQUIRED raise the client's
  ``A2ATaskFailedError`` / ``A2ATaskRejectedError`` / ``A2ATaskAuthRequiredError`` (the framework decides what the
  model sees), and transport failures raise ``A2AConnectionError`` / ``A2ATimeoutError``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from relaykit._card import AgentCard
from relaykit._enums import TaskState
from relaykit._errors import A2ATaskAuthRequiredError, A2ATaskFailedError, A2ATaskRejectedError
from relaykit._types import Message, Part, Task
from relaykit.client._client import Client

__all__ = ["QUESTION_PREFIX", "RemoteAgent", "tool_name"]

QUESTION_PREFIX = "The remote agent needs more input before it can finish: "
_NAME = re.compile(r"[^A-Za-z0-9_]+")


def tool_name(name: str) -> str:
    """A tool name every framework accepts (letters, digits, underscores; at most 64 characters)."""
    cleaned = _NAME.sub("_", name).strip("_").lower() or "remote_agent"
    return cleaned[:64]


def _parts_text(parts: list[Part]) -> str:
    out: list[str] = []
    for part in parts:
        if part.text is not None:
            out.append(part.text)
        elif part.data is not None:
            out.append(json.dumps(part.data, ensure_ascii=False, default=str))
        elif part.url is not None:
            out.append(part.url)
    return "\n".join(out)


class RemoteAgent:
    """A remote A2A agent at ``target`` (a base URL or a connected ``Client``), asked one text at a time.

    >>> remote = RemoteAgent("http://localhost:8000")
    >>> # answer = await remote.ask("What is the weather in Paris?", conversation="user-42")
    """

    def __init__(self, target: str | Client, *, client_options: dict[str, Any] | None = None) -> None:
        self._given = target if isinstance(target, Client) else None
        self.url = target.url or "" if isinstance(target, Client) else target
        self._options = dict(client_options or {})
        self._card: AgentCard | None = None
        # local conversation key -> (remote context id, remote task waiting for input or None)
        self._threads: dict[str, tuple[str, str | None]] = {}

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Client]:
        # A given client is the caller's (and its event loop's). Otherwise each call opens its own client from the
        # cached card: a tool is often made in one event loop (asyncio.run at import time) and called in another
        # (the server's), and a client kept across loops would hold connections of a loop that is gone.
        if self._given is not None:
            await self._given.connect()
            yield self._given
            return
        async with Client(self.url, card=self._card, **self._options) as client:
            if self._card is None:
                self._card = client.card
            yield client

    async def card(self) -> AgentCard:
        """The remote agent's card (fetched once)."""
        if self._card is None:
            async with self._session() as client:
                self._card = client.card
        if self._card is None:  # a client built on a bare transport has no card
            return AgentCard(name=tool_name(self.url or "remote_agent"), description="A remote A2A agent.")
        return self._card

    async def describe(self) -> tuple[str, str]:
        """A tool name and description for the remote agent, from its card (name, description and skills)."""
        card = await self.card()
        skills = "; ".join(f"{s.name}: {s.description}" for s in card.skills if s.description)
        description = card.description or f"The remote A2A agent {card.name}."
        if skills:
            description = f"{description} Skills: {skills}"
        return tool_name(card.name), description

    async def ask(self, text: str, *, conversation: str = "") -> str:
        """Send ``text`` in the remote conversation that goes with ``conversation``; return the answer's text."""
        context_id, task_id = self._threads.get(conversation, (None, None))
        async with self._session() as client:
            result = await client.send(text, context_id=context_id, task_id=task_id)
        if isinstance(result, Message):
            if result.context_id:
                self._threads[conversation] = (result.context_id, None)
            return _parts_text(result.parts)
        return self._outcome(conversation, result)

    def _outcome(self, conversation: str, task: Task) -> str:
        state = task.status.state
        message = task.status.message
        if state is TaskState.INPUT_REQUIRED:
            self._threads[conversation] = (task.context_id, task.id)
            question = _parts_text(message.parts) if message is not None else "(no question given)"
            return QUESTION_PREFIX + question
        self._threads[conversation] = (task.context_id, None)
        if state is TaskState.FAILED:
            raise A2ATaskFailedError(task)
        if state is TaskState.REJECTED:
            raise A2ATaskRejectedError(task)
        if state is TaskState.AUTH_REQUIRED:
            raise A2ATaskAuthRequiredError(task)
        texts = [_parts_text(a.parts) for a in task.artifacts]
        answer = "\n".join(t for t in texts if t)
        if not answer and message is not None:
            answer = _parts_text(message.parts)
        return answer
