"""The ``TaskClaims`` contract (durable per-task leases for scale-out), run against every store that has claims.

Memory (in-process, ``time.monotonic()`` liveness) and PostgreSQL (the database clock). SQLite serves one process and
has no claims. PostgreSQL tests run in a fresh namespace (tests/conftest.py) and skip when the server is down, except
under ``CI=true``.

Expiry is exercised with a tiny ttl and a bounded polling loop (``eventually``): no sleep stands in for
synchronisation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

import pytest

from relaykit._enums import Role, TaskState
from relaykit._types import Message, Part, Task, TaskStatus
from relaykit.backends import (
    Claim,
    ConflictError,
    MemoryTaskStore,
    Orphan,
    TaskClaims,
    TaskRecord,
    TaskStore,
)

_T = TypeVar("_T")

WAIT = 10.0  # seconds: the bound on waiting for a heartbeat to expire
SHORT_TTL = 0.2  # seconds: a heartbeat that expires soon
LONG_TTL = 60.0  # seconds: a heartbeat that outlives the test


class ClaimingStore(TaskStore, TaskClaims, Protocol):
    """A task store with claims."""


def _memory(request: pytest.FixtureRequest) -> ClaimingStore:
    return MemoryTaskStore()


def _postgres(request: pytest.FixtureRequest) -> ClaimingStore:
    # Skips (fails under CI=true) when the server is down; a fresh namespace per test, dropped after. Not exclusive:
    # claims are for replicas sharing a namespace (the Redis-bus deployment).
    from relaykit.backends.postgres import PostgresTaskStore

    url, namespace = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_namespace")
    return PostgresTaskStore(url, namespace=namespace, exclusive=False)


_FACTORIES: dict[str, Callable[[pytest.FixtureRequest], ClaimingStore]] = {"memory": _memory, "postgres": _postgres}


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ClaimingStore]:
    made = _FACTORIES[request.param](request)
    await made.start()
    try:
        yield made
    finally:
        await made.close()


def now() -> datetime:
    # Whole milliseconds: what a stored body keeps.
    value = datetime.now(UTC)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def make_task(task_id: str, *, state: TaskState = TaskState.WORKING, ts: datetime | None = None) -> Task:
    history = [Message(message_id=f"m-{task_id}", role=Role.USER, parts=[Part(text=task_id)])]
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=state, timestamp=ts or now()), history=history)


async def insert(
    store: TaskStore,
    task_id: str,
    *,
    state: TaskState = TaskState.WORKING,
    ts: datetime | None = None,
    tenant: str = "",
    owner: str = "anonymous",
    event_seq: int = 0,
) -> TaskRecord:
    record = TaskRecord(make_task(task_id, state=state, ts=ts), tenant, owner, event_seq=event_seq)
    await store.save(record)
    return record


async def version_of(store: TaskStore, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> int:
    record = await store.get(task_id, tenant=tenant, owner=owner)
    assert record is not None
    return record.version


async def claimed(store: ClaimingStore, task_id: str, worker: str, **scope: str) -> Claim:
    claim = await store.claim(task_id, worker, **scope)
    assert claim is not None, f"{worker} could not claim {task_id}"
    return claim


async def eventually(probe: Callable[[], Awaitable[_T | None]], what: str) -> _T:
    """Poll ``probe`` until it returns something other than ``None`` (or falsy), for at most ``WAIT`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        result = await probe()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"not within {WAIT} s: {what}")
        await asyncio.sleep(0.02)


def test_the_stores_have_claims(store: ClaimingStore) -> None:
    assert isinstance(store, TaskClaims)


# --- claim ------------------------------------------------------------------------------------------------------


async def test_claim_of_an_unclaimed_task(store: ClaimingStore) -> None:
    await insert(store, "t1", event_seq=7)
    await store.heartbeat("w1", LONG_TTL)
    assert await store.claimant("t1") is None

    claim = await claimed(store, "t1", "w1")
    assert claim.previous is None
    # The task as stored right after the claim, version already bumped.
    assert claim.record.task == make_task("t1", ts=claim.record.task.status.timestamp)
    assert (claim.record.tenant, claim.record.owner) == ("", "anonymous")
    assert claim.record.version == 2
    assert claim.record.event_seq == 7
    assert await version_of(store, "t1") == 2
    assert await store.claimant("t1") == "w1"


async def test_a_worker_that_never_beat_can_still_claim(store: ClaimingStore) -> None:
    # Liveness matters only for the holder being displaced, not for the claimant.
    await insert(store, "t1")
    claim = await claimed(store, "t1", "w1")
    assert claim.previous is None
    assert await store.claimant("t1") == "w1"


async def test_reclaim_by_the_same_worker(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", LONG_TTL)
    first = await claimed(store, "t1", "w1")
    again = await claimed(store, "t1", "w1")
    assert again.previous == "w1"
    assert again.record.version == first.record.version + 1
    assert await store.claimant("t1") == "w1"


async def test_claim_refused_while_another_live_worker_holds_it(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", LONG_TTL)
    await store.heartbeat("w2", LONG_TTL)
    await claimed(store, "t1", "w1")
    version = await version_of(store, "t1")

    assert await store.claim("t1", "w2") is None
    assert await store.claimant("t1") == "w1"
    assert await version_of(store, "t1") == version  # a refused claim changes nothing


async def test_claim_succeeds_once_the_holders_heartbeat_expired(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", SHORT_TTL)
    first = await claimed(store, "t1", "w1")

    claim = await eventually(lambda: store.claim("t1", "w2"), "w1's heartbeat expires")
    assert claim.previous == "w1"
    assert claim.record.version == first.record.version + 1
    assert await store.claimant("t1") == "w2"


async def test_a_heartbeat_extends_the_lease(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", SHORT_TTL)
    await claimed(store, "t1", "w1")
    await store.heartbeat("w1", LONG_TTL)  # upsert: the later expiry replaces the earlier one

    assert await store.claim("t1", "w2") is None
    assert await store.claimant("t1") == "w1"


async def test_claim_succeeds_at_once_after_retire(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", LONG_TTL)
    await claimed(store, "t1", "w1")
    assert await store.claim("t1", "w2") is None

    await store.retire("w1")
    claim = await claimed(store, "t1", "w2")
    assert claim.previous == "w1"
    assert await store.claimant("t1") == "w2"
    await store.retire("w1")  # retiring an unknown worker is not an error


async def test_concurrent_claims_have_one_winner(store: ClaimingStore) -> None:
    await insert(store, "t1")
    workers = [f"w{i}" for i in range(8)]
    for worker in workers:
        await store.heartbeat(worker, LONG_TTL)
    before = await version_of(store, "t1")

    results = await asyncio.gather(*(store.claim("t1", worker) for worker in workers))

    winners = [worker for worker, claim in zip(workers, results, strict=True) if claim is not None]
    assert len(winners) == 1
    assert await store.claimant("t1") == winners[0]
    assert await version_of(store, "t1") == before + 1


# --- fencing ----------------------------------------------------------------------------------------------------


async def test_a_claim_fences_off_a_stale_writer(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w2", LONG_TTL)
    stale = await store.get("t1")  # read by a writer presumed dead (w1, never alive)
    assert stale is not None
    claim = await claimed(store, "t1", "w2")

    stale.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=now())
    with pytest.raises(ConflictError):
        await store.save(stale)

    # The claimant writes from the claimed record; a save keeps the claim.
    record = claim.record
    record.task.status = TaskStatus(state=TaskState.FAILED, timestamp=now())
    record.body = None
    await store.save(record)
    got = await store.get("t1")
    assert got is not None
    assert got.task.status.state is TaskState.FAILED
    assert got.version == record.version
    assert await store.claimant("t1") == "w2"


# --- release ----------------------------------------------------------------------------------------------------


async def test_release_only_by_the_holder(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", LONG_TTL)
    await claimed(store, "t1", "w1")
    version = await version_of(store, "t1")

    await store.release("t1", "w2")
    assert await store.claimant("t1") == "w1"
    await store.release("t1", "w1")
    assert await store.claimant("t1") is None
    assert await version_of(store, "t1") == version  # release does not bump the version

    await store.release("t1", "w1")  # releasing an unclaimed task is a no-op
    await store.release("missing", "w1")  # and so is releasing a missing one
    claim = await claimed(store, "t1", "w2")
    assert claim.previous is None


async def test_save_claimed_moves_the_claim_with_the_write(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", LONG_TTL)
    await store.heartbeat("w2", LONG_TTL)
    record = (await claimed(store, "t1", "w1")).record

    # The write that stores the outcome releases the claim: one write, no window in which the task is stored
    # interrupted and still claimed.
    record.task.status = TaskStatus(state=TaskState.INPUT_REQUIRED, timestamp=now())
    record.body = None
    await store.save_claimed(record, None)
    got = await store.get("t1")
    assert got is not None
    assert got.task.status.state is TaskState.INPUT_REQUIRED
    assert got.version == record.version
    assert await store.claimant("t1") is None

    # Nobody claimed it since: the same writer takes the claim back with its next write.
    record.task.status = TaskStatus(state=TaskState.WORKING, timestamp=now())
    record.body = None
    await store.save_claimed(record, "w1")
    assert await store.claimant("t1") == "w1"
    assert await version_of(store, "t1") == record.version

    # Once another worker claimed it, that writer is fenced off: nothing changes, the new claim included.
    await store.save_claimed(record, None)
    other = await claimed(store, "t1", "w2")
    assert other.previous is None
    record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=now())
    record.body = None
    with pytest.raises(ConflictError):
        await store.save_claimed(record, "w1")
    with pytest.raises(ConflictError):
        await store.save_claimed(record, None)
    assert await store.claimant("t1") == "w2"
    got = await store.get("t1")
    assert got is not None
    assert got.task.status.state is TaskState.WORKING
    assert got.version == other.record.version

    # A claimed task is stored already: never an insert.
    with pytest.raises(ValueError, match="never inserts"):
        await store.save_claimed(TaskRecord(make_task("t2")), None)
    assert await store.get("t2") is None


# --- scope ------------------------------------------------------------------------------------------------------


async def test_claim_is_scoped_like_get(store: ClaimingStore) -> None:
    await insert(store, "t1", tenant="acme", owner="alice")
    await store.heartbeat("w1", LONG_TTL)

    assert await store.claim("missing", "w1") is None
    assert await store.claim("t1", "w1") is None
    assert await store.claim("t1", "w1", tenant="other", owner="alice") is None
    assert await store.claim("t1", "w1", tenant="acme", owner="bob") is None
    assert await store.claimant("t1") is None
    assert await version_of(store, "t1", tenant="acme", owner="alice") == 1

    claim = await claimed(store, "t1", "w1", tenant="acme", owner="alice")
    assert (claim.record.tenant, claim.record.owner) == ("acme", "alice")
    assert claim.record.task.id == "t1"


# --- claimant ---------------------------------------------------------------------------------------------------


async def test_claimant_reports_the_column_not_liveness(store: ClaimingStore) -> None:
    assert await store.claimant("missing") is None
    await insert(store, "t1")
    assert await store.claimant("t1") is None
    await store.heartbeat("w1", LONG_TTL)
    await claimed(store, "t1", "w1")
    await store.retire("w1")
    assert await store.claimant("t1") == "w1"  # dead but still recorded, until someone claims


# --- orphans ----------------------------------------------------------------------------------------------------


async def test_orphans(store: ClaimingStore) -> None:
    base = now() - timedelta(hours=2)

    def at(minutes: int) -> datetime:
        return base + timedelta(minutes=minutes)

    await store.heartbeat("live", LONG_TTL)
    await store.heartbeat("gone", LONG_TTL)

    async def held(task_id: str, worker: str, *, state: TaskState, ts: datetime, **scope: str) -> None:
        record = await insert(store, task_id, state=state, ts=ts, **scope)
        await claimed(store, task_id, worker, tenant=record.tenant, owner=record.owner)

    # Orphans: active tasks of dead claimants (retired, or never alive), in any scope, and stale unstarted tasks.
    await held("dead-working", "gone", state=TaskState.WORKING, ts=at(3))
    await held("dead-submitted", "gone", state=TaskState.SUBMITTED, ts=at(1), tenant="acme", owner="alice")
    await held("never-alive", "ghost", state=TaskState.WORKING, ts=at(4))
    await insert(store, "stale-unclaimed", state=TaskState.SUBMITTED, ts=at(2))
    # Let go of while WORKING by a runner that could not record its end: nobody runs it.
    await insert(store, "stale-working-unclaimed", state=TaskState.WORKING, ts=at(5))
    # Not orphans: a live claimant's tasks, terminal or interrupted tasks, a fresh unclaimed submission.
    await held("live-working", "live", state=TaskState.WORKING, ts=at(0))
    await held("live-submitted", "live", state=TaskState.SUBMITTED, ts=at(0))
    await held("dead-completed", "gone", state=TaskState.COMPLETED, ts=at(0))
    await held("dead-failed", "gone", state=TaskState.FAILED, ts=at(0))
    await held("dead-input", "gone", state=TaskState.INPUT_REQUIRED, ts=at(0))
    await insert(store, "fresh-unclaimed", state=TaskState.SUBMITTED, ts=now())
    await insert(store, "fresh-working-unclaimed", state=TaskState.WORKING, ts=now())
    await insert(store, "old-completed-unclaimed", state=TaskState.COMPLETED, ts=at(0))
    await store.retire("gone")

    found = await store.orphans(unstarted_after=60.0)
    # Oldest status first.
    assert found == [
        Orphan("dead-submitted", "acme", "alice", "gone"),
        Orphan("stale-unclaimed", "", "anonymous", None),
        Orphan("dead-working", "", "anonymous", "gone"),
        Orphan("never-alive", "", "anonymous", "ghost"),
        Orphan("stale-working-unclaimed", "", "anonymous", None),
    ]
    assert await store.orphans(unstarted_after=60.0, limit=2) == found[:2]
    assert await store.orphans(unstarted_after=60.0, limit=0) == []
    # A longer grace for unstarted tasks leaves the unclaimed one out.
    longer = await store.orphans(unstarted_after=24 * 3600.0)
    assert [orphan.task_id for orphan in longer] == ["dead-submitted", "dead-working", "never-alive"]


async def test_a_claimant_becomes_an_orphan_when_its_heartbeat_expires(store: ClaimingStore) -> None:
    await insert(store, "t1")
    await store.heartbeat("w1", LONG_TTL)
    await claimed(store, "t1", "w1")
    assert await store.orphans(unstarted_after=60.0) == []

    await store.heartbeat("w1", SHORT_TTL)  # upsert: shortens the lease too
    found = await eventually(lambda: store.orphans(unstarted_after=60.0), "w1's heartbeat expires")
    assert found == [Orphan("t1", "", "anonymous", "w1")]

    # Recovery: another worker claims it, and it is no orphan any more.
    await store.heartbeat("w2", LONG_TTL)
    claim = await claimed(store, "t1", "w2")
    assert claim.previous == "w1"
    assert await store.orphans(unstarted_after=60.0) == []


# --- PostgreSQL: racing claims, schema migration ----------------------------------------------------------------


@pytest.mark.postgres
async def test_claims_racing_on_a_busy_row_have_one_winner(postgres_url: str, pg_namespace: str) -> None:
    # Another transaction holds the row, so every claim below is in flight at once, waiting on the same row lock;
    # when it commits they are decided one after the other, each seeing the claim before it.
    import asyncpg

    from relaykit.backends.postgres import PostgresTaskStore

    workers = [f"w{i}" for i in range(6)]
    store = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False, max_size=len(workers))
    await store.start()
    conn = await asyncpg.connect(postgres_url, timeout=WAIT)
    # Another connection watches: inside a transaction pg_stat_activity is a snapshot that would never change.
    watcher = await asyncpg.connect(postgres_url, timeout=WAIT)
    try:
        await insert(store, "t1")
        for worker in workers:
            await store.heartbeat(worker, LONG_TTL)
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(f"SELECT 1 FROM {pg_namespace}_tasks WHERE id = 't1' FOR UPDATE")
            racing = asyncio.gather(*(store.claim("t1", worker) for worker in workers))

            async def all_waiting() -> bool:
                count = await watcher.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
                    f"UPDATE {pg_namespace}_tasks %",
                )
                return int(count) == len(workers)

            await eventually(all_waiting, "every claim waits on the row lock")
        finally:
            await tx.commit()
        results = await racing
        winners = [worker for worker, claim in zip(workers, results, strict=True) if claim is not None]
        assert len(winners) == 1
        assert await store.claimant("t1") == winners[0]
        assert await version_of(store, "t1") == 2
    finally:
        await watcher.close()
        await conn.close()
        await store.close()


async def _create_version_1(url: str, namespace: str) -> Task:
    """A namespace as relaykit with schema version 1 left it, holding one WORKING task."""
    import asyncpg

    from relaykit.backends.postgres._schema import MIGRATIONS

    conn = await asyncpg.connect(url, timeout=WAIT)
    try:
        async with conn.transaction():
            await conn.execute(
                f"CREATE TABLE {namespace}_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
            )
            for statement in MIGRATIONS[0]:
                await conn.execute(statement.format(ns=namespace))
            await conn.execute(f"INSERT INTO {namespace}_schema (id, version) VALUES (1, 1)")
            task = make_task("old", state=TaskState.WORKING)
            await conn.execute(
                f"INSERT INTO {namespace}_tasks (id, tenant, owner, context_id, state, status_ts, version, event_seq, "
                "body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                "old",
                "acme",
                "alice",
                "ctx",
                TaskState.WORKING.value,
                1,
                5,
                3,
                task.to_json(),
            )
    finally:
        await conn.close()
    return task


async def _schema_of(url: str, namespace: str) -> tuple[int, set[str], set[str]]:
    import asyncpg

    conn = await asyncpg.connect(url, timeout=WAIT)
    try:
        version = await conn.fetchval(f"SELECT version FROM {namespace}_schema")
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $1", f"{namespace}_tasks"
        )
        indexes = await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = $1", f"{namespace}_tasks")
    finally:
        await conn.close()
    return int(version), {str(row[0]) for row in columns}, {str(row[0]) for row in indexes}


@pytest.mark.postgres
async def test_a_version_1_namespace_is_migrated_on_start(postgres_url: str, pg_namespace: str) -> None:
    from relaykit.backends.postgres import SCHEMA_VERSION, PostgresTaskStore

    task = await _create_version_1(postgres_url, pg_namespace)
    store = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False)
    await store.start()
    try:
        assert store.migrated == (1, SCHEMA_VERSION)
        # The row is kept, unclaimed.
        got = await store.get("old", tenant="acme", owner="alice")
        assert got is not None
        assert (got.task, got.version, got.event_seq) == (task, 5, 3)
        assert await store.claimant("old") is None
        # Claims work on it.
        await store.heartbeat("w1", LONG_TTL)
        claim = await claimed(store, "old", "w1", tenant="acme", owner="alice")
        assert (claim.previous, claim.record.version, claim.record.event_seq) == (None, 6, 3)
    finally:
        await store.close()

    version, columns, indexes = await _schema_of(postgres_url, pg_namespace)
    assert version == SCHEMA_VERSION
    assert "worker" in columns
    assert f"{pg_namespace}_tasks_worker" in indexes


@pytest.mark.postgres
async def test_relaykit_db_upgrade_migrates_a_version_1_namespace(postgres_url: str, pg_namespace: str) -> None:
    from relaykit.backends.postgres import SCHEMA_VERSION, upgrade

    await _create_version_1(postgres_url, pg_namespace)
    assert await upgrade(postgres_url, namespace=pg_namespace) == (1, SCHEMA_VERSION)
    assert await upgrade(postgres_url, namespace=pg_namespace) == (SCHEMA_VERSION, SCHEMA_VERSION)
    version, columns, _ = await _schema_of(postgres_url, pg_namespace)
    assert (version, "worker" in columns) == (SCHEMA_VERSION, True)


@pytest.mark.parametrize("told", [True, False], ids=["told", "untold"])
async def test_insert_claimed_stores_a_new_task_held_by_its_worker(store: ClaimingStore, told: bool) -> None:
    # ``told=False`` (nobody hears of the task before its next write) may commit lazily, never differently.
    await store.heartbeat("w1", LONG_TTL)
    await store.heartbeat("w2", LONG_TTL)
    record = TaskRecord(make_task("t1", state=TaskState.SUBMITTED))
    await store.insert_claimed(record, "w1", told=told)
    assert (await store.get("t1")) is not None
    assert await store.claimant("t1") == "w1"
    assert await version_of(store, "t1") == record.version

    # Held: another live worker cannot claim it; the holder's next write (the outcome) releases it.
    assert await store.claim("t1", "w2") is None
    record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=now())
    record.body = None
    await store.save_claimed(record, None)
    assert await store.claimant("t1") is None

    # A task that exists is not stored again, nor claimed.
    with pytest.raises(ConflictError):
        await store.insert_claimed(TaskRecord(make_task("t1", state=TaskState.SUBMITTED)), "w2")
    assert await store.claimant("t1") is None
