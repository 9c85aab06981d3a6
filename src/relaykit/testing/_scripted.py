"""``ScriptedAgent``: an executor that replays a script of steps, to test clients against an agent you control.

Each new task plays the script from the top. A step that interrupts the task (``input_required``,
``auth_required``) or ends it (``complete``, ``fail``, ``reject``, ``canceled``, ``message``) ends the turn; the
next message on the same task resumes the script after it. A script that runs out without ending its task leaves it
to the engine, which fails it ("The agent stopped before finishing the task"), so end yours explicitly.

>>> from relaykit.testing import ScriptedAgent, artifact, chunks, complete, input_required, working
>>> simple = ScriptedAgent([working("thinking"), artifact("hi"), complete()])
>>> streaming = ScriptedAgent([chunks("Hel", "lo"), complete()])
>>> two_turns = ScriptedAgent([input_required("Your name?"), artifact("Hello!"), complete()])

Steps are small objects with ``async run(turn)``; subclass ``Step`` (or use ``call(fn)``) for your own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from relaykit._enums import Role, TaskState
from relaykit._ids import new_id
from relaykit._types import Message, Part
from relaykit.server._context import RequestContext
from relaykit.server._executor import AgentExecutor
from relaykit.server._queue import EventQueue
from relaykit.server._updater import TaskUpdater

__all__ = [
    "ScriptedAgent",
    "Step",
    "Turn",
    "artifact",
    "auth_required",
    "call",
    "canceled",
    "chunks",
    "complete",
    "fail",
    "input_required",
    "message",
    "raise_error",
    "reject",
    "sleep",
    "status",
    "wait_for",
    "working",
]

Content = str | Part | list[Part]


def _parts(content: Content) -> list[Part]:
    if isinstance(content, str):
        return [Part(text=content)]
    return [content] if isinstance(content, Part) else list(content)


@dataclass
class Turn:
    """What a step sees: the request, the queue, an updater, and the last artifact id (for ``append``)."""

    context: RequestContext
    queue: EventQueue
    updater: TaskUpdater
    last_artifact_id: str | None = None


class Step:
    """One scripted action. ``ends_turn``: the execution returns after it (the task is interrupted or ended)."""

    ends_turn = False

    async def run(self, turn: Turn) -> None:
        """Publish this step's events."""
        raise NotImplementedError


@dataclass(frozen=True)
class _Status(Step):
    state: TaskState
    text: Content | None = None

    @property
    def ends_turn(self) -> bool:  # type: ignore[override]
        return self.state.is_terminal or self.state.is_interrupted

    async def run(self, turn: Turn) -> None:
        message = None if self.text is None else turn.updater.message(self.text)
        await turn.updater.update(self.state, message)

    def __repr__(self) -> str:
        return f"status({self.state.name}, {self.text!r})"


@dataclass(frozen=True)
class _Artifact(Step):
    content: Content
    name: str = ""
    artifact_id: str | None = None
    append: bool = False
    last_chunk: bool = False

    async def run(self, turn: Turn) -> None:
        artifact_id = self.artifact_id or (turn.last_artifact_id if self.append else None)
        turn.last_artifact_id = await turn.updater.artifact(
            self.content, artifact_id=artifact_id, name=self.name, append=self.append, last_chunk=self.last_chunk
        )


@dataclass(frozen=True)
class _Chunks(Step):
    texts: tuple[Content, ...]
    name: str = ""
    artifact_id: str | None = None

    async def run(self, turn: Turn) -> None:
        artifact_id = self.artifact_id or new_id()
        for i, text in enumerate(self.texts):
            await turn.updater.artifact(
                text, artifact_id=artifact_id, name=self.name, append=i > 0, last_chunk=i == len(self.texts) - 1
            )
        turn.last_artifact_id = artifact_id


@dataclass(frozen=True)
class _Message(Step):
    content: Content
    ends_turn = True

    async def run(self, turn: Turn) -> None:
        context_id = turn.context.context_id
        reply = Message(message_id=new_id(), role=Role.AGENT, parts=_parts(self.content), context_id=context_id)
        await turn.queue.enqueue_event(reply)


@dataclass(frozen=True)
class _WaitFor(Step):
    event: asyncio.Event

    async def run(self, turn: Turn) -> None:
        await self.event.wait()


@dataclass(frozen=True)
class _Sleep(Step):
    seconds: float

    async def run(self, turn: Turn) -> None:
        await asyncio.sleep(self.seconds)


@dataclass(frozen=True)
class _Raise(Step):
    error: BaseException

    async def run(self, turn: Turn) -> None:
        raise self.error


@dataclass(frozen=True)
class _Call(Step):
    fn: Callable[[Turn], Awaitable[Any]]

    async def run(self, turn: Turn) -> None:
        await self.fn(turn)


def status(state: TaskState, text: Content | None = None) -> Step:
    """Publish a status update (with an agent message when ``text`` is given)."""
    return _Status(state, text)


def working(text: Content | None = None) -> Step:
    """WORKING, with an optional progress message."""
    return _Status(TaskState.WORKING, text)


def complete(text: Content | None = None) -> Step:
    """COMPLETED (ends the task)."""
    return _Status(TaskState.COMPLETED, text)


def fail(text: Content | None = "scripted failure") -> Step:
    """FAILED with a reason the client sees (ends the task)."""
    return _Status(TaskState.FAILED, text)


def reject(text: Content | None = "scripted rejection") -> Step:
    """REJECTED (ends the task)."""
    return _Status(TaskState.REJECTED, text)


def canceled(text: Content | None = None) -> Step:
    """CANCELED published by the agent itself (ends the task)."""
    return _Status(TaskState.CANCELED, text)


def input_required(question: Content) -> Step:
    """INPUT_REQUIRED with ``question``; the next message on the task resumes the script."""
    return _Status(TaskState.INPUT_REQUIRED, question)


def auth_required(text: Content) -> Step:
    """AUTH_REQUIRED with what is needed; the next message on the task resumes the script."""
    return _Status(TaskState.AUTH_REQUIRED, text)


def artifact(
    content: Content,
    *,
    name: str = "",
    artifact_id: str | None = None,
    append: bool = False,
    last_chunk: bool = False,
) -> Step:
    """An artifact (``append=True`` adds to the previous artifact of this turn unless ``artifact_id`` is given)."""
    return _Artifact(content, name, artifact_id, append, last_chunk)


def chunks(*texts: Content, name: str = "", artifact_id: str | None = None) -> Step:
    """One artifact streamed as chunks: ``append`` after the first, ``lastChunk`` on the last."""
    if not texts:
        raise ValueError("chunks() needs at least one chunk")
    return _Chunks(texts, name, artifact_id)


def message(content: Content) -> Step:
    """A bare Message reply instead of a task (only as the first step of a new task's script)."""
    return _Message(content)


def wait_for(event: asyncio.Event) -> Step:
    """Wait until the test sets ``event`` (keeps a task WORKING for as long as a test needs, without sleeping)."""
    return _WaitFor(event)


def sleep(seconds: float) -> Step:
    """Wait ``seconds`` (for demos and timeouts; tests should prefer ``wait_for``)."""
    return _Sleep(seconds)


def raise_error(error: BaseException | None = None) -> Step:
    """Raise from ``execute``: the engine fails the task with a safe message."""
    return _Raise(error if error is not None else RuntimeError("scripted error"))


def call(fn: Callable[[Turn], Awaitable[Any]]) -> Step:
    """Run ``await fn(turn)``: anything the other steps don't cover."""
    return _Call(fn)


class ScriptedAgent(AgentExecutor):
    """An ``AgentExecutor`` that replays ``steps`` for every new task.

    ``received`` records every incoming message in order and ``canceled_tasks`` the ids of canceled tasks, so a test
    can check what its client sent.

    >>> from relaykit.testing import ScriptedAgent, input_required, artifact, complete
    >>> agent = ScriptedAgent([input_required("Your name?"), artifact("Hello!"), complete()])
    >>> len(agent.steps)
    3
    """

    def __init__(self, steps: Iterable[Step]) -> None:
        self.steps: list[Step] = list(steps)
        for step in self.steps:
            if not isinstance(step, Step):
                raise TypeError(f"not a script step: {step!r} (use working(), artifact(), complete(), …)")
        self.received: list[Message] = []
        self.canceled_tasks: list[str] = []
        self._positions: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"ScriptedAgent({self.steps!r})"

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        if context.message is not None:
            self.received.append(context.message)
        turn = Turn(context, queue, TaskUpdater(queue, context))
        position = self._positions.pop(context.task_id, 0)
        for index in range(position, len(self.steps)):
            step = self.steps[index]
            await step.run(turn)
            if step.ends_turn:
                # The next message on this task (an answer to INPUT_REQUIRED) resumes after this step.
                if not (isinstance(step, _Status) and step.state.is_terminal):
                    self._positions[context.task_id] = index + 1
                return

    async def cancel(self, context: RequestContext, queue: EventQueue) -> None:
        self._positions.pop(context.task_id, None)
        self.canceled_tasks.append(context.task_id)
