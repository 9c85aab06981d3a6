"""The SQLite outbox: migration of a schema-1 file, and entries surviving a close / reopen of the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relaykit._enums import TaskState
from relaykit._types import Task, TaskStatus
from relaykit.backends._base import OutboxChanges, OutboxEntry, TaskRecord
from relaykit.backends.sqlite import _MIGRATIONS, SCHEMA_VERSION, SQLitePushOutbox, SQLiteTaskStore


def test_the_outbox_is_migration_2() -> None:
    assert SCHEMA_VERSION >= 2
    assert any("_push_outbox" in statement for statement in _MIGRATIONS[1])


async def test_a_schema_1_file_is_migrated_and_keeps_its_tasks(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    with old:
        for statement in _MIGRATIONS[0]:
            old.execute(statement.format(ns="relaykit"))
        old.execute("CREATE TABLE relaykit_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)")
        old.execute("INSERT INTO relaykit_schema (id, version) VALUES (1, 1)")
        body = Task(id="t-old", context_id="c", status=TaskStatus(state=TaskState.COMPLETED)).to_json()
        old.execute(
            "INSERT INTO relaykit_tasks (id, tenant, owner, context_id, state, status_ts, version, event_seq, body) "
            "VALUES ('t-old', '', 'anonymous', 'c', 'TASK_STATE_COMPLETED', 0, 1, 3, ?)",
            (body,),
        )
    old.close()
    tasks = SQLiteTaskStore(str(path))
    outbox = SQLitePushOutbox(tasks)
    await tasks.start()
    await outbox.start()
    try:
        record = await tasks.get("t-old")
        assert record is not None
        assert record.event_seq == 3
        await outbox.commit(OutboxChanges(added=[OutboxEntry("e1", "t-old", "c1", 4, b"{}")]))
        assert [e.event_id for e in await outbox.pending()] == ["e1"]
    finally:
        await outbox.close()
        await tasks.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("SELECT version FROM relaykit_schema").fetchone() == (SCHEMA_VERSION,)
    finally:
        check.close()


async def test_pending_entries_survive_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "keep.db")
    tasks = SQLiteTaskStore(path)
    outbox = SQLitePushOutbox(tasks)
    await tasks.start()
    await outbox.start()
    await tasks.save(TaskRecord(Task(id="t1", context_id="c", status=TaskStatus(state=TaskState.WORKING))))
    first = OutboxEntry("e1", "t1", "c1", 1, b'{"task":{}}', created_at=1.0)
    first.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"  # the producing execution's span
    await outbox.commit(OutboxChanges(added=[first, OutboxEntry("e2", "t1", "c1", 2, b"{}", created_at=2.0)]))
    first.attempts, first.next_attempt_at, first.last_error = 1, 99.0, "HTTP 503"
    await outbox.commit(OutboxChanges(retried=[first]))
    # The outbox holds the file open after the task store closes (they share it).
    await tasks.close()
    assert [e.event_id for e in await outbox.pending()] == ["e1", "e2"]
    await outbox.close()

    again = SQLitePushOutbox(path)
    await again.start()
    try:
        pending = await again.pending()
    finally:
        await again.close()
    assert [(e.event_id, e.seq, e.attempts, e.next_attempt_at, e.last_error) for e in pending] == [
        ("e1", 1, 1, 99.0, "HTTP 503"),
        ("e2", 2, 0, 0.0, ""),
    ]
    assert pending[0].body == b'{"task":{}}'
    assert [e.traceparent for e in pending] == ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""]


async def test_owed_markers_by_age_on_the_partial_index(tmp_path: Path) -> None:
    """On start every marker is recovered (``age`` 0); the sweep of a live process asks for those written at least
    ``age`` ago (a younger one may be in flight: its hook is about to commit it), on the index of the marked rows
    alone, so a sweep with nothing to do reads no task row."""
    tasks = SQLiteTaskStore(str(tmp_path / "owed.db"))
    outbox = SQLitePushOutbox(tasks)
    await tasks.start()
    await outbox.start()
    try:
        for task_id in ("old", "new"):
            record = TaskRecord(Task(id=task_id, context_id="c", status=TaskStatus(state=TaskState.COMPLETED)))
            record.event_seq = record.push_owed = 2
            await tasks.save(record)
        await tasks.save(TaskRecord(Task(id="none", context_id="c", status=TaskStatus(state=TaskState.WORKING))))

        def age_old(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE relaykit_tasks SET push_owed_at = push_owed_at - 60 WHERE id = 'old'")

        await tasks._db.run(age_old)  # as if written a minute ago
        assert sorted(r.task.id for r in await outbox.owed(0.0)) == ["new", "old"]
        assert [(r.task.id, r.push_owed) for r in await outbox.owed(30.0)] == [("old", 2)]

        def plan(conn: sqlite3.Connection) -> str:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {outbox._sql_owed_before}", (0, 10)).fetchall()
            return " | ".join(str(row[3]) for row in rows)

        assert "USING INDEX relaykit_tasks_owed" in await tasks._db.run(plan)
    finally:
        await outbox.close()
        await tasks.close()
