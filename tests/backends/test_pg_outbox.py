"""What the PostgreSQL push outbox adds to the outbox contract (tests/backends/test_store_contract.py): stream leases
shared by replicas (expiry on the database clock, renewal, release on close), durability across close / reopen, the
schema 2 -> 3 migration, ``open_outbox`` wiring, and two senders on one namespace never delivering a stream at once.

Every test runs in fresh namespaces (``pg_namespace`` / ``pg_namespaces`` in tests/conftest.py), dropped afterwards;
with the server down they skip, under ``CI=true`` they fail. Expiry is awaited with a bounded polling loop
(``eventually``), never a sleep standing in for synchronisation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

if os.environ.get("CI", "").strip().lower() not in ("1", "true", "yes"):
    # Outside CI a machine without the postgres extra skips this module; under CI a missing driver fails.
    pytest.importorskip("asyncpg", reason="asyncpg is not installed (pip install 'relaykit[postgres]')")

import asyncpg
import httpx
from support.servers import RoundRobinProxy

from relaykit._enums import TaskState
from relaykit._types import Task, TaskPushNotificationConfig, TaskStatus
from relaykit.backends._base import DeliveryOutcome, OutboxChanges, OutboxEntry, StreamKey, TaskRecord
from relaykit.backends.postgres import (
    SCHEMA_VERSION,
    PostgresPushConfigStore,
    PostgresTaskStore,
    drop_namespace,
    upgrade,
)
from relaykit.backends.postgres._outbox import LEASE_TTL, PostgresPushOutbox
from relaykit.backends.postgres._schema import MIGRATIONS
from relaykit.errors import ServiceUnavailableError
from relaykit.push import DeliveryPolicy, PushSender, open_outbox

pytestmark = pytest.mark.postgres

WAIT = 10.0  # seconds: the bound on waiting for a lease to expire or a delivery to happen
SHORT_TTL = 0.3  # seconds: a lease that expires soon
STREAM: StreamKey = ("", "anonymous", "t1", "c1")


async def eventually(probe: Callable[[], Awaitable[bool]], what: str, timeout: float = WAIT) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def outbox_on(url: str, namespace: str, **options: Any) -> AsyncIterator[PostgresPushOutbox]:
    """An outbox with its own pool (as another replica would have)."""
    box = PostgresPushOutbox(url, namespace=namespace, **options)
    await box.start()
    try:
        yield box
    finally:
        await box.close()


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def entry(seq: int, *, config: str = "c1", event: str = "") -> OutboxEntry:
    return OutboxEntry(
        event_id=event or f"e{seq}-{config}",
        task_id="t1",
        config_id=config,
        seq=seq,
        body=b'{"statusUpdate":{"taskId":"t1","seq":%d}}' % seq,
        created_at=1000.0 + seq,
    )


# --- construction -----------------------------------------------------------------------------------------------


def test_lease_options_are_checked() -> None:
    url = "postgresql://postgres@127.0.0.1:5432/test"
    box = PostgresPushOutbox(url, namespace="rk_options")
    assert (box.durable, box.lease_ttl, box.renew_every, box.namespace) == (
        True,
        LEASE_TTL,
        LEASE_TTL / 3,
        "rk_options",
    )
    assert PostgresPushOutbox(url, lease_ttl=6.0, renew_every=0).renew_every == 0.0
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="lease_ttl"):
            PostgresPushOutbox(url, lease_ttl=bad)
    for bad in (-1.0, LEASE_TTL, float("nan")):
        with pytest.raises(ValueError, match="renew_every"):
            PostgresPushOutbox(url, renew_every=bad)


async def test_open_outbox_gives_a_postgres_store_its_durable_outbox_on_the_same_pool(
    postgres_url: str, pg_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = PostgresTaskStore(postgres_url, namespace=pg_namespace)
    with caplog.at_level(logging.WARNING, logger="relaykit.push"):
        box = open_outbox(tasks)
    assert caplog.records == []
    assert isinstance(box, PostgresPushOutbox)
    assert box.durable
    assert box.namespace == pg_namespace
    await tasks.start()
    await box.start()
    try:
        assert box._db is tasks._db  # one pool, one guard
        await box.commit(OutboxChanges(added=[entry(1)]))
        # The outbox keeps the shared pool open after the task store closes.
        await tasks.close()
        assert [e.event_id for e in await box.pending()] == ["e1-c1"]
    finally:
        await box.close()
        await tasks.close()


# --- leases between replicas ------------------------------------------------------------------------------------


async def test_a_lease_held_by_one_replica_is_refused_to_another_until_released(
    postgres_url: str, pg_namespace: str
) -> None:
    async with outbox_on(postgres_url, pg_namespace) as a, outbox_on(postgres_url, pg_namespace) as b:
        assert await a.claim(STREAM, "a#1")
        assert not await b.claim(STREAM, "b#1")
        assert not await a.claim(STREAM, "a#2")  # another holder in the same process is refused too
        assert await a.claim(STREAM, "a#1")  # the holder's claim refreshes it
        assert await b.claim(("", "anonymous", "t1", "c2"), "b#1")  # other streams are independent
        assert await b.holder(STREAM) == "a#1"
        await b.release(STREAM, "b#1")  # not the holder: no effect
        assert not await b.claim(STREAM, "b#1")
        await a.release(STREAM, "a#1")
        assert await b.holder(STREAM) is None
        assert await b.claim(STREAM, "b#1")
        assert not await a.claim(STREAM, "a#1")


async def test_an_expired_lease_can_be_claimed_by_another_replica(postgres_url: str, pg_namespace: str) -> None:
    # renew_every=0: replica a stops renewing, as a replica that died would.
    async with (
        outbox_on(postgres_url, pg_namespace, lease_ttl=SHORT_TTL, renew_every=0) as a,
        outbox_on(postgres_url, pg_namespace) as b,
    ):
        assert await a.claim(STREAM, "a#1")
        assert not await b.claim(STREAM, "b#1")
        await eventually(lambda: b.claim(STREAM, "b#1"), "the expired lease is claimable")
        assert await b.holder(STREAM) == "b#1"
        # The old holder has lost it: its claim is refused, and its late release does not free b's lease.
        assert not await a.claim(STREAM, "a#1")
        await a.release(STREAM, "a#1")
        assert await b.holder(STREAM) == "b#1"


async def test_claiming_again_refreshes_the_lease(postgres_url: str, pg_namespace: str) -> None:
    async with (
        outbox_on(postgres_url, pg_namespace, lease_ttl=1.0, renew_every=0) as a,
        outbox_on(postgres_url, pg_namespace) as b,
    ):
        assert await a.claim(STREAM, "a#1")
        started = time.monotonic()
        # Refreshed every 0.3 s for 2 s (twice the ttl): b never gets it.
        while time.monotonic() - started < 2.0:
            assert await a.claim(STREAM, "a#1")
            assert not await b.claim(STREAM, "b#1")
            await asyncio.sleep(0.3)
        await eventually(lambda: b.claim(STREAM, "b#1"), "the lease expires once no longer refreshed")


async def test_the_keeper_renews_held_leases(postgres_url: str, pg_namespace: str) -> None:
    async with (
        outbox_on(postgres_url, pg_namespace, lease_ttl=SHORT_TTL, renew_every=0.05) as a,
        outbox_on(postgres_url, pg_namespace) as b,
    ):
        assert await a.claim(STREAM, "a#1")
        started = time.monotonic()
        while time.monotonic() - started < 5 * SHORT_TTL:
            assert not await b.claim(STREAM, "b#1")
            await asyncio.sleep(0.05)
        await a.release(STREAM, "a#1")
        assert await b.claim(STREAM, "b#1")
        # A released lease is not renewed back into existence.
        await asyncio.sleep(0.2)
        assert await b.holder(STREAM) == "b#1"


async def test_a_lease_taken_over_is_forgotten_with_a_warning(
    postgres_url: str, pg_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        outbox_on(postgres_url, pg_namespace, lease_ttl=SHORT_TTL, renew_every=0) as a,
        outbox_on(postgres_url, pg_namespace) as b,
    ):
        assert await a.claim(STREAM, "a#1")
        assert await a.claim(("", "anonymous", "t1", "c2"), "a#1")
        assert await a.renew() == 2
        await eventually(lambda: b.claim(STREAM, "b#1"), "the expired lease is claimable")
        with caplog.at_level(logging.WARNING, logger="relaykit.push"):
            assert await a.renew() == 1  # c2 expired too, but nobody took it: still a's
        assert [r.getMessage() for r in caplog.records] == [
            "push outbox: lost the delivery lease of task t1, config c1 (expired, taken over)"
        ]
        assert await b.holder(STREAM) == "b#1"
        assert await b.holder(("", "anonymous", "t1", "c2")) == "a#1"


async def test_close_releases_the_leases_it_holds(postgres_url: str, pg_namespace: str) -> None:
    async with outbox_on(postgres_url, pg_namespace) as b:
        a = PostgresPushOutbox(postgres_url, namespace=pg_namespace)
        await a.start()
        try:
            assert await a.claim(STREAM, "a#1")
            assert not await b.claim(STREAM, "b#1")
        finally:
            await a.close()
        assert await b.claim(STREAM, "b#1")  # at once, not after the ttl


async def test_racing_claims_have_one_winner(postgres_url: str, pg_namespace: str) -> None:
    boxes = [PostgresPushOutbox(postgres_url, namespace=pg_namespace) for _ in range(6)]
    await asyncio.gather(*(box.start() for box in boxes))
    try:
        for _ in range(5):
            results = await asyncio.gather(*(box.claim(STREAM, f"w{i}") for i, box in enumerate(boxes)))
            winners = [i for i, won in enumerate(results) if won]
            assert len(winners) == 1
            assert await boxes[0].holder(STREAM) == f"w{winners[0]}"
            await boxes[winners[0]].release(STREAM, f"w{winners[0]}")
    finally:
        await asyncio.gather(*(box.close() for box in boxes))


async def test_long_expired_leases_are_swept(postgres_url: str, pg_namespace: str) -> None:
    async with outbox_on(postgres_url, pg_namespace) as box:
        assert await box.claim(STREAM, "live")
        conn = await asyncpg.connect(postgres_url, timeout=WAIT)
        try:
            await conn.execute(
                f"INSERT INTO {pg_namespace}_push_leases (tenant, owner, task_id, config_id, worker, expires_at) "
                "VALUES ('', 'anonymous', 't9', 'c1', 'died', now() - interval '1 hour')"
            )
            await box._sweep()
            rows = await conn.fetch(f"SELECT task_id, worker FROM {pg_namespace}_push_leases")
        finally:
            await conn.close()
        assert [tuple(row) for row in rows] == [("t1", "live")]


async def test_a_claim_fails_closed_while_the_server_is_away(
    postgres_url: str, pg_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sender asks again (every 0.2 s) instead of its stream runner dying with the error.
    async with outbox_on(postgres_url, pg_namespace) as box:

        async def away(job: Any) -> Any:
            raise ServiceUnavailableError("the PostgreSQL store is unavailable: connection refused")

        monkeypatch.setattr(box._db, "run", away)
        assert not await box.claim(STREAM, "w1")
        with pytest.raises(ServiceUnavailableError):
            await box.pending()  # other operations report the outage
        monkeypatch.undo()
        assert await box.claim(STREAM, "w1")


# --- durability -------------------------------------------------------------------------------------------------


async def test_pending_entries_dead_letters_and_health_survive_close_and_reopen(
    postgres_url: str, pg_namespace: str
) -> None:
    tasks = PostgresTaskStore(postgres_url, namespace=pg_namespace)
    box = PostgresPushOutbox(tasks)
    await tasks.start()
    await box.start()
    try:
        await tasks.save(TaskRecord(Task(id="t1", context_id="c", status=TaskStatus(state=TaskState.WORKING))))
        first, second, doomed = entry(1), entry(2), entry(3, config="c2")
        first.traceparent = TRACEPARENT  # the producing execution's span (relaykit.telemetry)
        await box.commit(OutboxChanges(added=[first, second, doomed]))
        first.attempts, first.next_attempt_at, first.last_error = 1, 99.5, "HTTP 503"
        doomed.attempts, doomed.last_error, doomed.dead_at = 8, "HTTP 500", 4000.25
        failed = DeliveryOutcome(STREAM, False, 50.5, "https://hooks.example.com/c1", "HTTP 503")
        await box.commit(OutboxChanges(retried=[first], dead=[doomed], outcomes=[failed]))
    finally:
        await box.close()
        await tasks.close()

    tasks = PostgresTaskStore(postgres_url, namespace=pg_namespace)
    again = PostgresPushOutbox(tasks)
    await tasks.start()
    await again.start()
    try:
        assert tasks.migrated == (SCHEMA_VERSION, SCHEMA_VERSION)
        pending = await again.pending()
        dead = await again.dead_letters("t1")
        health = await again.health("t1")
    finally:
        await again.close()
        await tasks.close()
    assert [(e.event_id, e.seq, e.attempts, e.next_attempt_at, e.last_error, e.created_at) for e in pending] == [
        ("e1-c1", 1, 1, 99.5, "HTTP 503", 1001.0),
        ("e2-c1", 2, 0, 0.0, "", 1002.0),
    ]
    assert pending[0].body == entry(1).body
    assert [e.traceparent for e in pending] == [TRACEPARENT, ""]
    assert [(e.event_id, e.attempts, e.last_error, e.dead_at) for e in dead] == [("e3-c2", 8, "HTTP 500", 4000.25)]
    assert [(h.config_id, h.pending, h.dead, h.failures, h.consecutive_failures, h.url) for h in health] == [
        ("c1", 2, 0, 1, 1, "https://hooks.example.com/c1"),
        ("c2", 0, 1, 0, 0, ""),
    ]


async def test_nul_in_texts_never_poisons_a_commit(postgres_url: str, pg_namespace: str) -> None:
    async with outbox_on(postgres_url, pg_namespace) as box:
        bad = OutboxEntry("bad\x00id", "t1", "c1", 1, b"{}")
        good = entry(2)
        await box.commit(OutboxChanges(added=[bad, good]))
        good.attempts, good.last_error = 1, "ConnectError: \x00 \udc80"
        await box.commit(
            OutboxChanges(retried=[good], outcomes=[DeliveryOutcome(STREAM, False, 1.0, "https://h/\x00", "x\x00")])
        )
        [stored] = await box.pending()
        assert (stored.event_id, stored.last_error) == ("e2-c1", "ConnectError: \ufffd ?")
        [health] = await box.health("t1")
        assert (health.url, health.last_error) == ("https://h/\ufffd", "x\ufffd")
        assert await box.health("t\x00") == []
        assert await box.dead_letters("t\x00") == []
        assert not await box.claim(("", "anonymous", "t\x00", "c1"), "w")


async def test_a_commit_is_one_transaction(postgres_url: str, pg_namespace: str) -> None:
    # The dead letter's update fails (attempts overflows INTEGER): the adds and deliveries of its batch roll back.
    async with outbox_on(postgres_url, pg_namespace) as box:
        keep = entry(1)
        await box.commit(OutboxChanges(added=[keep]))
        overflow = entry(2)
        overflow.attempts = 2**40
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError)):
            await box.commit(OutboxChanges(added=[entry(3)], delivered=[keep], dead=[overflow]))
        assert [e.event_id for e in await box.pending()] == ["e1-c1"]


# --- schema -----------------------------------------------------------------------------------------------------


async def _create_version_2(url: str, namespace: str) -> Task:
    """A namespace as relaykit with schema version 2 left it, holding one claimed WORKING task."""
    conn = await asyncpg.connect(url, timeout=WAIT)
    task = Task(id="old", context_id="ctx", status=TaskStatus(state=TaskState.WORKING))
    try:
        async with conn.transaction():
            await conn.execute(
                f"CREATE TABLE {namespace}_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
            )
            for statements in MIGRATIONS[:2]:
                for statement in statements:
                    await conn.execute(statement.format(ns=namespace))
            await conn.execute(f"INSERT INTO {namespace}_schema (id, version) VALUES (1, 2)")
            await conn.execute(
                f"INSERT INTO {namespace}_tasks (id, tenant, owner, context_id, state, status_ts, version, event_seq, "
                "body, worker) VALUES ('old', 'acme', 'alice', 'ctx', $1, 1, 5, 3, $2, 'w-old')",
                TaskState.WORKING.value,
                task.to_json(),
            )
    finally:
        await conn.close()
    return task


async def _tables(url: str, namespace: str) -> set[str]:
    conn = await asyncpg.connect(url, timeout=WAIT)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE tablename LIKE $1", f"{namespace}\\_%")
    finally:
        await conn.close()
    return {str(row[0])[len(namespace) + 1 :] for row in rows}


def test_the_outbox_is_migration_3() -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 3  # 4 added the tasks' queued request (issue 19)
    created = " ".join(MIGRATIONS[2])
    for table in ("_push_outbox", "_push_health", "_push_leases"):
        assert f"CREATE TABLE {{ns}}{table} " in created
    assert not any("_push_outbox" in statement for statements in MIGRATIONS[:2] for statement in statements)


async def test_a_version_2_namespace_is_migrated_on_start(postgres_url: str, pg_namespace: str) -> None:
    task = await _create_version_2(postgres_url, pg_namespace)
    assert await _tables(postgres_url, pg_namespace) == {"schema", "tasks", "push_configs", "workers"}
    tasks = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False)
    box = PostgresPushOutbox(tasks)
    await tasks.start()
    await box.start()
    try:
        assert tasks.migrated == (2, SCHEMA_VERSION)
        # The task and its claim are kept.
        got = await tasks.get("old", tenant="acme", owner="alice")
        assert got is not None
        assert (got.task, got.version, got.event_seq) == (task, 5, 3)
        assert await tasks.claimant("old") == "w-old"
        # The outbox works.
        await box.commit(OutboxChanges(added=[entry(1)]))
        assert [e.event_id for e in await box.pending()] == ["e1-c1"]
        assert await box.claim(STREAM, "w1")
    finally:
        await box.close()
        await tasks.close()
    assert await _tables(postgres_url, pg_namespace) == {
        "schema",
        "tasks",
        "push_configs",
        "workers",
        "push_outbox",
        "push_health",
        "push_leases",
    }
    assert await upgrade(postgres_url, namespace=pg_namespace) == (SCHEMA_VERSION, SCHEMA_VERSION)


async def test_relaykit_db_upgrade_migrates_a_version_2_namespace(postgres_url: str, pg_namespace: str) -> None:
    await _create_version_2(postgres_url, pg_namespace)
    assert await upgrade(postgres_url, namespace=pg_namespace) == (2, SCHEMA_VERSION)
    assert await upgrade(postgres_url, namespace=pg_namespace) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert {"push_outbox", "push_health", "push_leases"} <= await _tables(postgres_url, pg_namespace)


async def test_every_name_fits_with_the_longest_namespace(postgres_url: str) -> None:
    # PostgreSQL truncates identifiers past 63 bytes: with a 48-character namespace, every table, index and
    # constraint must still get exactly its own name.
    namespace = f"rk_{os.urandom(8).hex()}".ljust(48, "x")
    assert len(namespace) == 48
    try:
        assert await upgrade(postgres_url, namespace=namespace) == (0, SCHEMA_VERSION)
        conn = await asyncpg.connect(postgres_url, timeout=WAIT)
        try:
            rows = await conn.fetch(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname LIKE $1",
                f"{namespace}\\_%",
            )
        finally:
            await conn.close()
        names = {str(row[0])[len(namespace) :] for row in rows}
        assert {
            "_push_outbox",
            "_push_outbox_pk",
            "_outbox_pending",
            "_outbox_dead",
            "_push_health",
            "_push_health_pk",
            "_push_leases",
            "_push_leases_pk",
        } <= names
        async with outbox_on(postgres_url, namespace) as box:
            await box.commit(OutboxChanges(added=[entry(1)]))
            assert await box.claim(STREAM, "w1")
            assert len(await box.pending()) == 1
    finally:
        await drop_namespace(postgres_url, namespace)


# --- two senders on one namespace -------------------------------------------------------------------------------


async def test_two_senders_never_deliver_one_stream_at_once(postgres_url: str, pg_namespace: str) -> None:
    """Two replicas resume the same pending stream: the lease serialises them; every notification arrives once, in
    order."""
    in_flight: dict[str, int] = {}
    overlaps: list[str] = []
    deliveries: list[tuple[str, str]] = []  # (replica, event id)

    def transport(replica: str) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            stream = request.url.path
            in_flight[stream] = in_flight.get(stream, 0) + 1
            if in_flight[stream] > 1:
                overlaps.append(stream)
            try:
                await asyncio.sleep(0.01)  # a slow receiver: the other replica has time to try
                deliveries.append((replica, request.headers["x-relaykit-event-id"]))
            finally:
                in_flight[stream] -= 1
            return httpx.Response(200, stream=httpx.ByteStream(b""))  # not pre-read: the sender streams it

        return httpx.MockTransport(handle)

    setup = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False)
    configs = PostgresPushConfigStore(setup)
    seed = PostgresPushOutbox(setup)
    await setup.start()
    await configs.start()
    await seed.start()
    try:
        for config_id in ("c1", "c2"):
            config = TaskPushNotificationConfig(
                task_id="t1", id=config_id, url=f"https://hooks.example.com/{config_id}"
            )
            await configs.put(config)
        fresh = [entry(i, config=c) for c in ("c1", "c2") for i in range(1, 21)]
        for item in fresh:
            item.created_at = time.time()  # not expired (DeliveryPolicy.max_age)
        await seed.commit(OutboxChanges(added=fresh))
    finally:
        await seed.close()
        await configs.close()
        await setup.close()

    senders: list[tuple[PostgresTaskStore, PostgresPushConfigStore, PushSender]] = []
    clients = []
    for replica in ("a", "b"):
        store = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False)
        push = PostgresPushConfigStore(store)
        await store.start()
        await push.start()
        client = httpx.AsyncClient(transport=transport(replica))
        clients.append(client)
        sender = PushSender(
            push,
            open_outbox(store),
            http=client,
            worker=replica,
            policy=DeliveryPolicy(backoff=0.02, max_backoff=0.1),
        )
        senders.append((store, push, sender))
    try:
        await asyncio.gather(*(sender.start() for _, _, sender in senders))

        async def all_delivered() -> bool:
            return not await senders[0][2].outbox.pending()

        await eventually(all_delivered, "every notification is delivered", timeout=30)
        for _, _, sender in senders:
            await asyncio.wait_for(sender.drained(), WAIT)
        dead = await senders[0][2].dead_letters("t1")
    finally:
        for store, push, sender in senders:
            await sender.stop()
            await push.close()
            await store.close()
        for client in clients:
            await client.aclose()
    assert overlaps == []
    assert dead == []
    expected = {f"e{i}-{c}" for c in ("c1", "c2") for i in range(1, 21)}
    assert {event for _, event in deliveries} == expected
    # Both replicas read every pending entry at start; the one that claims a stream second delivers only what the
    # first left pending: nothing twice.
    assert sorted(event for _, event in deliveries) == sorted(expected)
    for replica in ("a", "b"):
        for config in ("c1", "c2"):
            # Each replica delivers a stream in seq order.
            seqs = [int(e[1:].split("-")[0]) for r, e in deliveries if r == replica and e.endswith(f"-{config}")]
            assert seqs == sorted(seqs)


# --- a lost lease stops its runner ------------------------------------------------------------------------------

LOST_TTL = 1.0  # seconds: the lease of the replica that loses it
RETRY = 2.0  # seconds its runner waits to retry: longer than the lease lasts unrenewed


async def test_lease_left_is_how_long_a_held_lease_surely_lasts(postgres_url: str, pg_namespace: str) -> None:
    async with outbox_on(postgres_url, pg_namespace, lease_ttl=LOST_TTL, renew_every=0) as a:

        async def aged() -> bool:
            return a.lease_left(STREAM, "a#1") < LOST_TTL / 2

        async def ran_out() -> bool:
            return a.lease_left(STREAM, "a#1") == 0.0

        assert await ran_out()  # not held
        assert await a.claim(STREAM, "a#1")
        assert 0.0 < a.lease_left(STREAM, "a#1") <= LOST_TTL
        assert a.lease_left(STREAM, "a#2") == 0.0  # another holder of this process
        await eventually(aged, "the lease ages")
        assert await a.renew() == 1
        assert not await aged()  # renewed: valid for the whole ttl again
        # Not renewed: it runs out on this process's clock (the database is not asked).
        await eventually(ran_out, "the lease runs out unrenewed")
        assert await a.claim(STREAM, "a#1")
        await a.release(STREAM, "a#1")
        assert await ran_out()


class _Receiver:
    """Replica a's and b's webhook transports: what each delivered. a's first request fails (``"fail"``: HTTP 500,
    retried after ``RETRY``) or never ends (``"hang"``: it is in flight when the lease runs out)."""

    def __init__(self, first: str) -> None:
        self.first = first
        self.delivered: list[tuple[str, str]] = []  # (replica, event id)
        self.a_busy = asyncio.Event()  # a's first request came
        self.a_cut = asyncio.Event()  # ... and was cancelled in flight

    def transport(self, replica: str) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            if replica == "a" and not self.a_busy.is_set():
                self.a_busy.set()
                if self.first == "fail":
                    return httpx.Response(500, stream=httpx.ByteStream(b""))  # not pre-read: the sender streams it
                try:
                    await asyncio.Event().wait()  # a receiver that takes its time
                except asyncio.CancelledError:
                    self.a_cut.set()
                    raise
            self.delivered.append((replica, request.headers["x-relaykit-event-id"]))
            return httpx.Response(200, stream=httpx.ByteStream(b""))

        return httpx.MockTransport(handle)


async def _seed(postgres_url: str, namespace: str, events: list[str]) -> None:
    setup = PostgresTaskStore(postgres_url, namespace=namespace, exclusive=False)
    configs = PostgresPushConfigStore(setup)
    seed = PostgresPushOutbox(setup)
    await setup.start()
    await configs.start()
    await seed.start()
    try:
        await configs.put(TaskPushNotificationConfig(task_id="t1", id="c1", url="https://hooks.example.com/c1"))
        fresh = [entry(i, event=event) for i, event in enumerate(events, 1)]
        for item in fresh:
            item.created_at = time.time()
        await seed.commit(OutboxChanges(added=fresh))
    finally:
        await seed.close()
        await configs.close()
        await setup.close()


async def _replica(
    stack: contextlib.AsyncExitStack, name: str, postgres_url: str, outbox_url: str, namespace: str, http: Any
) -> PushSender:
    configs = PostgresPushConfigStore(postgres_url, namespace=namespace)
    await configs.start()
    stack.push_async_callback(configs.close)
    client = httpx.AsyncClient(transport=http)
    stack.push_async_callback(client.aclose)
    outbox = PostgresPushOutbox(outbox_url, namespace=namespace, lease_ttl=LOST_TTL)
    sender = PushSender(
        configs,
        outbox,
        http=client,
        worker=name,
        policy=DeliveryPolicy(backoff=RETRY, max_backoff=RETRY, jitter=0, suspend_after=0),
    )
    await sender.start()
    stack.push_async_callback(sender.stop)
    return sender


@pytest.mark.parametrize("first", ["fail", "hang"])
async def test_a_holder_that_cannot_renew_its_lease_stops_delivering(
    postgres_url: str, pg_namespace: str, first: str
) -> None:
    """Replica a holds a stream, waiting to retry (``fail``) or with a request in flight (``hang``), when PostgreSQL
    becomes unreachable for it longer than the lease. Its lease runs out unrenewed: a stops (the request in flight is
    cut), delivers nothing more, and leaves the notifications to replica b, which takes the stream over."""
    events = ["e1", "e2", "e3"]
    await _seed(postgres_url, pg_namespace, events)
    receiver = _Receiver(first)
    parts = urlsplit(postgres_url)
    pg_port = parts.port or 5432
    async with contextlib.AsyncExitStack() as stack:
        proxy = await stack.enter_async_context(RoundRobinProxy([pg_port]))
        user = parts.netloc.rpartition("@")[0]
        via_proxy = urlunsplit(
            parts._replace(netloc=f"{user}@127.0.0.1:{proxy.port}" if user else f"127.0.0.1:{proxy.port}")
        )
        a = await _replica(stack, "a", postgres_url, via_proxy, pg_namespace, receiver.transport("a"))
        await asyncio.wait_for(receiver.a_busy.wait(), WAIT)
        assert await holder_of_stream(postgres_url, pg_namespace) == "a#1"
        await asyncio.to_thread(proxy.remove_backend, pg_port)  # PostgreSQL unreachable for a, with its renewals
        b = await _replica(stack, "b", postgres_url, postgres_url, pg_namespace, receiver.transport("b"))

        async def b_delivered_all() -> bool:
            return [e for r, e in receiver.delivered if r == "b"] == events

        await eventually(b_delivered_all, "b delivers every notification")
        await asyncio.wait_for(b.drained(), WAIT)
        if first == "hang":
            assert receiver.a_cut.is_set()  # cut when the lease ran out, not at the 10 s request timeout
        await asyncio.to_thread(proxy.add_backend, pg_port)  # back: a's writer can commit, a can drain
        await asyncio.wait_for(a.drained(), WAIT)  # a's runner has ended
        assert not await a.outbox.pending()
    assert receiver.delivered == [("b", e) for e in events]  # a delivered nothing once its lease ran out


async def test_a_holder_whose_lease_is_taken_over_stops_delivering(postgres_url: str, pg_namespace: str) -> None:
    """Replica a waits to retry a stream when its lease is found taken over (here: its row rewritten) at a renewal:
    a delivers nothing more, and the notifications stay in the outbox for the lease's holder."""
    events = ["e1", "e2", "e3"]
    await _seed(postgres_url, pg_namespace, events)
    receiver = _Receiver("fail")
    async with contextlib.AsyncExitStack() as stack:
        a = await _replica(stack, "a", postgres_url, postgres_url, pg_namespace, receiver.transport("a"))
        await asyncio.wait_for(receiver.a_busy.wait(), WAIT)
        conn = await asyncpg.connect(postgres_url, timeout=WAIT)
        try:
            await conn.execute(
                f"UPDATE {pg_namespace}_push_leases SET worker = 'thief', expires_at = now() + interval '1 hour'"
            )
        finally:
            await conn.close()
        assert await a.outbox.renew() == 0  # type: ignore[attr-defined]
        await asyncio.wait_for(a.drained(), WAIT)  # a's runner has ended
        assert await holder_of_stream(postgres_url, pg_namespace) == "thief"
        pending = await a.outbox.pending()
    assert receiver.delivered == []
    assert [(e.event_id, e.dead_at) for e in pending] == [(e, None) for e in events]


async def holder_of_stream(postgres_url: str, namespace: str) -> str | None:
    async with outbox_on(postgres_url, namespace) as box:
        return await box.holder(STREAM)


# --- a lease goes with its holder's results ---------------------------------------------------------------------


async def test_a_lease_is_given_back_only_with_its_holders_results(postgres_url: str, pg_namespace: str) -> None:
    """Replica a delivers a stream's one notification and its runner ends while the commit of that delivery is held
    back (a hook on a's outbox commit). Replica b, started then, reads the notification as pending and waits for the
    stream: its claim is refused until a's results are committed, and then it finds nothing left to deliver. (A lease
    given back before its results, as it was, let b claim the stream at once and deliver the notification again.)"""
    await _seed(postgres_url, pg_namespace, ["e1"])
    delivered: list[tuple[str, str]] = []  # (replica, event id)
    committing = asyncio.Event()  # a's commit of the delivery started ...
    go = asyncio.Event()  # ... and may go on
    claims: list[bool] = []  # b's claims of the stream, in order
    b_claimed = asyncio.Event()
    answer = asyncio.Event()  # a's receiver answers once the test holds a's runner

    def transport(replica: str) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            if replica == "a":
                await answer.wait()
            delivered.append((replica, request.headers["x-relaykit-event-id"]))
            return httpx.Response(200, stream=httpx.ByteStream(b""))

        return httpx.MockTransport(handle)

    async def replica(stack: contextlib.AsyncExitStack, name: str) -> tuple[PushSender, PostgresPushOutbox]:
        configs = PostgresPushConfigStore(postgres_url, namespace=pg_namespace)
        await configs.start()
        stack.push_async_callback(configs.close)
        client = httpx.AsyncClient(transport=transport(name))
        stack.push_async_callback(client.aclose)
        outbox = PostgresPushOutbox(postgres_url, namespace=pg_namespace)  # the default lease: nothing expires here
        sender = PushSender(configs, outbox, http=client, worker=name)
        return sender, outbox

    async with contextlib.AsyncExitStack() as stack:
        a, a_outbox = await replica(stack, "a")
        commit = a_outbox.commit

        async def held_commit(changes: OutboxChanges) -> None:
            if changes.delivered:
                committing.set()
                await go.wait()
            await commit(changes)

        a_outbox.commit = held_commit  # type: ignore[method-assign]
        await a.start()
        stack.push_async_callback(a.stop)
        runner = a._streams[STREAM].runner  # its request waits for ``answer``
        assert runner is not None
        answer.set()
        await asyncio.wait_for(runner, WAIT)  # a delivered e1 and its runner ended ...
        await asyncio.wait_for(committing.wait(), WAIT)  # ... the commit of that delivery waits
        assert delivered == [("a", "e1")]

        b, b_outbox = await replica(stack, "b")
        claim = b_outbox.claim

        async def watched_claim(stream: StreamKey, worker: str) -> bool:
            won = await claim(stream, worker)
            claims.append(won)
            b_claimed.set()
            return won

        b_outbox.claim = watched_claim  # type: ignore[method-assign]
        await b.start()  # reads e1 as pending (a's delivery is not committed): its runner goes for the stream
        stack.push_async_callback(b.stop)
        await asyncio.wait_for(b_claimed.wait(), WAIT)
        go.set()
        await asyncio.wait_for(a.drained(), WAIT)
        await asyncio.wait_for(b.drained(), WAIT)  # b's runner got the stream once a's results were in, then ended
        left = await b_outbox.pending()
    assert claims[0] is False  # a's lease outlived its uncommitted results
    assert claims[-1] is True
    assert delivered == [("a", "e1")]  # delivered once
    assert left == []
