"""``@agent``: turn a plain async function or async generator into an ``AgentExecutor``.

* ``async def f(context) -> str`` ⇒ a task COMPLETED with one text artifact;
* ``-> Message`` (annotated so) ⇒ a bare Message reply (no task); every other function creates its task (WORKING)
  before it runs, so callers see the task at once; an answer to an interrupted task moves it to WORKING with a status
  update (the task exists: a Message returned then is its final status message);
* ``-> Part | list[Part] | Artifact`` ⇒ a task COMPLETED with that artifact;
* an async generator of ``str`` (or ``Part``) ⇒ one artifact streamed as appended chunks, then COMPLETED;
* raising ⇒ FAILED; ``context.requires_input("question")`` / ``context.requires_auth("…")`` ⇒ the interrupted states.

>>> from relaykit import agent
>>> @agent
... async def echo(context):
...     return context.text
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

from relaykit._card import AgentCard
from relaykit._enums import TaskState
from relaykit._types import Artifact, Message, Part, Task, TaskStatus
from relaykit.server._context import RequestContext
from relaykit.server._executor import AgentExecutor
from relaykit.server._queue import EventQueue
from relaykit.server._updater import TaskUpdater

__all__ = ["AgentContext", "FunctionAgent", "Interrupt", "agent"]


class Interrupt(Exception):
    """Raised by ``requires_input`` / ``requires_auth`` to pause the task."""

    def __init__(self, state: TaskState, message: str | Message) -> None:
        self.state = state
        self.message = message
        super().__init__(state.name)


class AgentContext(RequestContext):
    """The ``RequestContext`` an ``@agent`` function receives, plus the updater and interrupt helpers."""

    __slots__ = ("_origin", "updater")

    updater: TaskUpdater
    _origin: RequestContext

    @property
    def cancelled(self) -> bool:
        """True once a cancel of this task was requested (read from the engine's own context)."""
        return self._origin.cancelled

    @property
    def cancel_event(self) -> asyncio.Event:
        """Set when a cancel is requested."""
        return self._origin.cancel_event

    def requires_input(self, question: str | Message) -> NoReturn:
        """Pause in INPUT_REQUIRED with ``question``; the user's answer arrives as a new call on the same task."""
        raise Interrupt(TaskState.INPUT_REQUIRED, question)

    def requires_auth(self, message: str | Message) -> NoReturn:
        """Pause in AUTH_REQUIRED with what is needed."""
        raise Interrupt(TaskState.AUTH_REQUIRED, message)

    @property
    def history(self) -> list[Message]:
        """The stored task's history for a continuation (empty for a new task)."""
        return list(self.task.history) if self.task is not None else []


AgentFunction = Callable[[AgentContext], Awaitable[Any]] | Callable[[AgentContext], AsyncIterator[Any]]


class FunctionAgent(AgentExecutor):
    """An executor around an ``@agent`` function."""

    def __init__(self, fn: AgentFunction, *, card: AgentCard | None = None, idempotent: bool = False) -> None:
        self.fn = fn
        self.card = card
        self.streaming_fn = inspect.isasyncgenfunction(fn)
        # A function that may reply with a bare Message must not create a task first; every other one creates its
        # task (WORKING) before it runs, so returnImmediately and streams see the task at once, not at the end.
        self.may_reply_with_message = not self.streaming_fn and _mentions_message(fn)
        self.__doc__ = fn.__doc__
        self.name = getattr(fn, "__name__", "agent")
        if idempotent:
            self.idempotent = True  # type: ignore[misc]

    def _context(self, context: RequestContext, queue: EventQueue) -> AgentContext:
        ctx = AgentContext.__new__(AgentContext)
        for name in RequestContext.__slots__:
            object.__setattr__(ctx, name, getattr(context, name))
        # The copy must see a cancel the engine records on the original: share the flag through the original.
        object.__setattr__(ctx, "_origin", context)
        ctx.updater = TaskUpdater(queue, context)
        return ctx

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        ctx = self._context(context, queue)
        updater = ctx.updater
        task_created = False
        if context.task is not None and context.task.status.state.is_interrupted:
            # An answer to an interrupted task, which exists (its caller's stream opened with it): WORKING is a status
            # update. A Task here would replace the snapshot (its artifacts with none) and reach every subscriber as a
            # second Task, where a subscription carries only updates after its first. (A re-run of a lost worker's
            # execution, on a task still WORKING, starts over from a fresh snapshot below.)
            await updater.working()
            task_created = True
        elif not self.may_reply_with_message:
            await queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.WORKING),
                )
            )
            task_created = True
        try:
            if self.streaming_fn:
                await self._stream(ctx, updater)
                return
            result = await self.fn(ctx)  # type: ignore[misc]
        except Interrupt as stop:
            await updater.update(stop.state, stop.message)
            return
        if isinstance(result, Message):
            if task_created:
                # The task exists already: the message becomes its final status message.
                await updater.complete(
                    result.model_copy(update={"task_id": context.task_id, "context_id": context.context_id})
                )
                return
            if not result.context_id:
                result.context_id = context.context_id
            await queue.enqueue_event(result)
            return
        if result is None:
            await updater.complete()
            return
        if isinstance(result, Artifact):
            await queue.enqueue_event(_artifact_event(updater, result))
        elif isinstance(result, str | Part | list):
            await updater.artifact(result)
        else:
            await updater.artifact(Part(data=result))
        await updater.complete()

    async def _stream(self, ctx: AgentContext, updater: TaskUpdater) -> None:
        gen = self.fn(ctx)
        artifact_id: str | None = None
        pending: str | Part | None = None
        # Hold one chunk back so the last one can carry lastChunk=true.
        async for chunk in gen:  # type: ignore[union-attr]
            if pending is not None:
                artifact_id = await updater.artifact(pending, artifact_id=artifact_id, append=artifact_id is not None)
            pending = chunk
        if pending is not None:
            await updater.artifact(pending, artifact_id=artifact_id, append=artifact_id is not None, last_chunk=True)
        await updater.complete()


def _mentions_message(fn: Any) -> bool:
    annotation = inspect.signature(fn).return_annotation
    if annotation is inspect.Signature.empty:
        return False
    if isinstance(annotation, str):
        return "Message" in annotation
    return annotation is Message or "Message" in repr(annotation)


def _artifact_event(updater: TaskUpdater, artifact: Artifact) -> Any:
    from relaykit._types import TaskArtifactUpdateEvent

    return TaskArtifactUpdateEvent(task_id=updater.task_id, context_id=updater.context_id, artifact=artifact)


def agent(fn: AgentFunction | None = None, *, card: AgentCard | None = None, idempotent: bool = False) -> Any:
    """Decorate an async function or async generator to make it an ``AgentExecutor``."""
    if fn is None:
        return lambda f: FunctionAgent(f, card=card, idempotent=idempotent)
    return FunctionAgent(fn, card=card, idempotent=idempotent)
