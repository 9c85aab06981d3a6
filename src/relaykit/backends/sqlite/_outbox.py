"""The SQLite push outbox: pending notifications, dead letters and delivery health, in the task store's file.

Tables ``<namespace>_push_outbox`` and ``<namespace>_push_health``; see the package for the file's invariants. The
tasks' owed markers (``<namespace>_tasks.push_owed``, ``relaykit.push._owed``) are cleared by the commit that holds
their notifications, in its transaction, and read back by ``owed``: all of them when the sender starts (one process
serves the file: every marker then is a dead process's), those older than the sweep's age while it runs (a hook that
failed left them; a younger one may be about to be committed), by the time written with the marker
(``push_owed_at``). Both read the partial index of the marked rows alone: nothing to do costs one empty index probe.
A marked task whose body cannot be read (``_base.readable_task``) is left out and its marker cleared, so one bad row
never holds up the others, sweep after sweep.
"""

from __future__ import annotations

import os
import sqlite3
import time

from relaykit.backends._base import (
    DeliveryHealth,
    OutboxChanges,
    OutboxEntry,
    StreamKey,
    TaskRecord,
    from_epoch,
    readable_task,
    unreadable_rows,
)
from relaykit.backends._handle import AttachedStore
from relaykit.backends.sqlite._db import Database, transaction
from relaykit.backends.sqlite._tasks import SQLiteTaskStore

__all__ = ["SQLitePushOutbox"]


class SQLitePushOutbox(AttachedStore[Database]):
    """The push outbox in the same SQLite file as the tasks (``<ns>_push_outbox``, ``<ns>_push_health``).

    Like ``SQLitePushConfigStore`` it shares the task store's file, connection, thread and owner lock when given
    the ``SQLiteTaskStore``. A ``commit`` is one transaction however many changes it carries, so a sender that
    batches its writes pays one WAL append per batch (``synchronous=NORMAL``: no fsync per commit either).
    Claims are in-process: the owner lock already makes this process the only one serving the file.
    """

    durable = True

    def __init__(self, tasks_or_path: SQLiteTaskStore | str | os.PathLike[str], *, namespace: str = "relaykit") -> None:
        if isinstance(tasks_or_path, SQLiteTaskStore):
            self._db = tasks_or_path._db
        else:
            self._db = Database(os.fspath(tasks_or_path), namespace)
        self._started = False
        self._claims: dict[StreamKey, str] = {}
        o = self._outbox_table = f"{self._db.namespace}_push_outbox"
        h = self._health_table = f"{self._db.namespace}_push_health"
        stream = "tenant = ? AND owner = ? AND task_id = ? AND config_id = ?"
        self._sql_discard = f"DELETE FROM {o} WHERE {stream} AND dead_at IS NULL"
        self._sql_add = (
            f"INSERT OR IGNORE INTO {o} (event_id, tenant, owner, task_id, config_id, seq, body, created_at, attempts, "
            "next_at, last_error, trace) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self._sql_delivered = f"DELETE FROM {o} WHERE event_id = ? AND dead_at IS NULL"
        self._sql_retried = (
            f"UPDATE {o} SET attempts = ?, next_at = ?, last_error = ? WHERE event_id = ? AND dead_at IS NULL"
        )
        self._sql_dead = f"UPDATE {o} SET attempts = ?, last_error = ?, dead_at = ? WHERE event_id = ?"
        self._sql_ok = (
            f"INSERT INTO {h} (tenant, owner, task_id, config_id, url, delivered, consecutive, last_success) "
            "VALUES (?, ?, ?, ?, ?, 1, 0, ?) ON CONFLICT (tenant, owner, task_id, config_id) DO UPDATE SET "
            "url = CASE WHEN excluded.url = '' THEN url ELSE excluded.url END, delivered = delivered + 1, "
            "consecutive = 0, last_success = excluded.last_success"
        )
        self._sql_fail = (
            f"INSERT INTO {h} (tenant, owner, task_id, config_id, url, failures, consecutive, last_failure, "
            "last_error) VALUES (?, ?, ?, ?, ?, 1, 1, ?, ?) ON CONFLICT (tenant, owner, task_id, config_id) DO UPDATE "
            "SET url = CASE WHEN excluded.url = '' THEN url ELSE excluded.url END, failures = failures + 1, "
            "consecutive = consecutive + 1, last_failure = excluded.last_failure, last_error = excluded.last_error"
        )
        columns = (
            "event_id, tenant, owner, task_id, config_id, seq, body, created_at, attempts, next_at, last_error, "
            "dead_at, trace"
        )
        self._sql_pending = (
            f"SELECT {columns} FROM {o} WHERE dead_at IS NULL ORDER BY tenant, owner, task_id, config_id, seq"
        )
        self._sql_dead_letters = (
            f"SELECT {columns} FROM {o} WHERE tenant = ? AND owner = ? AND task_id = ? AND dead_at IS NOT NULL "
            "ORDER BY dead_at, seq"
        )
        self._sql_counts = (
            f"SELECT config_id, SUM(dead_at IS NULL), SUM(dead_at IS NOT NULL) FROM {o} "
            "WHERE tenant = ? AND owner = ? AND task_id = ? GROUP BY config_id"
        )
        self._sql_health = (
            f"SELECT config_id, url, delivered, failures, consecutive, last_success, last_failure, last_error "
            f"FROM {h} WHERE tenant = ? AND owner = ? AND task_id = ?"
        )
        t = f"{self._db.namespace}_tasks"
        # Only while the marker names this state or an older one: a newer state's marker stays owed.
        self._sql_settle = (
            f"UPDATE {t} SET push_owed = NULL, push_owed_at = NULL "
            "WHERE id = ? AND tenant = ? AND owner = ? AND push_owed <= ?"
        )
        # On the partial index of the marked rows: on start, every marker (one process serves the file, so each is a
        # dead process's); in the sweep, those whose state is older than its age (the rest may be in flight).
        owed = f"SELECT id, tenant, owner, body, version, event_seq, push_owed FROM {t} WHERE push_owed IS NOT NULL"
        self._sql_owed = f"{owed} ORDER BY push_owed LIMIT ?"
        # (A marker without its time was written before schema 5: old, by definition.)
        self._sql_owed_before = f"{owed} AND IFNULL(push_owed_at, 0) <= ? ORDER BY push_owed_at LIMIT ?"

    @property
    def path(self) -> str:
        """The absolute path of the database file."""
        return self._db.path

    async def commit(self, changes: OutboxChanges) -> None:
        # Rows are built now, at call time: the caller keeps mutating its entries while the write waits its turn.
        discarded = list(changes.discarded)
        added = [
            (
                e.event_id,
                e.tenant,
                e.owner,
                e.task_id,
                e.config_id,
                e.seq,
                e.body,
                e.created_at,
                e.attempts,
                e.next_attempt_at,
                e.last_error,
                e.traceparent or None,
            )
            for e in changes.added
        ]
        delivered = [(e.event_id,) for e in changes.delivered]
        retried = [(e.attempts, e.next_attempt_at, e.last_error, e.event_id) for e in changes.retried]
        now = time.time()
        dead = [
            (e.attempts, e.last_error, e.dead_at if e.dead_at is not None else now, e.event_id) for e in changes.dead
        ]
        # In their order: a success resets the consecutive-failure count, so fail, ok, fail, fail ends at 2, not 3.
        outcomes = [
            (self._sql_ok, (*o.stream, o.url, o.at)) if o.ok else (self._sql_fail, (*o.stream, o.url, o.at, o.error))
            for o in changes.outcomes
        ]
        settled = [(task_id, tenant, owner, seq) for tenant, owner, task_id, seq in changes.settled]

        def job(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                if discarded:
                    conn.executemany(self._sql_discard, discarded)
                if added:
                    conn.executemany(self._sql_add, added)
                if delivered:
                    conn.executemany(self._sql_delivered, delivered)
                if retried:
                    conn.executemany(self._sql_retried, retried)
                if dead:
                    conn.executemany(self._sql_dead, dead)
                for sql, params in outcomes:
                    conn.execute(sql, params)
                if settled:
                    # Last, and in the transaction of the entries they stand for: the marker goes only with them.
                    conn.executemany(self._sql_settle, settled)

        await self._db.run(job)

    async def owed(self, age: float = 0.0, limit: int = 1000) -> list[TaskRecord]:
        """The tasks, as stored, whose latest state's push notification is owed (``TaskRecord.push_owed`` set), at
        most ``limit``: every one with ``age`` 0 (on start), else those whose marker was written at least ``age``
        seconds ago, oldest first. A task whose body cannot be read is left out (logged by id) and its marker
        cleared: no snapshot of it can be made, and it must not come back in every later read."""
        params: tuple[float, ...]
        if age > 0:
            sql, params = self._sql_owed_before, (time.time() - age, limit)
        else:
            sql, params = self._sql_owed, (limit,)

        def job(conn: sqlite3.Connection) -> list[TaskRecord]:
            out = []
            unreadable: list[tuple[str, str, str, int]] = []
            for task_id, tenant, owner, body, version, event_seq, owed in conn.execute(sql, params).fetchall():
                task = readable_task(body)
                if task is None:
                    unreadable.append((str(task_id), str(tenant), str(owner), int(owed)))
                    continue
                record = TaskRecord(task, str(tenant), str(owner), int(version), int(event_seq), body)
                record.push_owed = int(owed)
                out.append(record)
            if unreadable:
                # As a commit settles a marker: only while it still names that state (a newer one stays owed).
                with transaction(conn):
                    conn.executemany(self._sql_settle, unreadable)
                unreadable_rows(
                    "owed push notifications", [key[0] for key in unreadable], "; their owed markers are cleared"
                )
            return out

        return await self._db.run(job)

    @staticmethod
    def _entry(row: tuple[object, ...]) -> OutboxEntry:
        return OutboxEntry(
            event_id=str(row[0]),
            tenant=str(row[1]),
            owner=str(row[2]),
            task_id=str(row[3]),
            config_id=str(row[4]),
            seq=int(row[5]),  # type: ignore[call-overload]
            body=bytes(row[6]),  # type: ignore[call-overload]
            created_at=float(row[7]),  # type: ignore[arg-type]
            attempts=int(row[8]),  # type: ignore[call-overload]
            next_attempt_at=float(row[9]),  # type: ignore[arg-type]
            last_error=str(row[10]),
            dead_at=float(row[11]) if row[11] is not None else None,  # type: ignore[arg-type]
            traceparent=str(row[12] or ""),
        )

    async def pending(self) -> list[OutboxEntry]:
        def job(conn: sqlite3.Connection) -> list[OutboxEntry]:
            return [self._entry(row) for row in conn.execute(self._sql_pending)]

        return await self._db.run(job)

    async def claim(self, stream: StreamKey, worker: str) -> bool:
        return self._claims.setdefault(stream, worker) == worker

    async def release(self, stream: StreamKey, worker: str) -> None:
        if self._claims.get(stream) == worker:
            del self._claims[stream]

    async def health(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[DeliveryHealth]:
        scope = (tenant, owner, task_id)

        def job(conn: sqlite3.Connection) -> list[DeliveryHealth]:
            conn.execute("BEGIN")
            try:
                counts = {str(r[0]): (int(r[1]), int(r[2])) for r in conn.execute(self._sql_counts, scope)}
                rows = {str(r[0]): r for r in conn.execute(self._sql_health, scope)}
            finally:
                conn.execute("COMMIT")
            out = []
            for config_id in sorted({*counts, *rows}):
                pending, dead = counts.get(config_id, (0, 0))
                row = rows.get(config_id)
                health = DeliveryHealth(
                    task_id=task_id, config_id=config_id, tenant=tenant, owner=owner, pending=pending, dead=dead
                )
                if row is not None:
                    health.url = str(row[1])
                    health.delivered = int(row[2])
                    health.failures = int(row[3])
                    health.consecutive_failures = int(row[4])
                    health.last_success = from_epoch(row[5])
                    health.last_failure = from_epoch(row[6])
                    health.last_error = str(row[7])
                out.append(health)
            return out

        return await self._db.run(job)

    async def purge(self, before: float) -> tuple[int, int]:
        o, h = self._outbox_table, self._health_table
        purge_dead = f"DELETE FROM {o} WHERE dead_at IS NOT NULL AND dead_at < ?"
        purge_health = (
            f"DELETE FROM {h} WHERE max(coalesce(last_success, 0), coalesce(last_failure, 0)) < ? AND NOT EXISTS "
            f"(SELECT 1 FROM {o} WHERE {o}.tenant = {h}.tenant AND {o}.owner = {h}.owner "
            f"AND {o}.task_id = {h}.task_id AND {o}.config_id = {h}.config_id)"
        )

        def job(conn: sqlite3.Connection) -> tuple[int, int]:
            with transaction(conn):
                dead = conn.execute(purge_dead, (before,)).rowcount
                return dead, conn.execute(purge_health, (before,)).rowcount

        return await self._db.run(job)

    async def dead_letters(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[OutboxEntry]:
        def job(conn: sqlite3.Connection) -> list[OutboxEntry]:
            return [self._entry(row) for row in conn.execute(self._sql_dead_letters, (tenant, owner, task_id))]

        return await self._db.run(job)
