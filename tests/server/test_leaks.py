"""ARCHITECTURE §4: "no leaks, proven by a test that runs 10,000 tasks and checks the registry is empty".

10,000 sequential tasks through the engine (blocking sends, fully consumed streams, message-only replies, multi-turn
tasks, cancels of interrupted tasks) leave no ActiveTask, tap or asyncio task behind, and no bus log but the finished
streams' logs kept for resumes, within their cap.
"""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from relaykit._enums import TaskState
from relaykit._requests import SendMessageRequest
from relaykit._types import Message, Task
from relaykit.backends.memory import LocalEventBus
from relaykit.server import AgentExecutor, EventQueue, RequestContext, TaskEngine, TaskUpdater
from relaykit.server._active import ActiveTask, PendingRequest

TASKS = 10_000
BUDGET = 20.0  # seconds for the whole loop: it runs in CI


class Mixed(AgentExecutor):
    """Dispatches on the message text: a reply Message, a streamed multi-chunk task, a question, or a plain task."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        text = context.text
        if text == "message":
            await queue.enqueue_event(Message.agent("a bare reply"))
            return
        u = TaskUpdater(queue, context)
        if text == "ask" and not context.is_continuation:
            await u.requires_input("and then?")
            return
        await u.working()
        if text == "stream":
            for i in range(3):
                await u.artifact(f"chunk {i}", artifact_id="out", append=i > 0, last_chunk=i == 2)
            await u.complete()
            return
        await u.complete_with_text(f"done: {text}")


def _live(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, kind))


@pytest.mark.timeout(60)
async def test_ten_thousand_sequential_tasks_leave_nothing_behind() -> None:
    engine = TaskEngine(Mixed())
    await engine.start()
    tasks_before = len(asyncio.all_tasks())
    counts = {"send": 0, "stream": 0, "abandoned stream": 0, "message": 0, "multi-turn": 0, "cancel": 0}
    started = time.monotonic()

    async def loop() -> None:
        for i in range(TASKS):
            kind = i % 10
            if kind < 5:
                result = await engine.send(SendMessageRequest(message=Message.user(f"task {i}")))
                assert isinstance(result, Task)
                assert result.status.state is TaskState.COMPLETED
                counts["send"] += 1
            elif kind < 8 and i % 100 == 5:
                # A client that disconnects after the first event: its task runs on, on its own.
                stream = engine.stream(SendMessageRequest(message=Message.user("stream")))
                first = await anext(stream)
                assert isinstance(first[1], Task)
                await stream.aclose()
                counts["abandoned stream"] += 1
            elif kind < 8:
                items = [item async for item in engine.stream(SendMessageRequest(message=Message.user("stream")))]
                assert len(items) == 6  # Task, WORKING, 3 chunks, COMPLETED
                counts["stream"] += 1
            elif kind == 8:
                reply = await engine.send(SendMessageRequest(message=Message.user("message")))
                assert isinstance(reply, Message)
                counts["message"] += 1
            else:
                paused = await engine.send(SendMessageRequest(message=Message.user("ask")))
                assert isinstance(paused, Task)
                assert paused.status.state is TaskState.INPUT_REQUIRED
                if i % 20 == 9:
                    canceled = await engine.cancel(paused.id)
                    assert canceled.status.state is TaskState.CANCELED
                    counts["cancel"] += 1
                else:
                    done = await engine.send(SendMessageRequest(message=Message.user("more", task_id=paused.id)))
                    assert isinstance(done, Task)
                    assert done.status.state is TaskState.COMPLETED
                    counts["multi-turn"] += 1

    try:
        await asyncio.wait_for(loop(), BUDGET * 2)
        runners = {a.runner for a in engine.registry.values() if a.runner is not None}
        if runners:  # the last abandoned streams' tasks may still be finishing
            await asyncio.wait_for(asyncio.wait(runners), 5)
        elapsed = time.monotonic() - started

        assert sum(counts.values()) == TASKS
        assert len(engine.registry) == 0
        assert engine.running_executions == 0
        assert engine.bus.tap_count() == 0
        # Finished tasks' logs are dropped, but for those of the streamed ones, kept for resumes up to the cap.
        bus = engine.bus
        assert isinstance(bus, LocalEventBus)
        assert bus.log_count() == bus.ended_count() == bus.max_ended < counts["stream"]
        assert bus.ended_bytes() <= bus.max_ended_bytes
        assert len(asyncio.all_tasks()) == tasks_before
        assert _live(ActiveTask) == 0
        assert _live(PendingRequest) == 0
        assert elapsed < BUDGET, f"{TASKS} tasks took {elapsed:.1f}s"
    finally:
        await asyncio.wait_for(engine.shutdown(grace=0), 5)


async def test_stored_tasks_and_remembered_messages_stay_out_of_the_cyclic_collector() -> None:
    """A server holding many finished tasks (memory store) and many remembered messageIds (idempotency window) must
    not make every full garbage collection walk them: rows and settled entries are plain tuples, which CPython stops
    tracking. (As objects, 2,000 tasks added ~4,000 tracked objects; each full collection walked all of them.)"""
    engine = TaskEngine(Mixed())
    await engine.start()
    try:
        await engine.send(SendMessageRequest(message=Message.user("warm-up")))
        gc.collect()
        before = len(gc.get_objects())
        for i in range(2_000):
            done = await engine.send(SendMessageRequest(message=Message.user(f"task {i}")))
            assert isinstance(done, Task)
            assert done.status.state is TaskState.COMPLETED
        assert len(engine.recent) == 2_001  # every messageId is remembered
        gc.collect()
        assert len(gc.get_objects()) - before < 200
    finally:
        await asyncio.wait_for(engine.shutdown(grace=0), 5)
