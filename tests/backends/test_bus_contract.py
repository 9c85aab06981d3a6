"""The ``EventBus`` contract (CONTRACT "SSE and resume"), run against ``LocalEventBus`` and ``RedisEventBus``.

Both in-process; the Redis bus on a fresh namespace of the test Redis (``redis_namespace``: its keys are deleted at
teardown; skipped when Redis is down, except under ``CI=true``). What every bus must do:

* one per-task sequence: ``publish`` numbers 1, 2, 3…, continuing from ``base_seq`` for a task the bus has no log
  of, and ``prepare`` reports where the log stands, so a publisher continues after it;
* ``open(after=X)`` replays exactly the events after X, then every new one; X older than the retained log (or
  newer than its top) is reported as a gap;
* a tap that falls behind is cut off (``TapOverflowError`` after the items it holds) and ``reopen`` refills it from
  the log; a log that no longer reaches back makes ``reopen`` answer False (``lenient``: take what is left);
* ``publish_private`` (a continuation's opening snapshot) takes the next number and reaches the taps of its execution
  alone: every other tap, live or replayed, counts it as seen and goes on gapless;
* ``Tap``: an out-of-sequence push cuts the tap off (a lost event is never papered over), a repeat is dropped.

Redis only (a log shared by processes): the ``execution=`` filter (other executions' events skipped, events of no
execution delivered, ``publish_error`` for its own execution's tap only), two bus instances on one namespace ("two
processes": one publishes, the other's tap gets every event exactly once, in order), a lost entry detected across
processes, and ``ConflictError`` when a second publisher appends a sequence number at or below the top.

Every wait is bounded (``WAIT``); nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from relaykit._enums import TaskState
from relaykit._errors import A2AError, ServiceUnavailableError, UnsupportedOperationError
from relaykit._types import Artifact, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent, stream_json
from relaykit.backends import ConflictError
from relaykit.backends._bus import END, Tap, TapOverflowError
from relaykit.backends.memory import LocalEventBus

WAIT = 5.0  # seconds: the bound on every wait for an event
CLOSE_WAIT = 1.0  # seconds: a bus closes in milliseconds
CONTEXT = "ctx-bus-contract"

Bus = Any  # LocalEventBus | RedisEventBus
MakeBus = Callable[..., Awaitable[Bus]]


# --- events ------------------------------------------------------------------------------------------------------


def chunk(task_id: str, n: int) -> TaskArtifactUpdateEvent:
    """Event number ``n`` of a test stream: one artifact chunk whose text is ``e{n}``."""
    return TaskArtifactUpdateEvent(
        task_id=task_id,
        context_id=CONTEXT,
        artifact=Artifact.of(f"e{n}", artifact_id="a"),
        append=n > 1,
    )


def status(task_id: str, state: TaskState) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task_id, context_id=CONTEXT, status=TaskStatus(state=state))


def text_of(item: Any) -> str:
    """The chunk text of a tap item, read from its encoded StreamResponse (what an SSE client would get)."""
    body = json.loads(item[2])
    if "artifactUpdate" in body:
        return str(body["artifactUpdate"]["artifact"]["parts"][0]["text"])
    if "statusUpdate" in body:
        return str(body["statusUpdate"]["status"]["state"])
    if "task" in body:
        return "task " + str(body["task"]["status"]["state"])
    raise AssertionError(f"unexpected event {body}")


async def publish_range(bus: Bus, task_id: str, first: int, last: int, **options: Any) -> list[int]:
    """Publish the chunks ``first..last`` (inclusive); returns the sequence numbers the bus gave them."""
    return [await bus.publish(task_id, chunk(task_id, n), None, **options) for n in range(first, last + 1)]


async def take(tap: Tap, count: int) -> list[Any]:
    """The next ``count`` items of ``tap`` (each wait bounded)."""
    return [await asyncio.wait_for(tap.get(), WAIT) for _ in range(count)]


async def seqs_and_texts(tap: Tap, count: int) -> list[tuple[int, str]]:
    return [(item[0], text_of(item)) for item in await take(tap, count)]


def expected(first: int, last: int) -> list[tuple[int, str]]:
    return [(n, f"e{n}") for n in range(first, last + 1)]


async def assert_next_is(bus: Bus, tap: Tap, task_id: str, n: int) -> None:
    """Publish chunk ``n`` and check it is the very next item of ``tap``: nothing extra (no repeat, no stray event)
    was queued before it."""
    await bus.publish(task_id, chunk(task_id, n), None)
    assert await seqs_and_texts(tap, 1) == [(n, f"e{n}")]


# --- buses -------------------------------------------------------------------------------------------------------


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
async def make_bus(request: pytest.FixtureRequest) -> AsyncIterator[MakeBus]:
    """``await make_bus(retain=…, tap_limit=…)``: a started bus of the parametrised kind (several Redis buses share
    one fresh namespace, like the processes of one deployment); all are closed at teardown.

    ``retain`` bounds the log: the local bus's replay ring, or the Redis stream's (approximate) ``maxlen``.
    """
    kind = request.param
    made: list[Bus] = []
    url = namespace = ""
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        namespace = request.getfixturevalue("redis_namespace")

    async def make(*, retain: int = 1000, tap_limit: int = 10_000) -> Bus:
        bus: Bus
        if kind == "local":
            bus = LocalEventBus(replay=retain, tap_limit=tap_limit)
        else:
            from relaykit.backends.redis import RedisEventBus

            bus = RedisEventBus(url, namespace=namespace, maxlen=retain, tap_limit=tap_limit, outage_timeout=WAIT)
        made.append(bus)
        await bus.start()
        return bus

    yield make
    for bus in made:
        await close_bus(bus)


async def close_bus(bus: Bus) -> None:
    """``bus.close()``, bounded. Should a Redis bus's close hang again (``test_redis_bus_close_never_hangs``: redis-py
    can swallow its reader's cancellation), its reader is cancelled once more, so that one bug fails one test instead
    of stalling every other test until its timeout."""
    closing = asyncio.ensure_future(bus.close())
    done, _ = await asyncio.wait({closing}, timeout=CLOSE_WAIT)
    if not done and getattr(bus, "_reader", None) is not None:
        bus._reader.cancel()
    await asyncio.wait_for(closing, WAIT)


@pytest.fixture
async def bus(make_bus: MakeBus) -> Bus:
    return await make_bus()


@pytest.fixture
async def redis_bus_factory(redis_url: str, redis_namespace: str) -> AsyncIterator[MakeBus]:
    """Redis buses on one fresh namespace ("processes" of one deployment), closed at teardown."""
    from relaykit.backends.redis import RedisEventBus

    made: list[Any] = []

    async def make(*, retain: int = 1000, tap_limit: int = 10_000) -> Any:
        bus = RedisEventBus(
            redis_url, namespace=redis_namespace, maxlen=retain, tap_limit=tap_limit, outage_timeout=WAIT
        )
        made.append(bus)
        await bus.start()
        return bus

    yield make
    for bus in made:
        await close_bus(bus)


async def oldest_retained(bus: Bus, task_id: str) -> int:
    """The sequence number of the oldest event the bus still holds for ``task_id``."""
    if isinstance(bus, LocalEventBus):
        return int(bus._logs[task_id].ring[0][0])
    entries = await bus.client.xrange(bus.key(task_id), count=1)
    return int(entries[0][0].split(b"-")[0])


# --- numbering ---------------------------------------------------------------------------------------------------


async def test_publish_numbers_each_task_from_one(bus: Bus) -> None:
    assert await publish_range(bus, "t1", 1, 3) == [1, 2, 3]
    assert await publish_range(bus, "t2", 1, 2) == [1, 2]  # one sequence per task
    assert await publish_range(bus, "t1", 4, 4) == [4]
    assert bus.last_seq("t1") == 4
    assert bus.last_seq("t2") == 2
    assert bus.last_seq("unknown", 7) == 7


async def test_publish_continues_from_base_seq(bus: Bus) -> None:
    # A task whose stored event_seq is 41 (e.g. after a restart): its next event is 42, and the next after it 43.
    assert await bus.publish("t", chunk("t", 42), None, base_seq=41) == 42
    assert await bus.publish("t", chunk("t", 43), None, base_seq=41) == 43
    tap, gap = await bus.open("t", after=41)
    assert not gap
    assert await seqs_and_texts(tap, 2) == expected(42, 43)
    bus.close_tap(tap)


async def test_prepare_reports_the_top_and_publishing_continues_after_it(bus: Bus) -> None:
    assert await bus.prepare("fresh", 9) == 9  # no log: the stored sequence
    assert await bus.publish("fresh", chunk("fresh", 10), None, base_seq=9) == 10
    await publish_range(bus, "t", 1, 5)
    # The log is ahead of the stored task (chunks are published before their checkpoint): prepare says 5.
    assert await bus.prepare("t", 2) == 5
    assert await bus.publish("t", chunk("t", 6), None, base_seq=2) == 6


# --- replay --------------------------------------------------------------------------------------------------------


async def test_open_after_replays_exactly_the_later_events_then_live_ones(bus: Bus) -> None:
    await publish_range(bus, "t", 1, 5)
    for after in (0, 2, 4, 5):
        tap, gap = await bus.open("t", after=after)
        assert not gap, after
        assert await seqs_and_texts(tap, 5 - after) == expected(after + 1, 5)
        assert tap.pending() == 0
        bus.close_tap(tap)
    tap, gap = await bus.open("t", after=3)
    assert not gap
    await publish_range(bus, "t", 6, 7)
    assert await seqs_and_texts(tap, 4) == expected(4, 7)
    await assert_next_is(bus, tap, "t", 8)
    bus.close_tap(tap)


async def test_a_finished_tasks_log_outlives_its_last_reader(bus: Bus) -> None:
    # A client streamed a task, left, and comes back after the task ended with its Last-Event-ID: the log still
    # holds the events it missed (the Redis stream expires ``ttl`` after the end; the local bus keeps a finished
    # log that was read for as long). Read back from a log kept as bytes only, the events are whole again.
    reader, gap = await bus.open("t")
    assert not gap
    await publish_range(bus, "t", 1, 4)
    await bus.publish("t", status("t", TaskState.COMPLETED), None, terminal=True)
    assert await seqs_and_texts(reader, 5) == [*expected(1, 4), (5, "TASK_STATE_COMPLETED")]
    bus.close_tap(reader)
    bus.forget("t")
    whole = [*expected(1, 4), (5, "TASK_STATE_COMPLETED")]
    for after in (2, 2, 5):  # twice from one id: a resume does not use the log up
        tap, gap = await bus.open("t", after=after, base_seq=5)
        assert not gap, after
        items = await take(tap, 5 - after)
        assert [(item[0], text_of(item)) for item in items] == whole[after:]
        assert tap.pending() == 0
        if items:
            assert isinstance(items[-1][1], TaskStatusUpdateEvent)
            assert items[-1][1].status.state is TaskState.COMPLETED
            assert all(isinstance(item[1], TaskArtifactUpdateEvent) for item in items[:-1])
        bus.close_tap(tap)
        bus.forget("t")


async def test_open_without_after_gets_only_new_events(bus: Bus) -> None:
    await publish_range(bus, "t", 1, 3)
    tap, gap = await bus.open("t")
    assert not gap
    assert tap.pending() == 0
    await publish_range(bus, "t", 4, 5)
    assert await seqs_and_texts(tap, 2) == expected(4, 5)
    bus.close_tap(tap)


async def test_open_after_an_event_the_log_no_longer_holds_reports_a_gap(make_bus: MakeBus) -> None:
    # The Redis stream is trimmed approximately (whole nodes of ~100 entries), so publish well past that.
    bus = await make_bus(retain=10)
    total = 400
    await publish_range(bus, "t", 1, total)
    oldest = await oldest_retained(bus, "t")
    assert 2 < oldest <= total - 9, oldest  # trimmed, and at least `retain` kept
    for after in (0, 1, oldest - 2):
        tap, gap = await bus.open("t", after=after)
        assert gap, (after, oldest)
        bus.close_tap(tap)
    # Exactly at the edge the log still covers it: no gap, every retained event replayed.
    tap, gap = await bus.open("t", after=oldest - 1)
    assert not gap
    assert await seqs_and_texts(tap, total - oldest + 1) == expected(oldest, total)
    bus.close_tap(tap)
    # An id newer than anything published is not covered either.
    tap, gap = await bus.open("t", after=total + 5)
    assert gap
    bus.close_tap(tap)


# --- taps that fall behind -----------------------------------------------------------------------------------------


async def test_overflowed_tap_raises_after_its_items_and_reopen_refills_it(make_bus: MakeBus) -> None:
    bus = await make_bus(tap_limit=3)
    tap, _ = await bus.open("t")
    await publish_range(bus, "t", 1, 7)  # nobody reads: the tap holds 3 and is cut off
    assert tap.overflowed
    assert await seqs_and_texts(tap, 3) == expected(1, 3)
    with pytest.raises(TapOverflowError) as caught:
        await asyncio.wait_for(tap.get(), WAIT)
    assert caught.value.last_seq == 3
    assert await bus.reopen(tap)
    assert await seqs_and_texts(tap, 4) == expected(4, 7)
    await assert_next_is(bus, tap, "t", 8)
    bus.close_tap(tap)


async def test_reopen_when_the_log_no_longer_reaches_back(make_bus: MakeBus) -> None:
    bus = await make_bus(retain=10, tap_limit=2)
    tap, _ = await bus.open("t")
    total = 400
    await publish_range(bus, "t", 1, total)
    assert await seqs_and_texts(tap, 2) == expected(1, 2)
    with pytest.raises(TapOverflowError):
        await asyncio.wait_for(tap.get(), WAIT)
    assert not await bus.reopen(tap)  # events 3.. are gone: the reader must start over from a snapshot
    oldest = await oldest_retained(bus, "t")
    # lenient: the reader has a snapshot; take whatever the log still holds after where it stands.
    assert await bus.reopen(tap, lenient=True)
    assert await seqs_and_texts(tap, total - oldest + 1) == expected(oldest, total)
    await assert_next_is(bus, tap, "t", total + 1)
    bus.close_tap(tap)


async def test_closed_tap_gets_nothing_more(bus: Bus) -> None:
    tap, _ = await bus.open("t")
    await publish_range(bus, "t", 1, 1)
    assert bus.tap_count("t") == 1
    bus.close_tap(tap)
    assert bus.tap_count("t") == 0
    await publish_range(bus, "t", 2, 3)
    assert (await asyncio.wait_for(tap.get(), WAIT))[0] == 1
    assert await asyncio.wait_for(tap.get(), WAIT) is END


# --- one execution's private events --------------------------------------------------------------------------------


def opening(task_id: str) -> bytes:
    """What ``publish_private`` carries: a task snapshot's StreamResponse."""
    return stream_json(Task(id=task_id, context_id=CONTEXT, status=TaskStatus(state=TaskState.INPUT_REQUIRED)))


async def test_a_private_event_reaches_its_executions_tap_alone(bus: Bus) -> None:
    await publish_range(bus, "t", 1, 2)
    mine, _ = await bus.open("t", execution="m1")
    every, _ = await bus.open("t")
    other, _ = await bus.open("t", execution="m2")
    assert await bus.publish_private("t", None, opening("t"), execution="m1") == 3
    assert bus.last_seq("t") == 3
    await publish_range(bus, "t", 4, 5)
    got = await take(mine, 3)
    assert [(item[0], text_of(item)) for item in got] == [(3, "task TASK_STATE_INPUT_REQUIRED"), (4, "e4"), (5, "e5")]
    assert isinstance(got[0][1], Task)  # decoded for the reader that needs the object
    assert await seqs_and_texts(every, 2) == expected(4, 5)
    # Counted as seen: each tap goes on gapless, never cut off for the number it did not get.
    await bus.publish("t", chunk("t", 6), None)
    for tap in (mine, every):
        assert await seqs_and_texts(tap, 1) == [(6, "e6")]
        assert tap.pending() == 0
        assert not tap.overflowed
    # Replayed from the log (a resume, a refill), it is nobody's: not even its own execution's caller resumes into
    # it (its stream had it first), and whoever resumes goes on gapless after it.
    for after, seqs in ((0, [1, 2, 4, 5, 6]), (2, [4, 5, 6]), (3, [4, 5, 6])):
        replayed, gap = await bus.open("t", after=after)
        assert not gap, after
        assert [seq for seq, _ in await seqs_and_texts(replayed, len(seqs))] == seqs
        assert replayed.pending() == 0
        bus.close_tap(replayed)
    # Nor when it is the newest event: a tap replayed up to it goes on with the next one.
    assert await bus.publish_private("t", None, opening("t"), execution="m2") == 7
    replayed, gap = await bus.open("t", after=5)
    assert not gap
    assert await seqs_and_texts(replayed, 1) == [(6, "e6")]
    await assert_next_is(bus, replayed, "t", 8)
    assert not replayed.overflowed
    bus.close_tap(replayed)
    assert await seqs_and_texts(other, 5) == [*expected(4, 6), (7, "task TASK_STATE_INPUT_REQUIRED"), (8, "e8")]
    for tap in (mine, every, other):
        bus.close_tap(tap)


@pytest.mark.redis
async def test_a_private_event_crosses_processes_to_its_executions_tap_alone(redis_bus_factory: MakeBus) -> None:
    publisher, reader = await redis_bus_factory(), await redis_bus_factory()
    mine, _ = await reader.open("t", execution="m1")
    every, _ = await reader.open("t")
    await publisher.publish("t", chunk("t", 1), None, execution="m1")
    assert await publisher.publish_private("t", None, opening("t"), execution="m1") == 2
    await publisher.publish("t", chunk("t", 3), None, execution="m1")
    assert await seqs_and_texts(mine, 3) == [(1, "e1"), (2, "task TASK_STATE_INPUT_REQUIRED"), (3, "e3")]
    assert await seqs_and_texts(every, 2) == [(1, "e1"), (3, "e3")]
    # Replayed from the shared log: the execution's own tap (a repeat of its message) gets it, no other tap does.
    replayed_mine, _ = await reader.open("t", after=0, execution="m1")
    assert [seq for seq, _ in await seqs_and_texts(replayed_mine, 3)] == [1, 2, 3]
    replayed_every, _ = await reader.open("t", after=0)
    assert [seq for seq, _ in await seqs_and_texts(replayed_every, 2)] == [1, 3]
    for tap in (mine, every, replayed_mine, replayed_every):
        assert not tap.overflowed
        reader.close_tap(tap)


# --- Tap rules (shared by both buses) ---------------------------------------------------------------------------------


def _item(n: int) -> tuple[int, Any, bytes]:
    event = chunk("t", n)
    return (n, event, stream_json(event))


async def test_tap_cuts_itself_off_on_an_out_of_sequence_push() -> None:
    tap = Tap("t", 100)
    tap.fill((), 0)
    tap.push(_item(1))
    tap.push(_item(1))  # a repeat (two feeds may carry it): dropped
    tap.push(_item(3))  # 2 is missing: never papered over
    assert tap.overflowed
    tap.push(_item(2))  # too late: the tap stays cut off until its reader refills it
    assert [item[0] for item in await take(tap, 1)] == [1]
    with pytest.raises(TapOverflowError) as caught:
        await asyncio.wait_for(tap.get(), WAIT)
    assert caught.value.last_seq == 1


async def test_tap_skip_keeps_the_sequence_gapless() -> None:
    tap = Tap("t", 100)
    tap.fill((), 0)
    tap.push(_item(1))
    tap.skip(2)  # not for this tap, but counted as seen
    tap.push(_item(3))
    assert not tap.overflowed
    tap.skip(5)  # 4 was never seen: out of sequence
    assert tap.overflowed
    assert [item[0] for item in await take(tap, 2)] == [1, 3]
    with pytest.raises(TapOverflowError):
        await asyncio.wait_for(tap.get(), WAIT)


async def test_tap_over_its_limit_is_cut_off() -> None:
    tap = Tap("t", 2)
    tap.fill((), 0)
    for n in (1, 2, 3):
        tap.push(_item(n))
    assert tap.overflowed
    assert [item[0] for item in await take(tap, 2)] == [1, 2]
    with pytest.raises(TapOverflowError) as caught:
        await asyncio.wait_for(tap.get(), WAIT)
    assert caught.value.last_seq == 2


# --- Redis only: a log shared by processes ----------------------------------------------------------------------------


@pytest.mark.redis
async def test_execution_filter_on_a_tap_of_the_publishing_process(redis_bus_factory: MakeBus) -> None:
    bus = await redis_bus_factory()
    await _check_execution_filter(bus, bus)


@pytest.mark.redis
async def test_execution_filter_on_a_tap_of_another_process(redis_bus_factory: MakeBus) -> None:
    publisher, reader = await redis_bus_factory(), await redis_bus_factory()
    await _check_execution_filter(publisher, reader)


async def _check_execution_filter(publisher: Any, reader: Any) -> None:
    task = "t"
    mine, _ = await reader.open(task, execution="m1")
    other, _ = await reader.open(task, execution="m2")
    every, _ = await reader.open(task)
    await publisher.publish(task, chunk(task, 1), None, execution="m1")
    await publisher.publish(task, chunk(task, 2), None, execution="m2")
    await publisher.publish(task, status(task, TaskState.FAILED), None)  # no execution: for every waiter
    error = ServiceUnavailableError("the worker could not run this message; retry")
    assert await publisher.publish_error(task, "m1", error) == 4
    await publisher.publish(task, chunk(task, 5), None, execution="m2")

    got = await take(mine, 3)
    assert [item[0] for item in got] == [1, 3, 4]
    assert text_of(got[0]) == "e1"
    assert text_of(got[1]) == "TASK_STATE_FAILED"
    assert isinstance(got[2][1], A2AError)
    assert isinstance(got[2][1], ServiceUnavailableError)
    assert "could not run this message" in str(got[2][1])

    assert await seqs_and_texts(other, 3) == [(2, "e2"), (3, "TASK_STATE_FAILED"), (5, "e5")]
    assert await seqs_and_texts(every, 4) == [(1, "e1"), (2, "e2"), (3, "TASK_STATE_FAILED"), (5, "e5")]
    for tap in (mine, other, every):
        assert tap.pending() == 0
        assert not tap.overflowed  # skipped events kept each tap's sequence gapless

    # The same rules when the events are replayed from the stream instead of delivered live.
    replayed_mine, gap = await reader.open(task, after=0, execution="m1")
    assert not gap
    got = await take(replayed_mine, 3)
    assert [item[0] for item in got] == [1, 3, 4]
    assert isinstance(got[2][1], ServiceUnavailableError)
    replayed_every, gap = await reader.open(task, after=0)
    assert not gap
    assert [item[0] for item in await take(replayed_every, 4)] == [1, 2, 3, 5]
    for tap in (mine, other, every, replayed_mine, replayed_every):
        reader.close_tap(tap)


@pytest.mark.redis
async def test_two_processes_one_publishes_the_others_tap_gets_every_event_once_in_order(
    redis_bus_factory: MakeBus,
) -> None:
    publisher, reader = await redis_bus_factory(), await redis_bus_factory()
    live, _ = await reader.open("t")
    total = 200
    seqs = await publish_range(publisher, "t", 1, total)
    assert seqs == list(range(1, total + 1))
    assert await seqs_and_texts(live, total) == expected(1, total)
    # A reader joining mid-way with after=X: exactly the events after X, then the live ones.
    late, gap = await reader.open("t", after=150)
    assert not gap
    await publish_range(publisher, "t", total + 1, total + 10)
    assert await seqs_and_texts(late, 60) == expected(151, total + 10)
    assert await seqs_and_texts(live, 10) == expected(total + 1, total + 10)
    await assert_next_is(publisher, live, "t", total + 11)
    assert await seqs_and_texts(late, 1) == [(total + 11, f"e{total + 11}")]
    for tap in (live, late):
        assert tap.pending() == 0
        assert not tap.overflowed
        reader.close_tap(tap)


@pytest.mark.redis
async def test_two_processes_many_tasks_at_once(redis_bus_factory: MakeBus) -> None:
    publisher, reader = await redis_bus_factory(), await redis_bus_factory()
    tasks = [f"t{i}" for i in range(30)]
    taps = {task: (await reader.open(task))[0] for task in tasks}
    await asyncio.gather(*(publish_range(publisher, task, 1, 20) for task in tasks))
    for task in tasks:
        assert await seqs_and_texts(taps[task], 20) == expected(1, 20), task
        assert taps[task].pending() == 0
        reader.close_tap(taps[task])


@pytest.mark.redis
async def test_a_lost_entry_is_detected_by_the_other_process(redis_bus_factory: MakeBus) -> None:
    publisher, reader = await redis_bus_factory(), await redis_bus_factory()
    tap, _ = await reader.open("t")
    await publish_range(publisher, "t", 1, 1)
    assert await seqs_and_texts(tap, 1) == expected(1, 1)
    # Entry 3 lands without entry 2 (a write lost with a Redis restart, say): the reader must notice.
    event = chunk("t", 3)
    await publisher.client.xadd(publisher.key("t"), {b"d": stream_json(event)}, id="3-0")
    with pytest.raises(TapOverflowError) as caught:
        await asyncio.wait_for(tap.get(), WAIT)
    assert caught.value.last_seq == 1
    assert not await reader.reopen(tap)  # the log has no event 2 either: start over from a snapshot
    reader.close_tap(tap)


@pytest.mark.redis
async def test_second_publisher_at_or_below_the_top_gets_conflict_error(redis_bus_factory: MakeBus) -> None:
    first, second = await redis_bus_factory(), await redis_bus_factory()
    watcher, _ = await first.open("t")
    await publish_range(first, "t", 1, 3)
    # A presumed-dead runner (it does not know the log moved on) appends with its old numbering.
    for base in (0, 1, 2):
        with pytest.raises(ConflictError):
            await second.publish("t", chunk("t", 99), None, base_seq=base)
    with pytest.raises(ConflictError):
        await second.publish_error("t", "m1", UnsupportedOperationError("late"), base_seq=2)
    # Nothing of it reached the log or a reader.
    assert await seqs_and_texts(watcher, 3) == expected(1, 3)
    entries = await first.client.xrange(first.key("t"))
    assert [entry_id for entry_id, _ in entries] == [b"1-0", b"2-0", b"3-0"]
    # Once it has learnt the top (prepare), it continues after it; the first process's reader sees that event.
    assert await second.prepare("t", 0) == 3
    assert await second.publish("t", chunk("t", 4), None) == 4
    assert await seqs_and_texts(watcher, 1) == expected(4, 4)
    # And now the first one is the stale writer.
    with pytest.raises(ConflictError):
        await first.publish("t", chunk("t", 4), None)
    first.close_tap(watcher)


@pytest.mark.redis
async def test_redis_bus_close_never_hangs(redis_url: str, redis_namespace: str) -> None:
    # The reader is in its blocking XREAD (a stream was followed a moment ago) when the bus closes, as at shutdown.
    # Before the fix (commits 5b944c9, 48d5180) close() hung in about 40 % of these attempts: redis-py finished the
    # XREAD normally although the reader task was being cancelled, and the reader then waited forever.
    from relaykit.backends.redis import RedisEventBus

    for attempt in range(20):
        bus = RedisEventBus(redis_url, namespace=redis_namespace, outage_timeout=WAIT)
        await bus.start()
        task = f"t{attempt}"
        await publish_range(bus, task, 1, 3)
        tap, _ = await bus.open(task)
        await publish_range(bus, task, 4, 5)
        assert await seqs_and_texts(tap, 2) == expected(4, 5)
        bus.close_tap(tap)
        closing = asyncio.ensure_future(bus.close())
        done, _ = await asyncio.wait({closing}, timeout=CLOSE_WAIT * 2)
        if not done:
            bus._reader.cancel()  # let it finish, then fail
            await asyncio.wait_for(closing, WAIT)
        assert done, f"RedisEventBus.close() did not return within {CLOSE_WAIT * 2:g} s (attempt {attempt + 1})"
