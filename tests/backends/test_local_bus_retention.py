"""``LocalEventBus``: how long, and within what, a finished task's log is kept for resumes.

The embedded bus keeps a finished task's log (terminal, its last tap closed) when a tap was ever opened on it, for
``ended_ttl`` seconds, within ``max_ended`` logs and ``max_ended_bytes``, the oldest dropped first; a log nobody ever
read (a blocking send's) and a bare Message's are dropped at once. Time is the bus's own ``clock``, set by the tests:
nothing sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

from relaykit._enums import TaskState
from relaykit._types import Artifact, Message, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent
from relaykit.backends._bus import END
from relaykit.backends.memory import LocalEventBus

WAIT = 5.0
CONTEXT = "ctx-retention"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chunk(task_id: str, text: str) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(task_id=task_id, context_id=CONTEXT, artifact=Artifact.of(text, artifact_id="a"))


def done(task_id: str) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task_id, context_id=CONTEXT, status=TaskStatus(state=TaskState.COMPLETED))


def bus_with_clock(**options: Any) -> tuple[LocalEventBus, Clock]:
    bus = LocalEventBus(**options)
    clock = Clock()
    bus.clock = clock
    return bus, clock


async def streamed(bus: LocalEventBus, task_id: str, *, chunks: int = 3, text: str = "x") -> None:
    """A task streamed to a reader that left: its log was read, then the task ended."""
    tap, _ = await bus.open(task_id)
    bus.close_tap(tap)
    for _ in range(chunks):
        bus.append(task_id, chunk(task_id, text), None)
    bus.append(task_id, done(task_id), None, terminal=True)
    bus.forget(task_id)


async def resumable(bus: LocalEventBus, task_id: str, after: int = 1) -> bool:
    """Whether a resume after ``after`` is replayed from the log (no gap); the log's whole tail is checked."""
    tap, gap = await bus.open(task_id, after=after)
    try:
        if gap:
            return False
        seqs = []
        while (item := await asyncio.wait_for(tap.get(), WAIT))[0] != END[0]:
            seqs.append(item[0])
            if isinstance(item[1], TaskStatusUpdateEvent):
                break
        assert seqs == list(range(after + 1, bus.last_seq(task_id) + 1))
        return True
    finally:
        bus.close_tap(tap)
        bus.forget(task_id)  # as the engine does after a finished task's resume


async def test_a_read_log_is_kept_and_a_never_read_one_is_dropped() -> None:
    bus, _ = bus_with_clock()
    await streamed(bus, "read")
    for n in range(3):  # a blocking send's: nobody ever had its event ids
        bus.append("unread", chunk("unread", f"{n}"), None)
    bus.append("unread", done("unread"), None, terminal=True)
    bus.forget("unread")
    assert bus.log_count() == bus.ended_count() == 1
    assert await resumable(bus, "read")
    # Kept as bytes only, at about their size.
    size = bus.ended_bytes()
    assert 4 * 100 < size < 4 * 1000, size


async def test_a_bare_message_reply_is_not_kept() -> None:
    bus, _ = bus_with_clock()
    tap, _ = await bus.open("provisional")  # a stream whose agent answered with a Message: it belongs to no task
    bus.append("provisional", Message.agent("hi"), None, terminal=True)
    bus.close_tap(tap)
    bus.forget("provisional")
    assert bus.log_count() == bus.ended_count() == 0


async def test_a_kept_log_expires_after_ended_ttl() -> None:
    bus, clock = bus_with_clock(ended_ttl=60.0)
    await streamed(bus, "old")
    clock.now += 30
    await streamed(bus, "young")
    clock.now += 31  # "old" is 61 s past its end, "young" 31 s
    assert not await resumable(bus, "old")
    assert await resumable(bus, "young")
    assert bus.ended_count() == 1
    clock.now += 30
    await streamed(bus, "another")  # keeping one more drops the expired ones too
    assert bus.ended_count() == 1
    assert await resumable(bus, "another")


async def test_kept_logs_are_capped_by_count_oldest_first() -> None:
    bus, _ = bus_with_clock(max_ended=3)
    for n in range(5):
        await streamed(bus, f"t{n}")
    assert bus.ended_count() == 3
    assert [await resumable(bus, f"t{n}") for n in range(5)] == [False, False, True, True, True]
    # The resumes of the dropped ones opened (and closed) logs of their own: nothing is left of them.
    assert bus.log_count() == bus.ended_count() == 3


async def test_kept_logs_are_capped_by_bytes_and_a_log_bigger_than_the_cap_is_not_kept() -> None:
    cap = 64 * 1024
    bus, _ = bus_with_clock(max_ended_bytes=cap)
    for n in range(20):
        await streamed(bus, f"t{n}", chunks=4, text="y" * 2000)  # about 8 KB each
        assert bus.ended_bytes() <= cap
    assert 0 < bus.ended_count() < 20
    assert await resumable(bus, "t19")
    assert not await resumable(bus, "t0")
    await streamed(bus, "huge", chunks=2, text="z" * cap)
    assert not await resumable(bus, "huge")
    assert bus.ended_bytes() <= cap


async def test_many_short_streamed_tasks_hold_memory_within_the_caps() -> None:
    bus, _ = bus_with_clock(max_ended=50, max_ended_bytes=1 << 20)
    for n in range(5000):
        await streamed(bus, f"t{n}")
    assert bus.log_count() == bus.ended_count() == 50
    assert bus.ended_bytes() <= 1 << 20
    assert await resumable(bus, "t4999")


async def test_evicting_a_kept_log_beyond_max_logs_forgets_its_bytes() -> None:
    bus, _ = bus_with_clock(max_logs=2)
    await streamed(bus, "a")
    await streamed(bus, "b")
    one = bus.ended_bytes() // 2
    bus.append("live", chunk("live", "x"), None)  # a third log: the least recently used ("a") goes
    assert bus.log_count() == 2
    assert bus.ended_count() == 1
    assert bus.ended_bytes() == one
    assert await resumable(bus, "b")
