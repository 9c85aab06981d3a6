"""What the PostgreSQL store adds to the store contract: migrations under an advisory lock, ``relaykit db upgrade``,
optimistic concurrency between replicas, the namespace guard (one in-process-bus process alone, or Redis-bus replicas
sharing it, never both), durability and outage behaviour.

Every test runs in fresh namespaces (``pg_namespace`` / ``pg_namespaces`` in tests/conftest.py), dropped afterwards;
with the server down they skip, under ``CI=true`` they fail.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

if os.environ.get("CI", "").strip().lower() not in ("1", "true", "yes"):
    # Outside CI a machine without the postgres extra skips this module; under CI a missing driver fails.
    pytest.importorskip("asyncpg", reason="asyncpg is not installed (pip install 'relaykit[postgres]')")

import asyncpg
from support.servers import free_port

import relaykit
from relaykit._enums import TaskState
from relaykit._types import Task, TaskPushNotificationConfig, TaskStatus
from relaykit.backends import ConflictError, StoreLockedError, TaskQuery, TaskRecord, open_push_store, open_store
from relaykit.backends.postgres import (
    SCHEMA_VERSION,
    PostgresPushConfigStore,
    PostgresTaskStore,
    StoreInUseError,
    redact,
    upgrade,
)
from relaykit.backends.postgres._schema import lock_key
from relaykit.errors import ServiceUnavailableError

pytestmark = pytest.mark.postgres

BASE = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
REPO = Path(relaykit.__file__).resolve().parents[2]
SRC = str(Path(relaykit.__file__).resolve().parents[1])
WAIT = 10.0  # seconds: bound on waiting for the server to reach a state another connection set up


def make_task(task_id: str, *, seconds: int = 0, state: TaskState = TaskState.WORKING, text: str = "") -> Task:
    task = Task(
        id=task_id, context_id="ctx", status=TaskStatus(state=state, timestamp=BASE + timedelta(seconds=seconds))
    )
    if text:
        task.metadata = {"text": text}
    return task


def make_config(task_id: str, config_id: str) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(task_id=task_id, id=config_id, url=f"https://hooks.example.com/{config_id}")


@asynccontextmanager
async def opened(url: str, namespace: str, **options: Any) -> AsyncIterator[PostgresTaskStore]:
    store = PostgresTaskStore(url, namespace=namespace, **options)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def admin(url: str) -> AsyncIterator[Any]:
    conn = await asyncpg.connect(url, timeout=WAIT)
    try:
        yield conn
    finally:
        await conn.close()


async def terminate_backends(url: str, namespace: str) -> int:
    """Kill every server connection of the stores on ``namespace`` (pool and guard), as a server restart would."""
    async with admin(url) as conn:
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name LIKE $1 AND pid <> pg_backend_pid()",
            f"relaykit {namespace} %",
        )
    return int(killed)


async def wait_until_dropped(url: str, store: PostgresTaskStore) -> None:
    """Wait (bounded) until the killed connections are gone on the server and the store's guard noticed it.

    A terminated connection dies asynchronously: the server process exits a moment after pg_terminate_backend
    returns, and the client sees the socket close on a later turn of its event loop.
    """
    role = "guard" if store.exclusive else "replica"  # the guard connection's name (``_db._application_name``)
    async with admin(url) as conn, asyncio.timeout(WAIT):
        # Polling the server's and the client's view of a connection: there is no event to wait on.
        while await conn.fetchval(  # noqa: ASYNC110
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1",
            f"relaykit {store.namespace} {role} %",
        ):
            await asyncio.sleep(0.01)
        guard = store._db._lock_conn
        while guard is not None and not guard.is_closed():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}


def relaykit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaykit.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
        cwd=REPO,
        check=False,
    )


async def table_names(url: str, namespace: str) -> set[str]:
    async with admin(url) as conn:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE tablename LIKE $1", f"{namespace}\\_%")
    return {str(row[0]) for row in rows}


# --- schema and migrations --------------------------------------------------------------------------------------


async def test_concurrent_starts_create_the_schema_once(postgres_url: str, pg_namespace: str) -> None:
    # Five replicas starting at once: one creates the schema under the advisory lock, the others wait for its
    # commit and find it current. Without the lock, concurrent CREATE TABLEs would fail with duplicate errors.
    stores = [PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False) for _ in range(5)]
    try:
        await asyncio.gather(*(store.start() for store in stores))
        outcomes = sorted(store.migrated for store in stores if store.migrated is not None)
        assert outcomes == [(0, SCHEMA_VERSION)] + [(SCHEMA_VERSION, SCHEMA_VERSION)] * 4
        # Every replica works on the one schema.
        await asyncio.gather(*(store.save(TaskRecord(make_task(f"t{i}", seconds=i))) for i, store in enumerate(stores)))
        page = await stores[0].list(TaskQuery(page_size=10))
        assert [t.id for t in page.tasks] == ["t4", "t3", "t2", "t1", "t0"]
    finally:
        await asyncio.gather(*(store.close() for store in stores))
    assert await table_names(postgres_url, pg_namespace) == {
        f"{pg_namespace}_tasks",
        f"{pg_namespace}_push_configs",
        f"{pg_namespace}_push_health",
        f"{pg_namespace}_push_leases",
        f"{pg_namespace}_push_outbox",
        f"{pg_namespace}_schema",
        f"{pg_namespace}_workers",
    }
    async with admin(postgres_url) as conn:
        rows = await conn.fetch(f"SELECT id, version FROM {pg_namespace}_schema")
    assert [tuple(row) for row in rows] == [(1, SCHEMA_VERSION)]


async def test_concurrent_upgrades_and_starts_mix(postgres_url: str, pg_namespace: str) -> None:
    stores = [PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False) for _ in range(3)]
    try:
        results = await asyncio.gather(
            *(store.start() for store in stores), *(upgrade(postgres_url, namespace=pg_namespace) for _ in range(3))
        )
        upgrades = [r for r in results if r is not None]
        outcomes = sorted([*upgrades, *(s.migrated for s in stores)])  # type: ignore[misc]
        assert outcomes == [(0, SCHEMA_VERSION)] + [(SCHEMA_VERSION, SCHEMA_VERSION)] * 5
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_a_newer_schema_is_refused(postgres_url: str, pg_namespace: str) -> None:
    assert await upgrade(postgres_url, namespace=pg_namespace) == (0, SCHEMA_VERSION)
    async with admin(postgres_url) as conn:
        await conn.execute(f"UPDATE {pg_namespace}_schema SET version = $1", SCHEMA_VERSION + 1)
    store = PostgresTaskStore(postgres_url, namespace=pg_namespace)
    with pytest.raises(RuntimeError, match=r"newer than this relaykit supports.*upgrade relaykit"):
        await store.start()
    # The failed start released everything: the guard is free again.
    async with opened(postgres_url, pg_namespace + "_x"):
        pass
    with pytest.raises(RuntimeError, match="schema version"):
        await upgrade(postgres_url, namespace=pg_namespace)


def test_db_upgrade_command(postgres_url: str, pg_namespace: str) -> None:
    first = relaykit_cli("db", "upgrade", "--store", postgres_url, "--namespace", pg_namespace)
    assert first.returncode == 0, first.stderr
    assert f"namespace {pg_namespace}: schema version {SCHEMA_VERSION} (created)" in first.stdout

    again = relaykit_cli("db", "upgrade", "--namespace", pg_namespace, "--store", postgres_url)
    assert again.returncode == 0, again.stderr
    assert f"schema version {SCHEMA_VERSION} (already current)" in again.stdout

    # RELAYKIT_STORE stands in for --store.
    env_run = subprocess.run(
        [sys.executable, "-m", "relaykit.cli", "db", "upgrade", "--namespace", pg_namespace],
        capture_output=True,
        text=True,
        timeout=60,
        env={**child_env(), "RELAYKIT_STORE": postgres_url},
        cwd=REPO,
        check=False,
    )
    assert env_run.returncode == 0, env_run.stderr
    assert "(already current)" in env_run.stdout


def test_db_upgrade_command_errors(postgres_url: str, pg_namespace: str) -> None:
    port = free_port()
    parts = urlsplit(postgres_url)
    down = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}:hunter2@127.0.0.1:{port}"))
    unreachable = relaykit_cli("db", "upgrade", "--store", down, "--namespace", pg_namespace)
    assert unreachable.returncode == 1
    assert "cannot connect to the PostgreSQL store" in unreachable.stderr
    assert "hunter2" not in unreachable.stderr  # passwords never reach messages

    bad_namespace = relaykit_cli("db", "upgrade", "--store", postgres_url, "--namespace", "1bad-name")
    assert bad_namespace.returncode == 1
    assert "invalid namespace" in bad_namespace.stderr

    env = {k: v for k, v in child_env().items() if k != "RELAYKIT_STORE"}
    usage = subprocess.run(
        [sys.executable, "-m", "relaykit.cli", "db", "upgrade"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert usage.returncode == 2
    assert "no store given" in usage.stderr


# --- optimistic concurrency between replicas --------------------------------------------------------------------


async def test_concurrent_writers_of_one_task_exactly_one_wins(postgres_url: str, pg_namespace: str) -> None:
    async with (
        opened(postgres_url, pg_namespace, exclusive=False) as one,
        opened(postgres_url, pg_namespace, exclusive=False) as two,
    ):
        await one.save(TaskRecord(make_task("t1")))
        for round_ in range(20):
            a = await one.get("t1")
            b = await two.get("t1")
            assert a is not None
            assert b is not None
            assert a.version == b.version
            a.task.status = TaskStatus(state=TaskState.WORKING, timestamp=BASE + timedelta(seconds=2 * round_ + 1))
            a.task.metadata = {"writer": "one"}
            b.task.status = TaskStatus(state=TaskState.WORKING, timestamp=BASE + timedelta(seconds=2 * round_ + 2))
            b.task.metadata = {"writer": "two"}
            results = await asyncio.gather(one.save(a), two.save(b), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            assert len(errors) == 1, results
            assert isinstance(errors[0], ConflictError)
            winner, loser = (a, b) if results[0] is None else (b, a)
            assert winner.version == loser.version + 1
            stored = await one.get("t1")
            assert stored is not None
            assert stored.version == winner.version
            assert stored.task == winner.task


async def test_concurrent_inserts_of_one_id_exactly_one_wins(postgres_url: str, pg_namespace: str) -> None:
    async with (
        opened(postgres_url, pg_namespace, exclusive=False) as one,
        opened(postgres_url, pg_namespace, exclusive=False) as two,
    ):
        for i in range(20):
            first = TaskRecord(make_task(f"t{i}", text="one"))
            second = TaskRecord(make_task(f"t{i}", text="two"), tenant="other")
            results = await asyncio.gather(one.save(first), two.save(second), return_exceptions=True)
            assert sum(isinstance(r, ConflictError) for r in results) == 1, results
            winner = first if results[0] is None else second
            stored = await one.get(f"t{i}", tenant=winner.tenant)
            assert stored is not None
            assert stored.task == winner.task


async def test_fail_orphans_beats_a_concurrent_stale_writer(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace) as store:
        for i in range(50):
            await store.save(TaskRecord(make_task(f"t{i}", seconds=i)))
        stale = [await store.get(f"t{i}") for i in range(50)]
        for record in stale:
            assert record is not None
            record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE + timedelta(hours=1))

        async def write_all() -> list[BaseException | None]:
            return list(await asyncio.gather(*(store.save(r) for r in stale if r is not None), return_exceptions=True))

        failed, writes = await asyncio.gather(store.fail_orphans("server restarted"), write_all())
        # Each task ends either COMPLETED by its writer (then not an orphan) or FAILED (then the write conflicted).
        completed = sum(1 for w in writes if w is None)
        assert all(w is None or isinstance(w, ConflictError) for w in writes)
        assert failed + completed == 50
        page = await store.list(TaskQuery(page_size=100))
        states = [t.status.state for t in page.tasks]
        assert states.count(TaskState.FAILED) == failed
        assert states.count(TaskState.COMPLETED) == completed


# --- the namespace guard ----------------------------------------------------------------------------------------------


async def test_a_second_store_on_the_namespace_is_refused(postgres_url: str, pg_namespaces: Callable[[], str]) -> None:
    namespace, other = pg_namespaces(), pg_namespaces()
    async with opened(postgres_url, namespace) as first:
        await first.save(TaskRecord(make_task("t1")))
        second = PostgresTaskStore(postgres_url, namespace=namespace)
        with pytest.raises(StoreInUseError) as refused:
            await second.start()
        message = str(refused.value)
        assert "another relaykit process is using this PostgreSQL store" in message
        assert namespace in message
        assert "--bus redis://" in message
        assert f"pid {os.getpid()}" in message  # who holds it (from the holder's application_name)
        assert isinstance(refused.value, StoreLockedError)
        await second.close()  # harmless: it never started

        # Another namespace is another store.
        async with opened(postgres_url, other) as elsewhere:
            assert await elsewhere.get("t1") is None

        # The namespace is case-insensitive like its tables: a different spelling is the same store.
        with pytest.raises(StoreInUseError):
            await PostgresTaskStore(postgres_url, namespace=namespace.upper()).start()

    # Released at close: the next process takes over.
    async with opened(postgres_url, namespace) as successor:
        assert await successor.get("t1") is not None


async def test_a_second_relaykit_serve_is_refused(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relaykit.cli",
            "serve",
            "examples/echo.py",
            "--port",
            str(free_port()),
            "--store",
            postgres_url,
            "--namespace",
            pg_namespace,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={k: v for k, v in child_env().items() if k not in ("RELAYKIT_BUS", "RELAYKIT_STORE")},
            cwd=REPO,
        )
        try:
            _, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 2, stderr.decode()  # a refused start is a usage-class error: one line, exit 2
    text = stderr.decode()
    assert "another relaykit process is using this PostgreSQL store" in text
    assert "--bus redis://" in text


async def test_the_guard_is_taken_again_after_its_connection_dies(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace) as store:
        await store.save(TaskRecord(make_task("t1")))
        assert await terminate_backends(postgres_url, pg_namespace) >= 2  # the pool's and the guard's
        await wait_until_dropped(postgres_url, store)
        # The next operation may see the dead connection; the one after works and holds the guard again.
        with suppress(ServiceUnavailableError):
            await store.get("t1")
        assert await store.get("t1") is not None
        with pytest.raises(StoreInUseError):
            await PostgresTaskStore(postgres_url, namespace=pg_namespace).start()


async def test_a_namespace_taken_over_while_the_guard_was_lost_stops_the_old_store(
    postgres_url: str, pg_namespace: str
) -> None:
    async with opened(postgres_url, pg_namespace) as old:
        await old.save(TaskRecord(make_task("t1")))
        await terminate_backends(postgres_url, pg_namespace)
        await wait_until_dropped(postgres_url, old)
        async with opened(postgres_url, pg_namespace) as new:
            with pytest.raises(ServiceUnavailableError, match="lost the single-process lock"):
                await old.get("t1")
            assert await new.get("t1") is not None
        # The new owner is gone: the old store may take the namespace back.
        assert await old.get("t1") is not None


async def guard_holders(url: str, namespace: str) -> list[tuple[str, str]]:
    """``(mode, application_name)`` of every session holding the namespace guard, as the server sees them."""
    key = lock_key("serve", namespace)
    async with admin(url) as conn:
        rows = await conn.fetch(
            "SELECT l.mode, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::bigint::oid "
            "AND l.objid = $2::bigint::oid AND l.objsubid = 1 ORDER BY a.application_name",
            (key >> 32) & 0xFFFFFFFF,
            key & 0xFFFFFFFF,
        )
    return [(str(row[0]), str(row[1])) for row in rows]


async def test_replicas_share_the_guard_and_an_in_process_bus_store_is_refused_beside_them(
    postgres_url: str, pg_namespace: str
) -> None:
    replicas = [PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False) for _ in range(3)]
    try:
        # Replicas start together: shared holders do not exclude each other.
        await asyncio.gather(*(replica.start() for replica in replicas))
        holders = await guard_holders(postgres_url, pg_namespace)
        assert [mode for mode, _ in holders] == ["ShareLock"] * 3
        assert all(f"relaykit {pg_namespace} replica pid {os.getpid()}" in name for _, name in holders)
        await replicas[0].save(TaskRecord(make_task("t1")))  # a task a replica is running

        alone = PostgresTaskStore(postgres_url, namespace=pg_namespace)
        with pytest.raises(StoreInUseError) as refused:
            await alone.start()
        message = str(refused.value)
        assert "another relaykit process is using this PostgreSQL store" in message
        assert "with the Redis bus (3 replica(s) or worker(s), held by" in message
        assert f"replica pid {os.getpid()}" in message
        assert "cannot serve beside Redis-bus replicas" in message
        assert "--bus redis://" in message
        assert "another --namespace" in message
        assert isinstance(refused.value, StoreLockedError)
        await alone.close()
        # The refused store holds nothing and changed nothing.
        assert [mode for mode, _ in await guard_holders(postgres_url, pg_namespace)] == ["ShareLock"] * 3
        stored = await replicas[1].get("t1")
        assert stored is not None
        assert stored.task.status.state == TaskState.WORKING
    finally:
        await asyncio.gather(*(replica.close() for replica in replicas))
    # The last replica gone, an in-process-bus process may take over.
    async with opened(postgres_url, pg_namespace) as successor:
        assert await successor.get("t1") is not None


async def test_a_replica_is_refused_beside_an_in_process_bus_store(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace) as alone:
        await alone.save(TaskRecord(make_task("t1")))
        replica = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False)
        with pytest.raises(StoreInUseError) as refused:
            await replica.start()
        message = str(refused.value)
        assert "another relaykit process is using this PostgreSQL store" in message
        assert f"with the in-process bus (held by 'relaykit {pg_namespace} guard pid {os.getpid()}" in message
        assert "Redis-bus replicas and workers cannot join it" in message
        await replica.close()
        assert [mode for mode, _ in await guard_holders(postgres_url, pg_namespace)] == ["ExclusiveLock"]
    async with opened(postgres_url, pg_namespace, exclusive=False) as replica:
        assert await replica.get("t1") is not None


async def test_an_in_process_bus_store_is_refused_while_a_replica_heartbeats(
    postgres_url: str, pg_namespace: str
) -> None:
    # A server restart drops every session lock, replicas included, until each takes its own again: their heartbeats
    # still say they are alive, and an in-process-bus start then would fail the tasks they run.
    async with opened(postgres_url, pg_namespace, exclusive=False) as replica:
        await replica.heartbeat("host:1:aaaaaa", 30.0)
        await replica.heartbeat("host:2:bbbbbb", -1.0)  # a replica that died: its heartbeat has lapsed
    assert await guard_holders(postgres_url, pg_namespace) == []
    alone = PostgresTaskStore(postgres_url, namespace=pg_namespace)
    with pytest.raises(StoreInUseError) as refused:
        await alone.start()
    message = str(refused.value)
    assert "with the Redis bus (worker 'host:1:aaaaaa' heartbeating, live for" in message
    assert "until its --lease lapses" in message
    assert "--bus redis://" in message
    await alone.close()
    assert await guard_holders(postgres_url, pg_namespace) == []  # the lock it took is released
    # Once that replica has retired (or its lease lapsed), the namespace is free.
    async with opened(postgres_url, pg_namespace, exclusive=False) as replica:
        await replica.retire("host:1:aaaaaa")
    async with opened(postgres_url, pg_namespace):
        pass


async def test_a_replica_takes_its_shared_guard_again_after_its_connection_dies(
    postgres_url: str, pg_namespace: str
) -> None:
    async with opened(postgres_url, pg_namespace, exclusive=False) as replica:
        assert await terminate_backends(postgres_url, pg_namespace) >= 2  # the pool's and the guard's
        await wait_until_dropped(postgres_url, replica)
        # A heartbeat takes it again (it comes every few seconds, whether requests come or not).
        with suppress(ServiceUnavailableError):
            await replica.heartbeat("w1", 30.0)
        await replica.heartbeat("w1", 30.0)
        assert [mode for mode, _ in await guard_holders(postgres_url, pg_namespace)] == ["ShareLock"]
        with pytest.raises(StoreInUseError, match=r"with the Redis bus \(1 replica"):
            await PostgresTaskStore(postgres_url, namespace=pg_namespace).start()

        # An in-process-bus store that got the namespace while the replica's guard was down stops the replica.
        await replica.retire("w1")
        await terminate_backends(postgres_url, pg_namespace)
        await wait_until_dropped(postgres_url, replica)
        async with opened(postgres_url, pg_namespace) as alone:
            with pytest.raises(ServiceUnavailableError, match="lost the Redis-bus replicas' shared lock"):
                await replica.get("t1")
            with pytest.raises(ServiceUnavailableError, match="with the in-process bus"):
                await replica.heartbeat("w1", 30.0)
            assert await alone.get("t1") is None
        # That store is gone: the replica takes its guard back.
        assert await replica.get("t1") is None
        assert [mode for mode, _ in await guard_holders(postgres_url, pg_namespace)] == ["ShareLock"]


async def test_the_guard_never_waits_behind_the_migration_lock(postgres_url: str, pg_namespace: str) -> None:
    # ``relaykit db upgrade`` (or a replica's start) holds the migration lock; a start takes the guard first, then
    # waits for the migration. A start of the other kind meanwhile is refused at once, not queued, and the
    # migration's end lets everything proceed: no lock cycle.
    async with admin(postgres_url) as migrating:
        transaction = migrating.transaction()
        await transaction.start()
        await migrating.execute("SELECT pg_advisory_xact_lock($1)", lock_key("migrate", pg_namespace))
        replica = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False)
        starting = asyncio.ensure_future(replica.start())
        upgrading = asyncio.ensure_future(upgrade(postgres_url, namespace=pg_namespace))
        try:
            async with asyncio.timeout(WAIT):
                while not await guard_holders(postgres_url, pg_namespace):  # noqa: ASYNC110 - another process's state
                    await asyncio.sleep(0.01)
            assert not starting.done()
            assert not upgrading.done()
            alone = PostgresTaskStore(postgres_url, namespace=pg_namespace)
            with pytest.raises(StoreInUseError, match="with the Redis bus"):
                await asyncio.wait_for(alone.start(), WAIT)
            await alone.close()
        finally:
            await transaction.rollback()
        await asyncio.wait_for(asyncio.gather(starting, upgrading), WAIT)
        await replica.close()
    assert replica.migrated is not None
    assert upgrading.result()[1] == SCHEMA_VERSION


# --- sharing, durability ----------------------------------------------------------------------------------------


async def test_open_store_and_open_push_store_share_one_pool(postgres_url: str, pg_namespace: str) -> None:
    tasks = open_store(postgres_url, namespace=pg_namespace)
    push = open_push_store(postgres_url, tasks)
    assert isinstance(tasks, PostgresTaskStore)
    assert isinstance(push, PostgresPushConfigStore)
    assert push._db is tasks._db
    assert tasks.exclusive
    await tasks.start()
    await push.start()
    try:
        await push.put(make_config("t1", "c1"))
        await tasks.close()  # the push store still holds the pool
        assert [c.id for c in await push.list("t1")] == ["c1"]
    finally:
        await push.close()
        await tasks.close()
    with pytest.raises(RuntimeError, match="not started"):
        await push.list("t1")


async def test_data_survives_close_and_reopen(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace) as store:
        push = PostgresPushConfigStore(store)
        await push.start()
        for i in range(5):
            await store.save(TaskRecord(make_task(f"t{i}", seconds=i), tenant="acme", owner="alice"))
        record = await store.get("t0", tenant="acme", owner="alice")
        assert record is not None
        record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE + timedelta(seconds=9))
        record.event_seq = 7
        await store.save(record)
        assert await store.delete("t4", tenant="acme", owner="alice")
        await push.put(make_config("t1", "c1"), owner="alice")
        await push.put(make_config("t1", "c2"), owner="alice")
        await push.close()
        expected = await store.get("t0", tenant="acme", owner="alice")

    async with opened(postgres_url, pg_namespace) as store:
        assert store.migrated == (SCHEMA_VERSION, SCHEMA_VERSION)
        push = PostgresPushConfigStore(store)
        await push.start()
        got = await store.get("t0", tenant="acme", owner="alice")
        assert got is not None
        assert expected is not None
        assert got.task == expected.task
        assert (got.version, got.event_seq) == (2, 7)
        assert await store.get("t4", tenant="acme", owner="alice") is None
        page = await store.list(TaskQuery(tenant="acme", owner="alice"))
        assert [t.id for t in page.tasks] == ["t0", "t3", "t2", "t1"]
        assert [c.id for c in await push.list("t1", owner="alice")] == ["c1", "c2"]
        await push.close()


async def test_the_writers_body_is_stored_as_given(postgres_url: str, pg_namespace: str) -> None:
    task = make_task("t1", text="hello")
    body = task.to_json()
    async with opened(postgres_url, pg_namespace) as store:
        await store.save(TaskRecord(task, body=body))
    async with admin(postgres_url) as conn:
        stored = await conn.fetchval(f"SELECT body FROM {pg_namespace}_tasks WHERE id = 't1'")
    assert stored == body


async def test_ids_order_like_python_strings(postgres_url: str, pg_namespace: str) -> None:
    # COLLATE "C": byte order of UTF-8, i.e. code point order, whatever the database's locale.
    ids = ["a", "B", "b", "Z", "é", "ä", "a-1", "a_1", "A", "~", "日本", "😀", "0"]
    async with opened(postgres_url, pg_namespace) as store:
        for task_id in ids:
            await store.save(TaskRecord(make_task(task_id)))
        seen: list[str] = []
        token = ""
        while True:
            page = await store.list(TaskQuery(page_size=4, page_token=token))
            seen.extend(t.id for t in page.tasks)
            token = page.next_page_token
            if not token:
                break
    assert seen == sorted(ids, reverse=True)


async def test_nul_characters_match_nothing(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace) as store:
        push = PostgresPushConfigStore(store)
        await push.start()
        await store.save(TaskRecord(make_task("t1")))
        assert await store.get("t1\x00") is None
        assert not await store.delete("t1", owner="x\x00")
        assert (await store.list(TaskQuery(context_id="c\x00"))).tasks == []
        with pytest.raises(ValueError, match="NUL"):
            await store.save(TaskRecord(make_task("bad\x00id")))
        assert await push.get("t1\x00", "c") is None
        assert await push.list("t1\x00") == []
        await push.close()


async def test_list_uses_the_indexes(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace) as store, admin(postgres_url) as conn:
        # Enough rows (and fresh statistics) that the planner prefers the indexes on its own.
        await conn.execute(
            f"INSERT INTO {pg_namespace}_tasks (id, tenant, owner, context_id, state, status_ts, version, body) "
            "SELECT 't' || i, '', 'o' || (i % 50), 'c' || (i % 500), 'TASK_STATE_COMPLETED', i, 1, '\\x7b7d' "
            "FROM generate_series(1, 20000) AS i"
        )
        await conn.execute(f"ANALYZE {pg_namespace}_tasks")
        plans = {}
        for name, query in {
            "owner": TaskQuery(owner="o7", page_size=20),
            "context": TaskQuery(owner="o7", context_id="c57", page_size=20),
        }.items():
            sql, params = store.list_statement(query)
            rows = await conn.fetch("EXPLAIN " + sql, *params)
            plans[name] = "\n".join(str(row[0]) for row in rows)
    assert f"{pg_namespace}_tasks_list" in plans["owner"], plans["owner"]
    assert f"{pg_namespace}_tasks_context" in plans["context"], plans["context"]
    for plan in plans.values():
        assert "Seq Scan" not in plan, plan


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:secret@db:5433/agents", "postgresql://u:***@db:5433/agents"),
        ("postgres://:secret@db/agents", "postgres://:***@db/agents"),
        (
            "postgresql://db/agents?user=u&password=secret&sslmode=require",
            "postgresql://db/agents?user=u&password=***&sslmode=require",
        ),
        ("postgresql://u@db/agents", "postgresql://u@db/agents"),
    ],
)
def test_messages_never_show_the_password(dsn: str, shown: str) -> None:
    assert redact(dsn) == shown
    assert PostgresTaskStore(dsn)._db.where == shown


# --- outages ----------------------------------------------------------------------------------------------------


async def test_unreachable_server_at_start_is_a_clear_error(pg_namespace: str, postgres_url: str) -> None:
    parts = urlsplit(postgres_url)
    down = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}:pw@127.0.0.1:{free_port()}"))
    store = PostgresTaskStore(down, namespace=pg_namespace)
    with pytest.raises(ServiceUnavailableError, match=r"cannot connect to the PostgreSQL store") as refused:
        await store.start()
    assert ":***@127.0.0.1" in str(refused.value)
    assert "pw@" not in str(refused.value)
    with pytest.raises(RuntimeError, match="not started"):
        await store.get("t1")


async def test_a_connection_killed_mid_operation_raises_then_recovers(postgres_url: str, pg_namespace: str) -> None:
    async with opened(postgres_url, pg_namespace) as store:
        await store.save(TaskRecord(make_task("t1")))
        async with admin(postgres_url) as blocker:
            # Hold the table so the store's next read waits on the server, in flight.
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute(f"LOCK TABLE {pg_namespace}_tasks IN ACCESS EXCLUSIVE MODE")
            in_flight = asyncio.ensure_future(store.get("t1"))
            async with admin(postgres_url) as watcher:
                async with asyncio.timeout(WAIT):
                    # Polling the server's view of another connection: there is no event to wait on.
                    while not await watcher.fetchval(  # noqa: ASYNC110
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 "
                        "AND wait_event_type = 'Lock'",
                        f"relaykit {pg_namespace} %",
                    ):
                        await asyncio.sleep(0.01)
            await terminate_backends(postgres_url, pg_namespace)
            with pytest.raises(ServiceUnavailableError, match="is unavailable") as lost:
                await asyncio.wait_for(in_flight, WAIT)
            assert isinstance(lost.value.__cause__, asyncpg.PostgresConnectionError | asyncpg.PostgresError | OSError)
            await tx.rollback()
        # The pool replaces the dead connection by itself (and the guard is taken again).
        got = await store.get("t1")
        assert got is not None
        page = await store.list(TaskQuery())
        assert [t.id for t in page.tasks] == ["t1"]


class _Proxy:
    """A TCP proxy to the test server that can be cut (every connection reset, port closed) and restored."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    async def cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        if writer not in self._writers:  # cut while connecting upstream
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self._writers.add(up_writer)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.ensure_future(self._pump(src, dst))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            dst.transport.abort()


async def test_server_outage_then_recovery(postgres_url: str, pg_namespace: str) -> None:
    parts = urlsplit(postgres_url)
    proxy = _Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    await proxy.start()
    netloc = parts.netloc.rpartition("@")
    via_proxy = urlunsplit(parts._replace(netloc=f"{netloc[0]}{netloc[1]}127.0.0.1:{proxy.port}"))
    try:
        async with opened(via_proxy, pg_namespace, max_size=3) as store:
            push = PostgresPushConfigStore(store)
            await push.start()
            await store.save(TaskRecord(make_task("t1")))

            await proxy.cut()  # the server is gone: connections reset, new ones refused
            for attempt in range(3):
                with pytest.raises(ServiceUnavailableError, match=r"PostgreSQL store .* is unavailable"):
                    await store.get("t1")
                with pytest.raises(ServiceUnavailableError):
                    await store.list(TaskQuery())
                with pytest.raises(ServiceUnavailableError):
                    await push.list("t1")
                with pytest.raises(ServiceUnavailableError):
                    await store.save(TaskRecord(make_task(f"during-{attempt}")))

            await proxy.start()  # back: the next operations reconnect by themselves
            record = await store.get("t1")
            assert record is not None
            record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE + timedelta(seconds=5))
            await store.save(record)
            assert [t.id for t in (await store.list(TaskQuery())).tasks] == ["t1"]
            await push.put(make_config("t1", "c1"))
            assert [c.id for c in await push.list("t1")] == ["c1"]
            await push.close()
    finally:
        await proxy.cut()


async def test_an_untold_insert_is_not_flushed_on_its_own_and_its_next_write_flushes_it(
    postgres_url: str, pg_namespace: str
) -> None:
    """``insert_claimed(told=False)``, once sent on its own (here: a read of the task through the store settles it),
    commits asynchronously: right after it, the server's WAL is not flushed as far as it was written (the WAL writer
    flushes it within ~200 ms), as it always is right after a told (synchronous) insert. The next synchronous write
    flushes both. The WAL position is the server's, so nothing else may write meanwhile: this namespace's store is
    the only writer during the test (its heartbeat aside, which runs before); the server's own background writes (a
    checkpoint after a heavy run) may still move it during a check or two, so two of twenty are let pass."""
    lagging = "SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()"
    async with opened(postgres_url, pg_namespace, exclusive=False) as store, admin(postgres_url) as conn:
        await store.heartbeat("w1", 60.0)
        told_lag = untold_lag = flushed_lag = 0
        for n in range(20):
            await store.insert_claimed(TaskRecord(make_task(f"told-{n}", state=TaskState.SUBMITTED)), "w1")
            told_lag += bool(await conn.fetchval(lagging))
            record = TaskRecord(make_task(f"untold-{n}", state=TaskState.SUBMITTED))
            await store.insert_claimed(record, "w1", told=False)
            assert await store.claimant(f"untold-{n}") == "w1"  # a read through the store: the insert goes now
            untold_lag += bool(await conn.fetchval(lagging))
            record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE)
            record.body = None
            await store.save_claimed(record, None)  # synchronous: flushes the insert's WAL with its own
            flushed_lag += bool(await conn.fetchval(lagging))
    assert told_lag <= 2
    assert flushed_lag <= 2
    # Each untold insert races the WAL writer's 200 ms wake-up to the query, and wins (20 of 20 here).
    assert untold_lag >= 15


async def stored_row(conn: Any, namespace: str, task_id: str) -> Any:
    return await conn.fetchrow(f"SELECT state, version, worker FROM {namespace}_tasks WHERE id = $1", task_id)


async def test_an_untold_task_answered_at_once_is_stored_by_one_insert_of_its_outcome(
    postgres_url: str, pg_namespace: str
) -> None:
    """A task nobody is told of is not inserted at once: its next write, within ``UNTOLD_DELAY``, inserts it as it
    then is (the outcome, released), one statement and one synchronous commit instead of two writes."""
    async with opened(postgres_url, pg_namespace, exclusive=False) as store, admin(postgres_url) as conn:
        await store.heartbeat("w1", 60.0)
        record = TaskRecord(make_task("quick", state=TaskState.SUBMITTED), "acme", "alice")
        await store.insert_claimed(record, "w1", told=False)
        assert await stored_row(conn, pg_namespace, "quick") is None  # not yet in the table
        before = await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE)
        record.body = None
        await store.save_claimed(record, None)
        row = await stored_row(conn, pg_namespace, "quick")
        assert (row["state"], row["version"], row["worker"]) == ("TASK_STATE_COMPLETED", 2, None)
        stored = await store.get("quick", tenant="acme", owner="alice")
        assert stored is not None
        assert stored.version == 2 == record.version
        assert stored.task.status.state is TaskState.COMPLETED
        after = await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        # The store's insert and read, and this connection's own two statistics reads at most (the statistics
        # collector may lag, so no lower bound): never a second write.
        assert after - before <= 4
        # Another scope's record cannot carry it: it stays the insert it was, for its own scope.
        other = TaskRecord(make_task("scoped", state=TaskState.SUBMITTED), "acme", "alice")
        await store.insert_claimed(other, "w1", told=False)
        intruder = TaskRecord(make_task("scoped", state=TaskState.COMPLETED), "acme", "mallory", version=1)
        with pytest.raises(ConflictError):
            await store.save_claimed(intruder, None)
        assert not await store.delete("scoped", tenant="acme", owner="mallory")
        row = await stored_row(conn, pg_namespace, "scoped")
        assert (row["state"], row["version"], row["worker"]) == ("TASK_STATE_SUBMITTED", 1, "w1")


async def test_an_untold_task_still_running_after_the_delay_is_inserted_on_its_own(
    postgres_url: str, pg_namespace: str
) -> None:
    """Nothing else happening: the put-off insert goes by itself once ``UNTOLD_DELAY`` has passed, claimed, and the
    task's later write is an ordinary update."""
    async with opened(postgres_url, pg_namespace, exclusive=False) as store, admin(postgres_url) as conn:
        await store.heartbeat("w1", 60.0)
        record = TaskRecord(make_task("slow", state=TaskState.SUBMITTED))
        await store.insert_claimed(record, "w1", told=False)
        async with asyncio.timeout(WAIT):
            while (row := await stored_row(conn, pg_namespace, "slow")) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # another connection's view: polled, bounded by WAIT
        assert (row["state"], row["version"], row["worker"]) == ("TASK_STATE_SUBMITTED", 1, "w1")
        record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE)
        record.body = None
        await store.save_claimed(record, None)
        row = await stored_row(conn, pg_namespace, "slow")
        assert (row["state"], row["version"], row["worker"]) == ("TASK_STATE_COMPLETED", 2, None)


async def test_this_store_sees_an_untold_task_at_once_and_stores_it_when_it_closes(
    postgres_url: str, pg_namespace: str
) -> None:
    """Every read through the store that put an insert off sees the task (a listing settles them all), a delete of
    it means it is never stored, and closing the store stores what is left."""
    async with admin(postgres_url) as conn:
        async with opened(postgres_url, pg_namespace, exclusive=False) as store:
            for name in ("listed", "fetched", "deleted", "left"):
                await store.insert_claimed(TaskRecord(make_task(name, state=TaskState.SUBMITTED)), "w1", told=False)
            assert await store.delete("deleted")
            page = await store.list(TaskQuery(page_size=10))
            assert {task.id for task in page.tasks} == {"listed", "fetched", "left"}
            fetched = await store.get("fetched")
            assert fetched is not None
            assert fetched.version == 1
            await store.insert_claimed(TaskRecord(make_task("closing", state=TaskState.SUBMITTED)), "w1", told=False)
        ids = {row["id"] for row in await conn.fetch(f"SELECT id FROM {pg_namespace}_tasks")}
        assert ids == {"listed", "fetched", "left", "closing"}


async def test_an_untold_task_whose_carrying_write_is_lost_is_carried_by_the_retry(
    postgres_url: str, pg_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write that was to carry a put-off insert fails as in an outage: the insert stays put off, and the
    execution's retried write carries it (an update of a row never inserted would conflict, and the task be lost)."""

    class Lost:
        async def write(self, row: Any) -> bool:
            raise ServiceUnavailableError("the PostgreSQL store is unavailable: connection lost")

    async with opened(postgres_url, pg_namespace, exclusive=False) as store, admin(postgres_url) as conn:
        record = TaskRecord(make_task("retried", state=TaskState.SUBMITTED))
        await store.insert_claimed(record, "w1", told=False)
        record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE)
        record.body = None
        with monkeypatch.context() as patched:
            patched.setattr(store, "_inserts_claimed", Lost())
            with pytest.raises(ServiceUnavailableError):
                await store.save_claimed(record, None)
        assert record.version == 1
        await store.save_claimed(record, None)
        row = await stored_row(conn, pg_namespace, "retried")
        assert (row["state"], row["version"], row["worker"]) == ("TASK_STATE_COMPLETED", 2, None)


async def test_an_untold_task_carried_by_a_plain_save_stays_claimed(postgres_url: str, pg_namespace: str) -> None:
    """``save`` (not the claimant's ``save_claimed``) carries a put-off insert too, keeping its claim."""
    async with opened(postgres_url, pg_namespace, exclusive=False) as store, admin(postgres_url) as conn:
        record = TaskRecord(make_task("saved", state=TaskState.SUBMITTED))
        await store.insert_claimed(record, "w1", told=False)
        record.task.status = TaskStatus(state=TaskState.WORKING, timestamp=BASE)
        record.body = None
        await store.save(record)
        row = await stored_row(conn, pg_namespace, "saved")
        assert (row["state"], row["version"], row["worker"]) == ("TASK_STATE_WORKING", 2, "w1")
        assert record.version == 2


async def test_a_big_task_whose_text_holds_a_nul_escape_is_stored_read_and_listed(
    postgres_url: str, pg_namespace: str
) -> None:
    """A text may hold U+0000 (ids may not), which ProtoJSON writes as the escape \\u0000. PostgreSQL's JSON
    functions refuse that escape, and they make the lean copy of a task over 64 KiB: every write of such a task
    failed ("unsupported Unicode escape sequence"). It is stored without a lean copy now, and reads back whole."""
    text = "a\x00b" + "x" * 70_000
    async with opened(postgres_url, pg_namespace) as store:
        task = make_task("t-nul", text=text)
        await store.save(TaskRecord(task))
        stored = await store.get("t-nul")
        assert stored is not None
        assert stored.task.metadata == {"text": text}
        stored.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE + timedelta(seconds=5))
        await store.save(stored)
        page = await store.list(TaskQuery())
        assert [t.id for t in page.tasks] == ["t-nul"]
        assert page.tasks[0].status.state is TaskState.COMPLETED
