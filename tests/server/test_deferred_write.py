"""Scale-out's deferred first write (``Recorder._write_deferred``) against the runner's next write, made to overlap
deterministically: the deferred copy's save holds the task's lock until the runner's terminal write is waiting for
it (an instrumented cluster ``save``, events, no sleeps).

The copy holds the task's first state; the runner encodes the terminal state while the copy's save holds the lock.
The copy's bytes must then not become "what is stored": the blocking caller's answer and the terminal write are the
terminal state, not the mid-stream snapshot (the race fixed in ``_flush_deferred``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from relaykit import AgentExecutor, RequestContext, TaskUpdater
from relaykit._enums import Role, TaskState
from relaykit._model import utc_now
from relaykit._requests import SendMessageRequest
from relaykit._types import Message, Part, Task, TaskStatus
from relaykit.backends._base import TaskRecord
from relaykit.backends.memory import MemoryTaskStore
from relaykit.server import EventQueue, TaskEngine
from relaykit.server._context import CallContext

WAIT = 5.0


class Cluster:
    """The part of ``server._cluster.Cluster`` the recorder calls (``save``), with one lock per task as there, and
    hooks: the deferred copy's save waits, holding the lock, until the runner's next write has asked for it."""

    def __init__(self, store: MemoryTaskStore) -> None:
        self.store = store
        self.lock = asyncio.Lock()
        self.copy_saving = asyncio.Event()
        self.runner_waiting = asyncio.Event()
        self.saved: list[TaskState] = []

    async def save(self, active: Any, record: TaskRecord) -> None:
        copy = record is not active.record  # the deferred write saves a copy; the runner its live record
        if not copy:
            self.runner_waiting.set()
        async with self.lock:
            if copy:
                self.copy_saving.set()
                async with asyncio.timeout(WAIT):
                    await self.runner_waiting.wait()
            await self.store.save(record)
            self.saved.append(record.task.status.state)


class Overlapping(AgentExecutor):
    """The task WORKING, then (once the deferred copy's save holds the lock) an artifact and COMPLETED."""

    def __init__(self) -> None:
        self.engine: TaskEngine | None = None
        self.cluster: Cluster | None = None

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        # The task itself, WORKING (as ``@agent`` starts): a first state whose write is deferred.
        await queue.enqueue_event(
            Task(id=context.task_id, context_id=context.context_id, status=TaskStatus(state=TaskState.WORKING))
        )
        engine, cluster = self.engine, self.cluster
        assert engine is not None
        assert cluster is not None
        active = engine.registry[context.task_id]
        # The deferred write's timer, fired now: it takes its copy (WORKING) and starts saving it.
        assert active.record is not None
        engine._write_deferred(active, active.record)
        async with asyncio.timeout(WAIT):
            await cluster.copy_saving.wait()
        await updater.artifact("the answer")
        await updater.complete()


async def test_the_deferred_copy_never_replaces_the_terminal_body_encoded_while_it_saved() -> None:
    store = MemoryTaskStore()
    executor = Overlapping()
    engine = TaskEngine(executor, store=store)
    await engine.start()
    cluster = Cluster(store)
    executor.engine, executor.cluster = engine, cluster
    engine.cluster = cluster
    try:
        message = Message(message_id="m-1", role=Role.USER, parts=[Part(text="hi")], context_id="c-1")
        task = Task(
            id="t-1",
            context_id="c-1",
            status=TaskStatus(state=TaskState.SUBMITTED, timestamp=utc_now()),
            history=[message],
        )
        # As the accepting replica stores it (SUBMITTED, claimed by this process: ``Front._start_here``).
        accepted = TaskRecord(task, "", "anonymous", body=task.to_json())
        await store.save(accepted)
        pending = engine.admit_claimed(SendMessageRequest(message=message), CallContext(), accepted, fresh=True)
        async with asyncio.timeout(WAIT):
            answer = await engine.outcome(pending, False)
        assert isinstance(answer, bytes)
        answered = Task.model_validate_json(answer)
        assert answered.status.state is TaskState.COMPLETED, answered.status
        assert [part.text for artifact in answered.artifacts for part in artifact.parts] == ["the answer"]
        # Both writes happened, in this order: the copy's (WORKING), then the runner's terminal one.
        assert cluster.saved == [TaskState.WORKING, TaskState.COMPLETED]
        stored = await store.get("t-1", tenant="", owner="anonymous")
        assert stored is not None
        assert stored.task.status.state is TaskState.COMPLETED
        assert [part.text for artifact in stored.task.artifacts for part in artifact.parts] == ["the answer"]
    finally:
        engine.cluster = None
        await engine.shutdown()
