"""Combined writes in the SQLite store (``backends/sqlite/_db.py: Database.write``): saves made while a batch of
writes is on the worker thread go together in one transaction, each caller still gets its own outcome, and calls
still run in the order they were made."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from relaykit._enums import TaskState
from relaykit._types import Task, TaskStatus
from relaykit.backends import ConflictError, TaskRecord
from relaykit.backends.sqlite import SQLiteTaskStore


def _task(task_id: str, state: TaskState = TaskState.WORKING) -> Task:
    return Task(
        id=task_id, context_id="ctx", status=TaskStatus(state=state, timestamp=datetime(2026, 3, 1, tzinfo=UTC))
    )


@asynccontextmanager
async def _store(path: Path) -> AsyncIterator[SQLiteTaskStore]:
    store = SQLiteTaskStore(str(path))
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def _traced(store: SQLiteTaskStore) -> list[str]:
    """Every statement the store's connection runs from now on (recorded on its thread)."""
    seen: list[str] = []

    def trace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(seen.append)

    await store._db.run(trace)
    return seen


def _transactions(statements: list[str]) -> int:
    """Commits: explicit transactions plus statements that ran in their own implicit one."""
    explicit = sum(1 for sql in statements if sql.startswith("BEGIN"))
    inside = False
    alone = 0
    for sql in statements:
        if sql.startswith("BEGIN"):
            inside = True
        elif sql.startswith(("COMMIT", "ROLLBACK")):
            inside = False
        elif not inside and sql.lstrip().upper().startswith(("INSERT", "UPDATE")):
            alone += 1
    return explicit + alone


async def test_concurrent_saves_share_commits_and_all_land(tmp_path: Path) -> None:
    async with _store(tmp_path / "t.db") as store:
        statements = await _traced(store)
        records = [TaskRecord(_task(f"task-{i:02}")) for i in range(40)]
        await asyncio.gather(*(store.save(record) for record in records))
        for record in records:
            record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=datetime(2026, 3, 2, tzinfo=UTC))
        await asyncio.gather(*(store.save(record) for record in records))
        writes = [sql for sql in statements if sql.lstrip().upper().startswith(("INSERT", "UPDATE"))]
        assert len(writes) == 80
        # Alone, 80 writes are 80 commits; the first of each wave goes alone, the rest wait and go together.
        assert _transactions(statements) <= 8, statements[:10]
    async with _store(tmp_path / "t.db") as reopened:  # committed: on disk after close
        for record in records:
            stored = await reopened.get(record.task.id)
            assert stored is not None
            assert (stored.version, stored.task.status.state) == (2, TaskState.COMPLETED)


async def test_a_stale_save_among_combined_ones_conflicts_alone(tmp_path: Path) -> None:
    async with _store(tmp_path / "t.db") as store:
        records = [TaskRecord(_task(f"task-{i}")) for i in range(12)]
        await asyncio.gather(*(store.save(record) for record in records))
        records[7].version = 5  # another writer's version
        for record in records:
            record.task.metadata = {"step": 2}
        results = await asyncio.gather(*(store.save(record) for record in records), return_exceptions=True)
        assert [isinstance(result, ConflictError) for result in results] == [i == 7 for i in range(12)]
        for i, record in enumerate(records):
            stored = await store.get(record.task.id)
            assert stored is not None
            assert (stored.version, stored.task.metadata) == ((1, None) if i == 7 else (2, {"step": 2}))


async def test_the_same_new_task_twice_among_combined_saves_is_stored_once(tmp_path: Path) -> None:
    async with _store(tmp_path / "t.db") as store:
        ids = [f"task-{i}" for i in range(6)] + ["task-3"]
        results = await asyncio.gather(*(store.save(TaskRecord(_task(i))) for i in ids), return_exceptions=True)
        assert [type(result).__name__ for result in results] == ["NoneType"] * 6 + ["ConflictError"]


async def test_a_read_made_after_queued_saves_sees_them(tmp_path: Path) -> None:
    # Calls run in the order they were made: a read does not overtake writes that wait for the thread.
    async with _store(tmp_path / "t.db") as store:
        saves = [store.save(TaskRecord(_task(f"task-{i}"))) for i in range(10)]
        *_, found = await asyncio.gather(*saves, store.get("task-9"))
        assert found is not None
        assert found.task.id == "task-9"


async def test_saves_made_before_close_are_written(tmp_path: Path) -> None:
    store = SQLiteTaskStore(str(tmp_path / "t.db"))
    await store.start()
    saves = [asyncio.ensure_future(store.save(TaskRecord(_task(f"task-{i}")))) for i in range(10)]
    await asyncio.sleep(0)  # every save has been made (the first went to the thread, the others wait)
    await store.close()
    assert [save.result() for save in saves] == [None] * 10
    async with _store(tmp_path / "t.db") as reopened:
        assert all([await reopened.get(f"task-{i}") is not None for i in range(10)])


async def test_a_batch_the_database_rolled_back_is_retried_write_by_write(tmp_path: Path) -> None:
    # As after a disk-full or I/O error, which end the whole transaction: nothing of the batch was stored, so each
    # write runs again alone and only the one that fails hears of it.
    async with _store(tmp_path / "t.db") as store:
        db = store._db
        await db.run(lambda conn: conn.execute("CREATE TABLE probe (k TEXT PRIMARY KEY)"))

        def insert(key: str) -> object:
            return lambda conn: conn.execute("INSERT INTO probe VALUES (?)", (key,)).rowcount

        def end_transaction(conn: sqlite3.Connection) -> object:
            return conn.execute("ROLLBACK").rowcount  # alone (no transaction open) this raises

        first = asyncio.ensure_future(db.write(insert("a")))
        await asyncio.sleep(0)
        waiting = [db.write(insert("b")), db.write(end_transaction), db.write(insert("c"))]
        results = await asyncio.gather(first, *waiting, return_exceptions=True)
        assert results[:2] == [1, 1]
        assert isinstance(results[2], sqlite3.OperationalError)
        assert results[3] == 1
        keys = await db.run(lambda conn: [row[0] for row in conn.execute("SELECT k FROM probe ORDER BY k")])
        assert keys == ["a", "b", "c"]


async def test_a_write_after_close_is_refused(tmp_path: Path) -> None:
    store = SQLiteTaskStore(str(tmp_path / "t.db"))
    await store.start()
    await store.close()
    with pytest.raises(RuntimeError, match=r"not started \(or already closed\)"):
        await store.save(TaskRecord(_task("task-1")))
