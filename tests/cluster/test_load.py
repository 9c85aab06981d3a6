"""Scale-out load (issue #6): 1,000 concurrent streaming tasks x 20 chunks across three replicas.

Every task is a SendStreamingMessage on its own connection, spread round-robin over the replicas; connections are
opened at most ``OPENING`` at a time and then all held until their task ends. The client is raw asyncio HTTP/1.1
(chunked transfer decoding and SSE parsing by hand: cheap enough to leave the two cores to the servers) and counts
every chunk of every task: each must arrive exactly once, in order, under strictly increasing SSE ids, and every task
must end COMPLETED (in its stream and in the store). The whole run must take under ``BUDGET`` seconds; the
throughput is printed.

The replicas run with the 2 s lease (heartbeat 0.4 s) of the other cluster tests. While they run, the test samples
every worker's remaining lease in the store and requires that none lapses: a live worker whose lease lapses has its
running tasks taken over (FAILED "worker lost"). The heartbeat test at the end pins the cause this test first found:
a heartbeat queued behind busy task writes on the store's pool. With 1,000 tasks the queue backlog also outlasts
``unstarted_after``, so sweeps list waiting tasks as "unstarted orphans" while the queue consumers start them: every
stream must still end COMPLETED with all its chunks (``test_sweeper_race.py`` pins that race on its own).
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from dataclasses import dataclass, field

import pytest

from cluster.deploy import AGENTS, Deploy, Deployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(240)]

TASKS = 1000
CHUNKS = 20
DELAY = 0.5  # seconds between chunks: each task streams for ~10 s, so all of them are open at once
BUDGET = 120.0  # seconds for all of them
OPENING = 250  # connections being opened (request sent, answer not yet begun) at once
STREAM_TIMEOUT = 100.0  # seconds: the bound on one stream


@dataclass
class Outcome:
    """What one client saw of its task."""

    ids: list[int] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    task_id: str = ""
    error: str = ""


def _request(port: int, index: int) -> bytes:
    body = json.dumps(
        {
            "message": {
                "messageId": f"load-{index}",
                "role": "ROLE_USER",
                "parts": [{"text": f"{CHUNKS} {DELAY}"}],
            }
        }
    ).encode()
    head = (
        f"POST /message:stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nA2A-Version: 1.0\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def _take_event(block: bytes, outcome: Outcome) -> bool:
    """Record one SSE event; True when it is the task's terminal event."""
    event_id: int | None = None
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"id:"):
            event_id = int(line[3:])
        elif line.startswith(b"data:"):
            data.append(line[5:].strip())
    if not data:
        return False  # a keep-alive comment
    if block.startswith(b"event: error") or b"\nevent: error" in block:
        outcome.error = f"error event after {len(outcome.chunks)} chunks: {b''.join(data)[:400]!r}"
        return True
    if event_id is None:
        raise AssertionError(f"an event without an id: {block!r}")
    outcome.ids.append(event_id)
    event = json.loads(b"\n".join(data))
    if "artifactUpdate" in event:
        outcome.chunks.append(event["artifactUpdate"]["artifact"]["parts"][0]["text"])
        return False
    body = event.get("task") or event.get("statusUpdate")
    if body is None:
        raise AssertionError(f"unexpected event {event}")
    if "task" in event:
        outcome.task_id = body["id"]
    state = body["status"]["state"]
    outcome.states.append(state)
    return state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED")


async def stream_one(port: int, index: int, opening: asyncio.Semaphore, live: list[int]) -> Outcome:
    outcome = Outcome()
    async with opening:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        writer.write(_request(port, index))
        status = await reader.readline()
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip().lower()
    live[0] += 1
    live[1] = max(live[1], live[0])
    try:
        if b" 200 " not in status:
            outcome.error = f"{status!r} {await reader.read(2000)!r}"
            return outcome
        assert headers.get("transfer-encoding") == "chunked", headers
        buffer = b""
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                outcome.error = "the stream ended without a terminal event"
                return outcome
            buffer += (await reader.readexactly(size + 2))[:-2]
            while b"\n\n" in buffer:
                block, _, buffer = buffer.partition(b"\n\n")
                if _take_event(block, outcome):
                    return outcome
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
        return outcome
    finally:
        live[0] -= 1
        writer.close()


class LeaseWatch:
    """Samples, every ``period`` seconds, how long each live worker's lease has left (database clock)."""

    def __init__(self, d: Deployment, period: float = 0.2) -> None:
        self.d = d
        self.period = period
        self.least: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.d.store, timeout=5)
        try:
            query = f"SELECT id, extract(epoch FROM expires_at - now())::float8 FROM {self.d.namespace}_workers"
            while True:
                for worker, left in await conn.fetch(query):
                    self.least[worker] = min(self.least.get(worker, left), left)
                await asyncio.sleep(self.period)
        finally:
            await conn.close()

    async def __aenter__(self) -> LeaseWatch:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        if self._task.done():
            self._task.result()  # a failed watch fails the test
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def count_states(d: Deployment) -> dict[str, int]:
    import asyncpg

    conn = await asyncpg.connect(d.store, timeout=5)
    try:
        rows = await conn.fetch(f"SELECT state, count(*) AS n FROM {d.namespace}_tasks GROUP BY state")
    finally:
        await conn.close()
    return {str(row["state"]): int(row["n"]) for row in rows}


def _raise_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target < wanted // 2:
            pytest.skip(f"the open-files limit ({hard}) is too low for {TASKS} connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


@pytest.mark.parametrize("lease", [pytest.param(2, id="lease2")])
async def test_1000_concurrent_streams_of_20_chunks_across_3_replicas(deploy: Deploy, lease: int) -> None:
    _raise_open_files(4 * TASKS)  # before the replicas start: they inherit it
    d = deploy(AGENTS, 3, args=["--lease", str(lease), "--heartbeat", f"{min(lease / 5, 2):g}"])
    opening = asyncio.Semaphore(OPENING)
    live = [0, 0]  # streams open now, most open at once
    async with LeaseWatch(d) as leases:
        started = time.monotonic()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(stream_one(d.ports[i % 3], i, opening, live) for i in range(TASKS))), BUDGET
        )
        elapsed = time.monotonic() - started
    events = sum(len(outcome.ids) for outcome in outcomes)
    print(
        f"\nlease {lease} s: {TASKS} streaming tasks x {CHUNKS} chunks on 3 replicas: {elapsed:.1f} s, "
        f"{TASKS / elapsed:.0f} tasks/s, {events / elapsed:.0f} events/s, {live[1]} streams open at once at most; "
        f"least lease left per worker: {', '.join(f'{left:.2f} s' for left in sorted(leases.least.values()))}"
    )

    errors = [(i, outcome.error) for i, outcome in enumerate(outcomes) if outcome.error]
    assert not errors, f"{len(errors)} streams failed, e.g. {errors[:3]}\n{d.log_tails(6000)}"
    expected = [f"chunk {i}" for i in range(CHUNKS)]
    for i, outcome in enumerate(outcomes):
        assert outcome.chunks == expected, (i, outcome.chunks)
        assert all(a < b for a, b in zip(outcome.ids, outcome.ids[1:], strict=False)), (i, outcome.ids)
        assert outcome.states[-1] == "TASK_STATE_COMPLETED", (i, outcome.states)
    task_ids = {outcome.task_id for outcome in outcomes}
    assert len(task_ids) == TASKS
    assert sum(len(outcome.chunks) for outcome in outcomes) == TASKS * CHUNKS
    assert await count_states(d) == {"TASK_STATE_COMPLETED": TASKS}
    assert elapsed < BUDGET
    assert len(leases.least) == 3
    assert min(leases.least.values()) > 0, f"a live worker's lease lapsed: {leases.least}"


async def test_heartbeat_is_not_queued_behind_busy_store_connections(postgres_url: str, pg_namespace: str) -> None:
    # What a replica's store sees under load: every pooled connection busy with task writes. A heartbeat (the lease
    # of every task the process runs) must still land well within the lease, here 2 s.
    import asyncpg

    from relaykit.backends.postgres import PostgresTaskStore

    lease, busy_for, pool_size = 2.0, 2.5, 10  # PostgresTaskStore's default pool: 10 connections
    marker = f"busy-{pg_namespace}"
    store = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False, max_size=pool_size)
    await store.start()
    watcher = await asyncpg.connect(postgres_url, timeout=5)
    try:
        await store.heartbeat("w1", lease)

        async def slow_write(conn: object) -> None:
            await conn.execute(f"SELECT pg_sleep({busy_for}) -- {marker}")  # type: ignore[attr-defined]

        busy = [asyncio.create_task(store._db.run(slow_write)) for _ in range(pool_size)]
        try:
            # Until every pooled connection is in its slow statement (the server says so; bounded).
            deadline = time.monotonic() + 10.0
            query = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1"
            while await watcher.fetchval(query, f"%{marker}%") < pool_size:
                assert time.monotonic() < deadline, "the store's connections never got busy"
                await asyncio.sleep(0.02)
            started = time.monotonic()
            await asyncio.wait_for(store.heartbeat("w1", lease), 30.0)
            took = time.monotonic() - started
        finally:
            await asyncio.gather(*busy, return_exceptions=True)
        assert took < lease / 2, f"a heartbeat took {took:.2f} s while the store was busy (lease {lease:g} s)"
    finally:
        await watcher.close()
        await store.close()
