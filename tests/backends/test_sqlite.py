"""What the SQLite store adds to the store contract: durability, its PRAGMAs, the single-owner lock, the schema."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import relaykit
from relaykit._enums import TaskState
from relaykit._types import Task, TaskPushNotificationConfig, TaskStatus
from relaykit.backends import ConflictError, TaskQuery, TaskRecord
from relaykit.backends.sqlite import SCHEMA_VERSION, SQLitePushConfigStore, SQLiteTaskStore, StoreLockedError

BASE = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TIMEOUT = 30.0
# The child process imports relaykit from the same tree as this test run.
SRC = str(Path(relaykit.__file__).resolve().parents[1])


def make_task(task_id: str, *, seconds: int = 0, state: TaskState = TaskState.WORKING) -> Task:
    return Task(
        id=task_id,
        context_id="ctx",
        status=TaskStatus(state=state, timestamp=BASE + timedelta(seconds=seconds)),
    )


def make_config(task_id: str, config_id: str) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(task_id=task_id, id=config_id, url=f"https://hooks.example.com/{config_id}")


@asynccontextmanager
async def opened(path: Path, *, namespace: str = "relaykit") -> AsyncIterator[SQLiteTaskStore]:
    store = SQLiteTaskStore(str(path), namespace=namespace)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


# --- durability ---------------------------------------------------------------------------------------------


async def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with opened(path) as store:
        push = SQLitePushConfigStore(store)
        await push.start()
        for i in range(5):
            await store.save(TaskRecord(make_task(f"t{i}", seconds=i), tenant="acme", owner="alice"))
        record = await store.get("t0", tenant="acme", owner="alice")
        assert record is not None
        record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE + timedelta(seconds=9))
        await store.save(record)
        assert await store.delete("t4", tenant="acme", owner="alice")
        await push.put(make_config("t1", "c1"), owner="alice")
        await push.put(make_config("t1", "c2"), owner="alice")
        await push.close()
        expected = await store.get("t0", tenant="acme", owner="alice")

    async with opened(path) as store:
        push = SQLitePushConfigStore(store)
        await push.start()
        got = await store.get("t0", tenant="acme", owner="alice")
        assert got is not None
        assert expected is not None
        assert got.task == expected.task
        assert got.version == 2
        assert await store.get("t4", tenant="acme", owner="alice") is None
        page = await store.list(TaskQuery(tenant="acme", owner="alice"))
        assert [t.id for t in page.tasks] == ["t0", "t3", "t2", "t1"]
        assert [c.id for c in await push.list("t1", owner="alice")] == ["c1", "c2"]
        # The version survived too: a write from before the reopen with the current version goes through.
        await store.save(got)
        assert got.version == 3
        await push.close()


# A child process that opens the store, optionally saves a task, reports "ready" and holds the file until a line
# arrives on stdin (or it is killed).
CHILD = """
import asyncio, sys
from relaykit._enums import TaskState
from relaykit._types import Task, TaskStatus
from relaykit.backends import TaskRecord
from relaykit.backends.sqlite import SQLiteTaskStore

async def main():
    store = SQLiteTaskStore(sys.argv[1])
    await store.start()
    for task_id in sys.argv[2:]:
        await store.save(TaskRecord(Task(id=task_id, status=TaskStatus(state=TaskState.WORKING))))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await store.close()
    print("closed", flush=True)

asyncio.run(main())
"""


@asynccontextmanager
async def child_holding(path: Path, *task_ids: str) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        str(path),
        *task_ids,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
        if line != b"ready\n":
            await asyncio.wait_for(proc.wait(), TIMEOUT)
            stderr = await proc.stderr.read()
            pytest.fail(f"child did not open the store: {line!r} {stderr.decode(errors='replace')}")
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), TIMEOUT)
        await proc.stdout.read()
        await proc.stderr.read()


async def test_acknowledged_writes_survive_a_killed_process(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with child_holding(path, "t1", "t2") as proc:
        proc.kill()
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) != 0
    async with opened(path) as store:
        for task_id in ("t1", "t2"):
            record = await store.get(task_id)
            assert record is not None
            assert record.version == 1


# --- PRAGMAs ------------------------------------------------------------------------------------------------


async def test_pragmas_in_effect(tmp_path: Path) -> None:
    async with opened(tmp_path / "t.db") as store:
        # The store's own connection (synchronous and busy_timeout are per connection).
        def pragmas(conn: sqlite3.Connection) -> tuple[object, ...]:
            return tuple(
                conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("journal_mode", "synchronous", "busy_timeout")
            )

        assert await store._db.run(pragmas) == ("wal", 1, 5000)
        # WAL is a property of the file: any other connection sees it too.
        outside = sqlite3.connect(tmp_path / "t.db")
        try:
            assert outside.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            outside.close()


async def test_synchronous_full_from_the_store_url(tmp_path: Path) -> None:
    # What `--store sqlite:///…?synchronous=full` and create_app(store=…) build: FULL (2) on the store's own
    # connection; the default stays NORMAL (1).
    from relaykit.backends import open_store

    for url, level in ((f"sqlite:///{tmp_path}/f.db?synchronous=full", 2), (f"sqlite:///{tmp_path}/n.db", 1)):
        store = open_store(url)
        assert isinstance(store, SQLiteTaskStore)
        await store.start()
        try:
            assert await store._db.run(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0]) == level
            assert store.path == str(tmp_path / url.rsplit("/", 1)[1].partition("?")[0])
        finally:
            await store.close()
    with pytest.raises(ValueError, match="synchronous=normal\\|full"):
        open_store(f"sqlite:///{tmp_path}/x.db?synchronous=off")


async def test_schema_is_namespaced_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with opened(path, namespace="alpha") as store:
        await store.save(TaskRecord(make_task("t1")))
    async with opened(path, namespace="beta") as store:
        assert await store.get("t1") is None
        await store.save(TaskRecord(make_task("t1")))
    outside = sqlite3.connect(path)
    try:
        tables = {row[0] for row in outside.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        versions = [outside.execute(f"SELECT version FROM {ns}_schema").fetchall() for ns in ("alpha", "beta")]
    finally:
        outside.close()
    kinds = ("tasks", "push_configs", "push_outbox", "push_health", "schema")
    assert tables == {f"{ns}_{table}" for ns in ("alpha", "beta") for table in kinds}
    assert versions == [[(SCHEMA_VERSION,)], [(SCHEMA_VERSION,)]]


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with opened(path):
        pass
    outside = sqlite3.connect(path)
    try:
        with outside:
            outside.execute("UPDATE relaykit_schema SET version = ?", (SCHEMA_VERSION + 1,))
    finally:
        outside.close()
    store = SQLiteTaskStore(str(path))
    with pytest.raises(RuntimeError, match="newer than this relaykit supports"):
        await store.start()
    # The refused store let go of the file: after a downgrade of the version, it opens again.
    outside = sqlite3.connect(path)
    try:
        with outside:
            outside.execute("UPDATE relaykit_schema SET version = ?", (SCHEMA_VERSION,))
    finally:
        outside.close()
    async with opened(path):
        pass


@pytest.mark.parametrize("namespace", ["", "1abc", "a-b", "x; DROP TABLE y", "a b"])
def test_invalid_namespace_is_refused(tmp_path: Path, namespace: str) -> None:
    with pytest.raises(ValueError, match="invalid namespace"):
        SQLiteTaskStore(str(tmp_path / "t.db"), namespace=namespace)


async def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    store = SQLiteTaskStore(str(missing / "t.db"))
    with pytest.raises(FileNotFoundError, match="does not exist") as info:
        await store.start()
    assert str(missing) in str(info.value)
    assert not (tmp_path / "no").exists()


def test_relative_path_is_resolved_when_constructed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteTaskStore("relaykit.db")
    monkeypatch.chdir("/")
    assert store.path == str(tmp_path.resolve() / "relaykit.db")


# --- the single-owner lock ----------------------------------------------------------------------------------


async def test_second_store_on_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with opened(path) as first:
        second = SQLiteTaskStore(str(path))
        with pytest.raises(StoreLockedError) as info:
            await second.start()
        message = str(info.value)
        assert str(path.resolve()) in message
        assert f"{path.resolve()}.lock" in message
        await second.close()  # a store that never started closes as a no-op
        # The refused store did not disturb the owner.
        await first.save(TaskRecord(make_task("t1")))
        assert await first.get("t1") is not None


async def test_a_symlinked_path_to_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    (tmp_path / "alias").symlink_to(tmp_path)
    async with opened(path):
        with pytest.raises(StoreLockedError):
            await SQLiteTaskStore(str(tmp_path / "alias" / "t.db")).start()


async def test_store_opens_after_the_first_closed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with opened(path) as first:
        await first.save(TaskRecord(make_task("t1")))
    async with opened(path) as second:
        assert await second.get("t1") is not None
    async with opened(path):
        pass


async def test_another_process_holding_the_file_is_refused_until_it_exits(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with child_holding(path) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        store = SQLiteTaskStore(str(path))
        with pytest.raises(StoreLockedError) as info:
            await store.start()
        message = str(info.value)
        assert "another relaykit process is already serving" in message
        assert str(path.resolve()) in message
        assert f"pid {proc.pid}" in message
        assert "--store" in message

        proc.stdin.write(b"\n")
        await proc.stdin.drain()
        assert await asyncio.wait_for(proc.stdout.readline(), TIMEOUT) == b"closed\n"
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0

    # The same store object can try again once the owner is gone.
    await store.start()
    await store.close()


async def test_a_killed_owner_leaves_no_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with child_holding(path, "t1") as proc:
        with pytest.raises(StoreLockedError):
            await SQLiteTaskStore(str(path)).start()
        proc.kill()
        await asyncio.wait_for(proc.wait(), TIMEOUT)
    async with opened(path) as store:
        assert await store.fail_orphans("server restarted") == 1


# --- sharing the file with the push-config store ------------------------------------------------------------


async def test_push_store_shares_the_task_stores_file_and_lock(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    tasks = SQLiteTaskStore(str(path))
    push = SQLitePushConfigStore(tasks)
    assert push.path == tasks.path
    # Either may start first; the file stays open until both are closed.
    await push.start()
    await tasks.start()
    await push.put(make_config("t1", "c1"))
    await push.close()
    await tasks.save(TaskRecord(make_task("t1")))
    with pytest.raises(StoreLockedError):
        await SQLiteTaskStore(str(path)).start()
    await tasks.close()
    await tasks.close()  # closing twice is harmless
    async with opened(path) as reopened:
        assert await reopened.get("t1") is not None


async def test_push_store_on_a_path_opens_the_file_itself(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    push = SQLitePushConfigStore(str(path))
    await push.start()
    try:
        await push.put(make_config("t1", "c1"))
        with pytest.raises(StoreLockedError, match="this process already has"):
            await SQLiteTaskStore(str(path)).start()
    finally:
        await push.close()
    async with opened(path) as tasks:
        shared = SQLitePushConfigStore(tasks)
        await shared.start()
        assert [c.id for c in await shared.list("t1")] == ["c1"]
        await shared.close()


async def test_push_put_keeps_the_original_position(tmp_path: Path) -> None:
    async with opened(tmp_path / "t.db") as tasks:
        push = SQLitePushConfigStore(tasks)
        await push.start()
        for config_id in ("c1", "c2", "c3"):
            await push.put(make_config("t1", config_id))
        await push.put(make_config("t1", "c1").model_copy(update={"url": "https://new.example.com/"}))
        listed = await push.list("t1")
        assert [c.id for c in listed] == ["c1", "c2", "c3"]
        assert listed[0].url == "https://new.example.com/"
        await push.close()


async def test_calls_after_close_fail_clearly(tmp_path: Path) -> None:
    async with opened(tmp_path / "t.db") as store:
        pass
    with pytest.raises(RuntimeError, match="not started"):
        await store.get("t1")


# --- concurrency --------------------------------------------------------------------------------------------


async def test_concurrent_saves_all_land(tmp_path: Path) -> None:
    async with opened(tmp_path / "t.db") as store:
        records = [TaskRecord(make_task(f"t{i:03d}", seconds=i)) for i in range(100)]
        await asyncio.gather(*(store.save(record) for record in records))
        assert all(record.version == 1 for record in records)
        page = await store.list(TaskQuery(page_size=100))
        assert page.total_size == 100
        assert [t.id for t in page.tasks] == [f"t{i:03d}" for i in reversed(range(100))]


async def test_concurrent_writers_of_one_task_exactly_one_wins(tmp_path: Path) -> None:
    async with opened(tmp_path / "t.db") as store:
        await store.save(TaskRecord(make_task("t1")))
        readers = await asyncio.gather(*(store.get("t1") for _ in range(10)))
        records = [record for record in readers if record is not None]
        assert len(records) == 10
        for i, record in enumerate(records):
            record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=BASE + timedelta(seconds=i))
        results = await asyncio.gather(*(store.save(record) for record in records), return_exceptions=True)
        assert sum(result is None for result in results) == 1
        assert all(isinstance(result, ConflictError) for result in results if result is not None)
        got = await store.get("t1")
        assert got is not None
        assert got.version == 2
