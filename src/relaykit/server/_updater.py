"""``TaskUpdater``: publish a task's lifecycle without building events by hand.

>>> # inside AgentExecutor.execute(context, queue):
>>> # updater = TaskUpdater(queue, context)
>>> # await updater.working("thinking")
>>> # await updater.artifact("partial", artifact_id="out", append=True)
>>> # await updater.complete()
"""

from __future__ import annotations

from typing import Any

from relaykit._enums import Role, TaskState
from relaykit._ids import new_id
from relaykit._types import Artifact, Message, Part, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent
from relaykit.server._context import RequestContext
from relaykit.server._queue import EventQueue

__all__ = ["EventEmitter", "TaskUpdater"]


class TaskUpdater:
    """Builds and publishes status and artifact events for one task."""

    __slots__ = ("_exact", "context_id", "queue", "task_id")

    def __init__(self, queue: EventQueue, context: RequestContext) -> None:
        self.queue = queue
        self.task_id = context.task_id
        self.context_id = context.context_id
        # Events built from exact values skip pydantic's validation (``_trusted``): it would return them unchanged.
        self._exact = type(self.task_id) is str and type(self.context_id) is str

    def message(self, content: str | Part | list[Part], **metadata: Any) -> Message:
        """An agent message bound to this task and context."""
        if self._exact and type(content) is str and not metadata:
            return Message._trusted(
                message_id=new_id(),
                role=Role.AGENT,
                parts=[Part._trusted(text=content)],
                task_id=self.task_id,
                context_id=self.context_id,
                metadata=None,
            )
        parts = (
            [Part(text=content)] if isinstance(content, str) else [content] if isinstance(content, Part) else content
        )
        return Message(
            message_id=new_id(),
            role=Role.AGENT,
            parts=parts,
            task_id=self.task_id,
            context_id=self.context_id,
            metadata=metadata or None,
        )

    async def update(self, state: TaskState, message: str | Message | None = None) -> None:
        """Publish a status change (the engine stamps the time)."""
        msg = self.message(message) if isinstance(message, str) else message
        await self.queue.enqueue_event(
            TaskStatusUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                # No timestamp here: the engine stamps every status change when it records it.
                status=TaskStatus(state=state, message=msg),
            )
        )

    async def submit(self, message: str | Message | None = None) -> None:
        """SUBMITTED."""
        await self.update(TaskState.SUBMITTED, message)

    async def working(self, message: str | Message | None = None) -> None:
        """WORKING, optionally with a progress message."""
        await self.update(TaskState.WORKING, message)

    start_work = working

    async def complete(self, message: str | Message | None = None) -> None:
        """COMPLETED."""
        await self.update(TaskState.COMPLETED, message)

    async def fail(self, message: str | Message | None = None) -> None:
        """FAILED, with a reason the client will see."""
        await self.update(TaskState.FAILED, message)

    failed = fail

    async def reject(self, message: str | Message | None = None) -> None:
        """REJECTED."""
        await self.update(TaskState.REJECTED, message)

    async def cancel(self, message: str | Message | None = None) -> None:
        """CANCELED."""
        await self.update(TaskState.CANCELED, message)

    async def requires_input(self, message: str | Message) -> None:
        """INPUT_REQUIRED with the question for the user; return from ``execute`` afterwards."""
        await self.update(TaskState.INPUT_REQUIRED, message)

    async def requires_auth(self, message: str | Message) -> None:
        """AUTH_REQUIRED with what is needed; return from ``execute`` afterwards."""
        await self.update(TaskState.AUTH_REQUIRED, message)

    async def artifact(
        self,
        content: str | Part | list[Part],
        *,
        artifact_id: str | None = None,
        name: str = "",
        append: bool = False,
        last_chunk: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Publish an artifact (or a chunk of one with ``append=True``); returns its id for later chunks."""
        art = Artifact.of(content, artifact_id=artifact_id, name=name, metadata=metadata)
        if self._exact and type(append) is bool and type(last_chunk) is bool and type(art) is Artifact:
            await self.queue.enqueue_event(
                TaskArtifactUpdateEvent._trusted(
                    task_id=self.task_id,
                    context_id=self.context_id,
                    artifact=art,
                    append=append,
                    last_chunk=last_chunk,
                )
            )
            return art.artifact_id
        await self.queue.enqueue_event(
            TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=art,
                append=append,
                last_chunk=last_chunk,
            )
        )
        return art.artifact_id

    add_artifact = artifact

    async def complete_with_text(self, text: str, *, name: str = "") -> None:
        """One text artifact, then COMPLETED: the whole reply of a simple agent."""
        await self.artifact(text, name=name)
        await self.complete()


EventEmitter = TaskUpdater
