"""Per-principal quotas shared by the replicas (issue 14, Build 2: "in scale-out mode shared across replicas").

Two ``relaykit serve`` replicas on one PostgreSQL store and one Redis bus, callers authenticated by API key: what a
principal holds on one replica counts on the other (executions, queued messages, open streams, the request
bucket), each overflow a 429 + ``Retry-After`` from either replica, while other principals are served. The holds'
store is also checked on its own against the in-process reference: all-or-none, refreshed by the holder, lapsing
when nobody refreshes them (a crashed replica's holds do not leak).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.client import A2A_HEADERS, message
from cluster.deploy import Deploy
from relaykit._errors import ResourceExhaustedError
from relaykit.backends.redis import RedisQuotas, connect_redis
from relaykit.server._quotas import MemoryQuotaStore, QuotaLedger, Quotas, QuotaStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

T = 20.0
LONG = "300 0.05"  # the paced agent: 300 chunks 50 ms apart, i.e. an execution that runs ~15 s
USERS = ("greedy", "polite", "queuer", "streamer", "fast")


async def _poll(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)  # bounded poll of another process's state


def _refused(r: httpx.Response, what: str) -> None:
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert what in r.json()["error"]["message"], r.text


@pytest.mark.postgres
async def test_quotas_hold_across_replicas(deploy: Deploy, tmp_path: Path, redis_url: str) -> None:
    keys = tmp_path / "api-keys"
    keys.write_text("".join(f"{user} {user}-key\n" for user in USERS))
    quota_args = ["--quota-executions", "2", "--quota-queued", "2", "--quota-streams", "2"]
    deployment = deploy(count=2, args=["--api-keys", str(keys), *quota_args, "--quota-rate", "1", "--quota-burst", "8"])
    a, b = deployment.urls
    redis = connect_redis(redis_url)

    def auth(user: str) -> dict[str, str]:
        return {**A2A_HEADERS, "X-API-Key": f"{user}-key"}

    async def send(http: httpx.AsyncClient, url: str, user: str, text: str, **kw: Any) -> httpx.Response:
        body = message(text, return_immediately=True, **kw)
        return await http.post(f"{url}/message:send", json=body, headers=auth(user), timeout=T)

    async def holds(kind: str, user: str) -> int:
        return int(await redis.zcard(f"{deployment.namespace}:quota:{kind}:api-key:{user}"))

    background: list[asyncio.Task[Any]] = []
    try:
        async with httpx.AsyncClient(timeout=T) as http, asyncio.timeout(90):
            # Executions: one on each replica reaches greedy's cap of 2; both replicas refuse the third.
            for url in (a, b):
                r = await send(http, url, "greedy", LONG)
                assert r.status_code == 200, r.text
            for url in (a, b):
                _refused(await send(http, url, "greedy", LONG), "executions")
            r = await http.post(f"{b}/message:send", json=message("3"), headers=auth("polite"), timeout=T)
            assert r.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text

            # Queued messages: two follow-ups wait behind queuer's running task (sent to either replica; each call
            # answers once its message starts, so they run in the background); the third is refused on both.
            r = await send(http, a, "queuer", LONG)
            task_id = r.json()["task"]["id"]
            await _poll(lambda: _zero(holds("queued", "queuer")))
            for url in (a, b):
                background.append(asyncio.create_task(send(http, url, "queuer", "1", task_id=task_id)))
            await _poll(lambda: _equals(holds("queued", "queuer"), 2))
            for url in (b, a):
                _refused(await send(http, url, "queuer", "1", task_id=task_id), "messages waiting")

            # Open streams: one on each replica; the third is refused on both, another principal may stream.
            streams: list[Any] = []
            for url in (a, b):
                cm = http.stream("POST", f"{url}/message:stream", json=message(LONG), headers=auth("streamer"))
                response = await cm.__aenter__()
                assert response.status_code == 200
                streams.append(cm)
            for url in (a, b):
                r = await http.post(f"{url}/message:stream", json=message("1"), headers=auth("streamer"))
                _refused(r, "open streams")
            async with http.stream("POST", f"{a}/message:stream", json=message("2"), headers=auth("polite")) as r:
                assert r.status_code == 200
                assert "TASK_STATE_COMPLETED" in (await r.aread()).decode()
            for cm in streams:
                await cm.__aexit__(None, None, None)
            await _poll(lambda: _zero(holds("streams", "streamer")))  # closing a stream releases its hold

            # Requests per second: one bucket of 8 for both replicas; the 9th request is refused on either.
            codes = [(await http.get(f"{(a, b)[i % 2]}/tasks", headers=auth("fast"))).status_code for i in range(8)]
            assert codes == [200] * 8
            _refused(await http.get(f"{b}/tasks", headers=auth("fast")), "requests per second")
            assert (await http.get(f"{a}/tasks", headers=auth("polite"))).status_code == 200
    finally:
        for job in background:
            job.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await redis.aclose()


async def _zero(count: Awaitable[int]) -> bool:
    return await count == 0


async def _equals(count: Awaitable[int], value: int) -> bool:
    return await count == value


@pytest.fixture(params=["memory", "redis"])
async def quota_store(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[QuotaStore]:
    if request.param == "memory":
        yield MemoryQuotaStore()
        return
    client = connect_redis(redis_url)
    namespace = f"rk-quota-{uuid.uuid4().hex[:10]}"
    try:
        yield RedisQuotas(client, namespace=namespace, url=redis_url)
    finally:
        async for key in client.scan_iter(match=f"{namespace}:*"):
            await client.delete(key)
        await client.aclose()


async def test_holds_are_all_or_none_and_lapse_unless_refreshed(quota_store: QuotaStore) -> None:
    lease = 0.4
    store = quota_store
    assert await store.hold("p", [("executions", "t1", 2), ("queued", "t1:m1", 1)], lease) is None
    # The same execution again (a follow-up to a running task) is never refused; a second queued message is, and
    # then nothing of that call is held.
    assert await store.hold("p", [("executions", "t1", 2), ("queued", "t1:m2", 1)], lease) == "queued"
    assert await store.hold("p", [("executions", "t2", 2)], lease) is None
    assert await store.hold("p", [("executions", "t3", 2)], lease) == "executions"
    assert await store.hold("q", [("executions", "t3", 2)], lease) is None  # per principal
    await store.release("p", [("executions", "t2")])
    assert await store.hold("p", [("executions", "t3", 2)], lease) is None
    # t1 is refreshed by its holder, t3 is not (its replica crashed): after the lease only t3 has lapsed.
    deadline = time.monotonic() + lease * 1.5
    while time.monotonic() < deadline:
        await store.refresh([("p", "executions", "t1"), ("p", "queued", "t1:m1")], lease)
        await asyncio.sleep(lease / 4)
    assert await store.hold("p", [("executions", "t4", 2)], lease) is None
    assert await store.hold("p", [("executions", "t5", 2)], lease) == "executions"
    # A released hold is not brought back by a refresh.
    await store.release("p", [("executions", "t4")])
    await store.refresh([("p", "executions", "t4")], lease)
    assert await store.hold("p", [("executions", "t5", 2)], lease) is None


async def test_token_bucket_is_shared(quota_store: QuotaStore) -> None:
    waits = [await quota_store.take_token("p", 2.0, 3.0) for _ in range(4)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert 0.0 < waits[3] <= 0.5
    assert await quota_store.take_token("other", 2.0, 3.0) == 0.0


async def test_a_live_replicas_holds_stay_and_a_crashed_ones_lapse(quota_store: QuotaStore) -> None:
    """Two ledgers on one store are two replicas: the live one's refresher keeps its hold past many leases; the
    crashed one's hold (never released: a crash releases nothing) lapses within a lease of its last refresh."""
    lease = 0.3
    live = QuotaLedger(Quotas(streams=1), quota_store, lease=lease)
    crashed = QuotaLedger(Quotas(streams=1), quota_store, lease=lease)
    live.start()
    crashed.start()
    try:
        hold = await live.open_stream("alice")
        assert hold
        await asyncio.sleep(lease * 3)  # three leases pass: the time under test, not a synchronisation
        with pytest.raises(ResourceExhaustedError):
            await crashed.open_stream("alice")
        await live.close_stream("alice", hold)
        assert await crashed.open_stream("alice")
        await crashed.stop()  # its refresher stops, its hold is not released
        with pytest.raises(ResourceExhaustedError):
            await live.open_stream("alice")
        deadline = time.monotonic() + lease * 4
        while True:
            try:
                assert await live.open_stream("alice")
                break
            except ResourceExhaustedError:
                assert time.monotonic() < deadline, "the crashed replica's hold did not lapse"
                await asyncio.sleep(lease / 10)  # bounded poll of the lapse
    finally:
        await live.stop()
        await crashed.stop()
