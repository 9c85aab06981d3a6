"""Gap 1 (issue 19): with the Redis persistence the README requires (``appendonly yes``, ``appendfsync always``), a
Redis crash and restart loses no event a client could have seen.

A private ``redis-server`` with AOF in a temp directory (the shared test Redis is never touched) under two replicas on
the test PostgreSQL. A paced task streams to a resuming client (``ResumingReader``: reconnect with ``Last-Event-ID``
to the other replica whenever a connection breaks). Mid-stream, Redis is SIGKILLed (no shutdown save: only what the
AOF already holds survives) and started again on the same port and directory. Required: the client's events before
the crash plus those after it are exactly the whole execution, the Task first, every chunk once and in order, the
terminal status last, ids strictly increasing, and no Task snapshot standing in for lost events.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster.client import assert_ids_increase, chunks, message, open_stream, open_subscribe, summary
from cluster.deploy import AGENTS, Deploy
from cluster.test_outage import READY_WAIT, RedisServer, wait_readyz

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(120)]

TOTAL = 24  # chunks
DELAY = 0.25  # seconds between chunks: ~6 s, so the task spans the restart


class PersistentRedis(RedisServer):
    """The private redis-server with the AOF on, ``appendfsync always``, in its own directory."""

    def __init__(self, binary: str, port: int, log_dir: Path) -> None:
        super().__init__(binary, port, log_dir)
        self.data = log_dir / "redis-data"
        self.data.mkdir()

    def command(self) -> list[str]:
        return [
            *(self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data)),
            *("--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"),
        ]


@pytest.fixture
def persistent_redis(tmp_path: Path) -> Iterator[PersistentRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (this test runs its own Redis)")
    from support.servers import free_port

    server = PersistentRedis(binary, free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_redis_crash_loses_no_event_a_client_saw(deploy: Deploy, persistent_redis: PersistentRedis) -> None:
    d = deploy(AGENTS, 2, bus=persistent_redis.url)
    async with httpx.AsyncClient(timeout=30.0) as http:
        assert await wait_readyz(http, d, 200) < READY_WAIT
        # The client reads the first chunks, then its connection drops (it has seen everything up to ``last``).
        async with open_stream(http, d.urls[0], message(f"{TOTAL} {DELAY}")) as first:
            seen = await first.until(lambda e: e.chunk == "chunk 3")
        before = list(first.seen)
        task_id, last = seen.task_id, seen.id
        assert task_id is not None
        assert last is not None
        # Meanwhile the task goes on: more chunks are published, the newest not yet checkpointed in PostgreSQL, when
        # Redis dies (SIGKILL: only what the AOF holds survives) and comes back.
        async with open_subscribe(http, d.urls[1], task_id) as observer:
            await observer.until(lambda e: e.chunk == "chunk 10")
            persistent_redis.kill()
        await wait_readyz(http, d, 503)
        persistent_redis.start()
        await wait_readyz(http, d, 200)
        # The client comes back on the other replica with its Last-Event-ID.
        async with open_subscribe(http, d.urls[1], task_id, last_event_id=last) as resumed:
            after = await resumed.rest(30.0)
    events = before + after
    report = summary(events)
    print(f"\nevents seen before the Redis crash: {len(before)}, after (resumed from id {last}): {len(after)}")
    # The whole execution, once: the Task (WORKING), each chunk, COMPLETED; no snapshot standing in for lost events.
    assert [(e.kind, e.state) for e in events] == [
        ("task", "TASK_STATE_WORKING"),
        *[("artifactUpdate", None)] * TOTAL,
        ("statusUpdate", "TASK_STATE_COMPLETED"),
    ], report
    assert [e.chunk for e in events if e.chunk is not None] == chunks(TOTAL), report
    assert_ids_increase(events)
    assert (len(before), len(after)) == (5, TOTAL - 3)
