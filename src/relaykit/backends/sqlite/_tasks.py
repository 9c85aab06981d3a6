"""The SQLite task store: tasks in ``<namespace>_tasks``, versioned, listed by the keyset every store shares.

See the package for the invariants (one owner, one thread, durability, ordering).
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import time
from datetime import datetime

from relaykit._enums import TaskState
from relaykit.backends._base import (
    ConflictError,
    ListPage,
    TaskQuery,
    TaskRecord,
    failed_orphan,
    stored_task,
    unreadable_rows,
)
from relaykit.backends._handle import AttachedStore
from relaykit.backends._paging import (
    decode_token,
    dropped_fields,
    encode_token,
    listed_tasks,
    sort_key,
    timestamp_us,
)
from relaykit.backends.sqlite._db import Database, transaction

__all__ = ["SQLiteTaskStore"]

# States are stored as their proto names (the wire value), so the column reads the same as the JSON body.
_ACTIVE = (TaskState.SUBMITTED.value, TaskState.WORKING.value)
_TERMINAL = tuple(state.value for state in TaskState if state.is_terminal)
_INTERRUPTED = (TaskState.INPUT_REQUIRED.value, TaskState.AUTH_REQUIRED.value)


class SQLiteTaskStore(AttachedStore[Database]):
    """Tasks in one SQLite file (WAL), owned by this process while started.

    ``synchronous``: ``"normal"`` (default; a write survives the process dying, the last ones may be lost on power
    loss) or ``"full"`` (an fsync per write: they survive power loss too).

    >>> store = SQLiteTaskStore("relaykit.db", synchronous="full")
    >>> store.path.endswith("relaykit.db")
    True
    """

    def __init__(
        self, path: str | os.PathLike[str], *, namespace: str = "relaykit", synchronous: str = "normal"
    ) -> None:
        self._db = Database(os.fspath(path), namespace, synchronous)
        self._started = False
        t = f"{namespace}_tasks"
        self._sql_get = f"SELECT body, version, event_seq FROM {t} WHERE id = ? AND tenant = ? AND owner = ?"
        self._sql_insert = (
            f"INSERT INTO {t} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        # Scope in the WHERE clause too: a record can never move a task to another tenant or owner.
        self._sql_update = (
            f"UPDATE {t} SET context_id = ?, state = ?, status_ts = ?, version = ?, event_seq = ?, body = ? "
            "WHERE id = ? AND version = ? AND tenant = ? AND owner = ?"
        )
        # The same writes with the state's push notification owed (``TaskRecord.push_owed``): separate statements,
        # so the write of a task without push configs names the column no more than it did before it existed.
        self._sql_insert_owed = (
            f"INSERT INTO {t} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body, push_owed, "
            "push_owed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self._sql_update_owed = (
            f"UPDATE {t} SET context_id = ?, state = ?, status_ts = ?, version = ?, event_seq = ?, body = ?, "
            "push_owed = ?, push_owed_at = ? WHERE id = ? AND version = ? AND tenant = ? AND owner = ?"
        )
        self._sql_delete = f"DELETE FROM {t} WHERE id = ? AND tenant = ? AND owner = ?"
        # Whether the task has push configs (the table lives in this file): its FAILED status is owed to them.
        has_configs = (
            f"EXISTS (SELECT 1 FROM {namespace}_push_configs AS p WHERE p.tenant = t.tenant AND p.owner = t.owner "
            "AND p.task_id = t.id)"
        )
        self._sql_active = (
            f"SELECT id, context_id, body, tenant, owner, version, event_seq, {has_configs} FROM {t} AS t "
            "WHERE state IN (?, ?)"
        )
        self._sql_fail = (
            f"UPDATE {t} SET state = ?, status_ts = ?, version = version + 1, event_seq = event_seq + 1, body = ?, "
            "push_owed = CASE WHEN ? THEN event_seq + 1 ELSE push_owed END, "
            "push_owed_at = CASE WHEN ? THEN ? ELSE push_owed_at END WHERE id = ?"
        )
        self._sql_purge = f"DELETE FROM {t} WHERE state IN ({', '.join('?' * len(_TERMINAL))}) AND status_ts < ?"
        self._sql_purge_interrupted = (
            f"DELETE FROM {t} WHERE state IN ({', '.join('?' * len(_INTERRUPTED))}) AND status_ts < ?"
        )
        # The keys of the rows each purge removes, for the push configs that go with them (``purge(purged=...)``).
        self._sql_purge_keys = self._sql_purge.replace("DELETE", "SELECT tenant, owner, id", 1)
        self._sql_purge_interrupted_keys = self._sql_purge_interrupted.replace("DELETE", "SELECT tenant, owner, id", 1)
        self._table = t

    @property
    def path(self) -> str:
        """The absolute path of the database file."""
        return self._db.path

    @property
    def namespace(self) -> str:
        """The table prefix."""
        return self._db.namespace

    async def get(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> TaskRecord | None:
        def job(conn: sqlite3.Connection) -> TaskRecord | None:
            row = conn.execute(self._sql_get, (task_id, tenant, owner)).fetchone()
            if row is None:
                return None
            body = row[0]
            # (Always bytes as relaykit writes it; a row some other tool wrote as TEXT is decoded all the same.)
            read = body if type(body) is bytes else None
            return TaskRecord(stored_task(task_id, body), tenant, owner, int(row[1]), int(row[2]), read=read)

        return await self._db.run(job)

    async def save(self, record: TaskRecord) -> None:
        # Everything is read and encoded here, at call time: the caller may keep mutating the task (and the
        # record) while the write waits its turn on the worker thread.
        task = record.task
        task_id, version = task.id, record.version
        status_ts = sort_key(task)[0]
        body = record.body if record.body is not None else task.to_json()
        fields: tuple[object, ...] = (
            task.context_id,
            task.status.state.value,
            status_ts,
            version + 1,
            record.event_seq,
            body,
        )
        scope = (record.tenant, record.owner)
        insert, update = self._sql_insert, self._sql_update
        if record.push_owed:
            # A state whose push notification is owed: the marker goes into the row in the statement that stores the
            # state, so no instant has one without the other. Statements of their own: a task without push configs
            # writes exactly what it did before markers existed.
            insert, update = self._sql_insert_owed, self._sql_update_owed
            fields = (*fields, record.push_owed, time.time())

        def job(conn: sqlite3.Connection) -> None:
            if version == 0:
                try:
                    conn.execute(insert, (task_id, *scope, *fields))
                except sqlite3.IntegrityError:
                    raise ConflictError(f"task {task_id} already exists") from None
                return
            if conn.execute(update, (*fields, task_id, version, *scope)).rowcount != 1:
                raise ConflictError(f"task {task_id} was changed by another writer (or is not in this scope)")

        await self._db.write(job)
        record.version = version + 1

    async def list(self, query: TaskQuery) -> ListPage:
        # Decoded before queueing, so a bad token fails fast with PageTokenError and costs the database nothing.
        after = decode_token(query.page_token) if query.page_token else None
        where = ["tenant = ?", "owner = ?"]
        params: list[object] = [query.tenant, query.owner]
        if query.context_id:
            where.append("context_id = ?")
            params.append(query.context_id)
        if query.state is not None:
            where.append("state = ?")
            params.append(query.state.value)
        if query.status_after is not None:
            where.append("status_ts >= ?")
            params.append(timestamp_us(query.status_after))
        count_sql = f"SELECT COUNT(*) FROM {self._table} WHERE {' AND '.join(where)}"
        page_where = list(where)
        page_params = list(params)
        if after is not None:
            # A row-value comparison is one index range constraint in SQLite, so the page starts with a seek.
            page_where.append("(status_ts, id) < (?, ?)")
            page_params.extend(after)
        # One row more than the page tells whether a next page exists without a second query.
        # Fields the page leaves out are removed by SQLite's JSON functions (C, in the database thread, GIL released)
        # before the body reaches Python.
        dropped = dropped_fields(query.history_length, query.include_artifacts)
        body = f"json_remove(CAST(body AS TEXT), {', '.join('?' * len(dropped))})" if dropped else "body"
        rows_sql = f"FROM {self._table} WHERE {' AND '.join(page_where)} ORDER BY status_ts DESC, id DESC LIMIT ?"
        page_sql = f"SELECT status_ts, id, {body} {rows_sql}"
        size = max(query.page_size, 0)
        page_params.append(size + 1)
        whole_params = list(page_params)  # the same page, the bodies whole: for a body SQLite cannot read as JSON
        page_params[:0] = [f"$.{name}" for name in dropped]

        def job(conn: sqlite3.Connection) -> ListPage:
            # One read transaction: the count and the page see the same snapshot.
            conn.execute("BEGIN")
            try:
                total = int(conn.execute(count_sql, params).fetchone()[0])
                try:
                    rows = conn.execute(page_sql, page_params).fetchall()
                except sqlite3.OperationalError as exc:
                    # A stored body SQLite cannot read as JSON (damaged) fails the statement that trims the bodies
                    # in the database: the same page again with the bodies whole, trimmed in Python, where the
                    # unreadable one is left out (``listed_tasks``). Rare, so the usual listing pays nothing for it.
                    if not dropped or "JSON" not in str(exc):
                        raise
                    rows = conn.execute(f"SELECT status_ts, id, body {rows_sql}", whole_params).fetchall()
            finally:
                conn.execute("COMMIT")
            page = rows[:size]
            more = len(rows) > size
            return ListPage(
                tasks=listed_tasks(((row[1], row[2]) for row in page), query.history_length, query.include_artifacts),
                next_page_token=encode_token((int(page[-1][0]), str(page[-1][1]))) if more and page else "",
                total_size=total,
            )

        return await self._db.run(job)

    async def delete(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql_delete, (task_id, tenant, owner)).rowcount > 0

        return await self._db.run(job)

    async def first_messages(self, since: datetime, limit: int) -> builtins.list[tuple[str, str, str, str, str, int]]:
        """``(tenant, owner, messageId, task id, context id, status time in µs)`` of the message that started each
        task whose status changed since ``since`` (at most ``limit``, the most recent): refills the idempotency window
        on start. A task whose body SQLite cannot read as JSON is left out (logged by id)."""
        states = tuple(state.value for state in TaskState)
        # ``state IN (every state)``: the (state, status_ts) index serves the range, no scan of every body. Newest
        # first: when more than ``limit`` tasks changed within the window, the most recent are the ones a retry names.
        rows_sql = (
            f"FROM {self._table} WHERE state IN ({', '.join('?' * len(states))}) AND status_ts >= ? "
            "ORDER BY status_ts DESC, id DESC LIMIT ?"
        )
        first = "json_extract(CAST(body AS TEXT), '$.history[0].messageId')"
        sql = f"SELECT tenant, owner, {first}, id, context_id, status_ts {rows_sql}"
        # The same rows, each body checked before it is read (its last column says whether it could be).
        readable = "json_valid(CAST(body AS TEXT))"
        checked_sql = (
            f"SELECT tenant, owner, CASE WHEN {readable} THEN {first} END, id, context_id, status_ts, {readable} "
            f"{rows_sql}"
        )
        params = (*states, timestamp_us(since), limit)

        def job(conn: sqlite3.Connection) -> builtins.list[tuple[str, str, str, str, str, int]]:
            try:
                rows = conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                # A body SQLite cannot read as JSON (damaged, or nested past its limit) fails the statement: one bad
                # row must not stop the server from starting, so the window is read again with every body checked,
                # and that one left out. Rare, so the usual start pays nothing for it.
                if "JSON" not in str(exc):
                    raise
                rows = conn.execute(checked_sql, params).fetchall()
                unreadable_rows("the idempotency window", [str(r[3]) for r in rows if not r[6]])
            return [(r[0], r[1], r[2], r[3], r[4], int(r[5])) for r in rows if r[2]]

        return await self._db.run(job)

    async def fail_orphans(self, reason: str, *, failed: builtins.list[TaskRecord] | None = None) -> int:
        def job(conn: sqlite3.Connection) -> int:
            now = time.time()
            with transaction(conn):
                rows = conn.execute(self._sql_active, _ACTIVE).fetchall()
                for task_id, context_id, body, tenant, owner, version, event_seq, configs in rows:
                    task = failed_orphan(task_id, context_id, body, reason)
                    # With push configs, the FAILED status is owed to them from this very write on (push._owed).
                    owed = int(event_seq) + 1 if configs else 0
                    conn.execute(
                        self._sql_fail,
                        (
                            task.status.state.value,
                            sort_key(task)[0],
                            task.to_json(),
                            bool(owed),
                            bool(owed),
                            now,
                            task_id,
                        ),
                    )
                    if failed is not None:
                        record = TaskRecord(task, tenant, owner, int(version) + 1, int(event_seq) + 1)
                        record.push_owed = owed
                        failed.append(record)
            return len(rows)

        return await self._db.run(job)

    async def purge(
        self,
        before: datetime,
        *,
        interrupted: bool = False,
        purged: builtins.list[tuple[str, str, str]] | None = None,
    ) -> int:
        limit = timestamp_us(before)
        states: tuple[str, ...]
        if interrupted:
            sql, keys_sql, states = self._sql_purge_interrupted, self._sql_purge_interrupted_keys, _INTERRUPTED
        else:
            sql, keys_sql, states = self._sql_purge, self._sql_purge_keys, _TERMINAL

        def job(conn: sqlite3.Connection) -> int:
            if purged is None:
                return conn.execute(sql, (*states, limit)).rowcount
            # The rows the DELETE removes, read in its transaction (not RETURNING: that needs SQLite 3.35).
            with transaction(conn):
                keys = conn.execute(keys_sql, (*states, limit)).fetchall()
                count = conn.execute(sql, (*states, limit)).rowcount
            purged.extend((str(k[0]), str(k[1]), str(k[2])) for k in keys)
            return count

        return await self._db.run(job)
