"""The embedded SQLite store: tasks and push configs in one file, owned by one process.

Invariants (on top of the ``TaskStore`` / ``PushConfigStore`` rules in ``_base``):

* **One owner.** ``start()`` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<file>.lock`` and holds it until
  ``close()``; a second process (or a second store object in this process) on the same file gets
  ``StoreLockedError`` naming the file. The kernel drops the lock when the process dies, so a crash never
  leaves a stale lock behind, and the lock file itself is never deleted (unlinking it would let two owners
  lock two different inodes). POSIX only.
* **One connection, one thread.** Every statement runs on the store's single worker thread
  (``ThreadPoolExecutor(max_workers=1)``), so calls execute one at a time in the order they were made, the
  connection is never shared between threads, and ``close()`` runs after every call already made.
  ``SQLitePushConfigStore(task_store)`` shares the task store's file, connection, thread and lock; the file
  is closed when the last of the two closes.
* **Durable on acknowledgement.** ``journal_mode=WAL`` with ``synchronous=NORMAL``: a call that returned
  survives a crash of the process (an OS crash or power loss may lose the last transactions, never corrupt
  the file). ``busy_timeout=5000`` makes outside readers (``sqlite3`` CLI, backups) wait instead of failing.
* **Atomic writes.** A ``save`` is one statement (one implicit transaction); ``fail_orphans`` is one
  explicit transaction; after a crash a write is either all there or not at all.
* **Same order and cursor as every store.** ``status_ts`` is ``_paging.sort_key`` of the task given to
  ``save``; ``list`` filters, counts and pages by the keyset ``(status_ts, id) < cursor`` in SQL; page tokens
  are ``_paging``'s, so a token means the same to every backend. Ids compare as UTF-8 bytes (SQLite's
  BINARY collation), the same order as Python's ``str`` comparison.
* **Namespaced schema.** Tables are ``<namespace>_tasks``, ``<namespace>_push_configs``, the push outbox
  ``<namespace>_push_outbox`` / ``<namespace>_push_health``, and ``<namespace>_schema`` (its version); the
  schema is created or migrated on start in one transaction, and a file written by a newer relaykit is refused
  rather than misread.
* The directory of the file must exist: a typo in ``--store`` is an error, not a new directory tree.

A cancelled call may still complete on the worker thread (a statement cannot be interrupted half-way); the
caller's ``TaskRecord.version`` is then behind and its next ``save`` raises ``ConflictError``, which is safe.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import TypeVar

from relaykit._types import Task, TaskPushNotificationConfig, TaskState
from relaykit.backends._base import (
    ConflictError,
    DeliveryHealth,
    ListPage,
    OutboxChanges,
    OutboxEntry,
    StreamKey,
    TaskQuery,
    TaskRecord,
)
from relaykit.backends._handle import AttachedStore
from relaykit.backends._memory import failed_status, from_epoch
from relaykit.backends._paging import decode_token, encode_token, sort_key, timestamp_us

__all__ = ["SCHEMA_VERSION", "SQLitePushConfigStore", "SQLitePushOutbox", "SQLiteTaskStore", "StoreLockedError"]

_T = TypeVar("_T")

SCHEMA_VERSION = 2
"""The schema version this relaykit writes; older files are migrated on start, newer ones refused."""

BUSY_TIMEOUT_MS = 5000

_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}\Z")
_MEMORY = ":memory:"

# States are stored as their proto names (the wire value), so the column reads the same as the JSON body.
_ACTIVE = (TaskState.SUBMITTED.value, TaskState.WORKING.value)
_TERMINAL = tuple(state.value for state in TaskState if state.is_terminal)

# Schema migrations, applied in order: entry i brings a file from version i to version i + 1. Never edit an
# entry that has shipped; append a new one and bump SCHEMA_VERSION.
_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE {ns}_tasks (
            id         TEXT PRIMARY KEY,
            tenant     TEXT NOT NULL,
            owner      TEXT NOT NULL,
            context_id TEXT NOT NULL,
            state      TEXT NOT NULL,
            status_ts  INTEGER NOT NULL,
            version    INTEGER NOT NULL,
            event_seq  INTEGER NOT NULL DEFAULT 0,
            body       BLOB NOT NULL
        )""",
        # ListTasks without a context filter: an index range scan in exactly the output order, so a page costs
        # O(page size), not O(tasks of the owner).
        "CREATE INDEX {ns}_tasks_list ON {ns}_tasks (tenant, owner, status_ts DESC, id DESC)",
        # ListTasks with a context filter (the common "tasks of this conversation" query).
        "CREATE INDEX {ns}_tasks_context ON {ns}_tasks (tenant, owner, context_id, status_ts DESC, id DESC)",
        # fail_orphans on start and purge on a timer: touch only active / old terminal rows, not every body.
        "CREATE INDEX {ns}_tasks_state ON {ns}_tasks (state, status_ts)",
        """CREATE TABLE {ns}_push_configs (
            tenant  TEXT NOT NULL,
            owner   TEXT NOT NULL,
            task_id TEXT NOT NULL,
            id      TEXT NOT NULL,
            seq     INTEGER NOT NULL,
            body    BLOB NOT NULL,
            PRIMARY KEY (tenant, owner, task_id, id)
        )""",
    ],
    # 2: the push-notification outbox (pending entries and dead letters) and per-config delivery health.
    [
        """CREATE TABLE {ns}_push_outbox (
            event_id   TEXT PRIMARY KEY,
            tenant     TEXT NOT NULL,
            owner      TEXT NOT NULL,
            task_id    TEXT NOT NULL,
            config_id  TEXT NOT NULL,
            seq        INTEGER NOT NULL,
            body       BLOB NOT NULL,
            created_at REAL NOT NULL,
            attempts   INTEGER NOT NULL DEFAULT 0,
            next_at    REAL NOT NULL DEFAULT 0,
            last_error TEXT NOT NULL DEFAULT '',
            dead_at    REAL
        )""",
        # A stream's pending entries in delivery order, its counts, and "discard this stream" are index ranges.
        "CREATE INDEX {ns}_push_outbox_stream ON {ns}_push_outbox (tenant, owner, task_id, config_id, dead_at, seq)",
        """CREATE TABLE {ns}_push_health (
            tenant       TEXT NOT NULL,
            owner        TEXT NOT NULL,
            task_id      TEXT NOT NULL,
            config_id    TEXT NOT NULL,
            url          TEXT NOT NULL DEFAULT '',
            delivered    INTEGER NOT NULL DEFAULT 0,
            failures     INTEGER NOT NULL DEFAULT 0,
            consecutive  INTEGER NOT NULL DEFAULT 0,
            last_success REAL,
            last_failure REAL,
            last_error   TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (tenant, owner, task_id, config_id)
        )""",
    ],
]


class StoreLockedError(RuntimeError):
    """The SQLite file is already served by another relaykit process (or another store object in this one)."""


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # BEGIN IMMEDIATE takes the write lock up front: a read-then-write transaction that started deferred could
    # fail with SQLITE_BUSY on the upgrade without busy_timeout ever applying.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class _Database:
    """One SQLite file: its owner lock, its one connection and the one thread that uses the connection."""

    def __init__(self, path: str, namespace: str) -> None:
        if not _NAMESPACE.match(namespace):
            raise ValueError(
                f"invalid namespace {namespace!r}: letters, digits and underscores, not starting with a digit"
            )
        path = os.fspath(path)
        # Resolved once, now: the working directory may change later, messages should name the real file, and a
        # symlinked spelling of the same file must map to the same lock file.
        self.path = path if path == _MEMORY else os.path.realpath(path)
        self.lock_path = self.path + ".lock"
        self.namespace = namespace
        self._users = 0
        self._guard = asyncio.Lock()
        self._executor: ThreadPoolExecutor | None = None
        # Touched only on the worker thread.
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None

    async def acquire(self) -> None:
        """Open the file for one more user (the first opens it)."""
        async with self._guard:
            if self._users == 0:
                await self._open()
            self._users += 1

    async def release(self) -> None:
        """Drop one user (the last closes the file and releases the lock)."""
        async with self._guard:
            self._users -= 1
            if self._users == 0 and self._executor is not None:
                executor, self._executor = self._executor, None
                try:
                    # Queued behind every call already made, so none of them is cut off.
                    await asyncio.get_running_loop().run_in_executor(executor, self._close_sync)
                finally:
                    executor.shutdown(wait=True)

    async def run(self, job: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``job(connection)`` on the worker thread."""
        executor = self._executor
        if executor is None:
            raise RuntimeError(f"the SQLite store {self.path} is not started (or already closed)")
        return await asyncio.get_running_loop().run_in_executor(executor, self._call, job)

    def _call(self, job: Callable[[sqlite3.Connection], _T]) -> _T:
        # Checked on the worker thread, in call order: a call queued before close() still sees the connection.
        if self._conn is None:
            raise RuntimeError(f"the SQLite store {self.path} is closed")
        return job(self._conn)

    async def _open(self) -> None:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relaykit-sqlite")
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._open_sync)
        except BaseException:
            # A failed open has already cleaned up after itself (below). A cancelled one may still finish on
            # the thread, so a cleanup is queued behind it either way (closing twice is harmless).
            executor.submit(self._close_sync)
            executor.shutdown(wait=False)
            raise
        self._executor = executor

    def _open_sync(self) -> None:
        try:
            if self.path != _MEMORY:
                directory = os.path.dirname(self.path)
                if not os.path.isdir(directory):
                    raise FileNotFoundError(
                        f"cannot open the SQLite store {self.path}: directory {directory} does not exist "
                        "(relaykit does not create it)"
                    )
                self._lock()
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
            self._conn = conn
            # busy_timeout first, so the statements below wait for an outside reader instead of failing.
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            if mode.lower() != "wal" and self.path != _MEMORY:
                raise RuntimeError(
                    f"SQLite could not put {self.path} in WAL mode (journal_mode is {mode}); "
                    "is the file on a network filesystem?"
                )
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except BaseException:
            # Released before the error reaches the caller, so whoever retries finds the file free.
            self._close_sync()
            raise

    def _lock(self) -> None:
        # The lock is taken before the database is opened, so a refused second process never touches the file
        # (not even to migrate it). O_CLOEXEC: a program this process execs must not inherit the lock.
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise StoreLockedError(self._locked_message(holder)) from None
        except BaseException:
            os.close(fd)
            raise
        # The holder's pid, for the message a refused process prints; informative only, the flock is the lock.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._lock_fd = fd

    def _locked_message(self, holder: str) -> str:
        if holder == str(os.getpid()):
            return (
                f"this process already has the SQLite store {self.path} open (lock file {self.lock_path}); "
                "share one store object (pass the task store to SQLitePushConfigStore) "
                "instead of opening the file twice"
            )
        by = f", held by pid {holder}" if holder.isdigit() else ""
        return (
            f"another relaykit process is already serving {self.path} (lock file {self.lock_path}{by}); "
            "stop it or use another --store"
        )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        table = f"{self.namespace}_schema"
        with _transaction(conn):
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
            )
            row = conn.execute(f"SELECT version FROM {table} WHERE id = 1").fetchone()
            current = int(row[0]) if row is not None else 0
            if current > SCHEMA_VERSION:
                raise RuntimeError(
                    f"the SQLite store {self.path} has schema version {current} "
                    f"(namespace {self.namespace!r}), "
                    f"newer than this relaykit supports ({SCHEMA_VERSION}); upgrade relaykit"
                )
            for statements in _MIGRATIONS[current:SCHEMA_VERSION]:
                for statement in statements:
                    conn.execute(statement.format(ns=self.namespace))
            conn.execute(
                f"INSERT INTO {table} (id, version) VALUES (1, ?) "
                "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                (SCHEMA_VERSION,),
            )

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        fd, self._lock_fd = self._lock_fd, None
        try:
            if conn is not None:
                conn.close()
        finally:
            # Released only after the connection is closed: the next owner must find the file quiescent.
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


class SQLiteTaskStore(AttachedStore[_Database]):
    """Tasks in one SQLite file (WAL), owned by this process while started.

    >>> store = SQLiteTaskStore("relaykit.db")
    >>> store.path.endswith("relaykit.db")
    True
    """

    def __init__(self, path: str | os.PathLike[str], *, namespace: str = "relaykit") -> None:
        self._db = _Database(os.fspath(path), namespace)
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
        self._sql_delete = f"DELETE FROM {t} WHERE id = ? AND tenant = ? AND owner = ?"
        self._sql_active = f"SELECT id, body FROM {t} WHERE state IN (?, ?)"
        self._sql_fail = f"UPDATE {t} SET state = ?, status_ts = ?, version = version + 1, body = ? WHERE id = ?"
        self._sql_purge = f"DELETE FROM {t} WHERE state IN ({', '.join('?' * len(_TERMINAL))}) AND status_ts < ?"
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
            return TaskRecord(Task.from_json(row[0]), tenant, owner, int(row[1]), int(row[2]))

        return await self._db.run(job)

    async def save(self, record: TaskRecord) -> None:
        # Everything is read and encoded here, at call time: the caller may keep mutating the task (and the
        # record) while the write waits its turn on the worker thread.
        task = record.task
        task_id, version = task.id, record.version
        status_ts = sort_key(task)[0]
        body = record.body if record.body is not None else task.to_json()
        fields = (task.context_id, task.status.state.value, status_ts, version + 1, record.event_seq, body)
        scope = (record.tenant, record.owner)

        def job(conn: sqlite3.Connection) -> None:
            if version == 0:
                try:
                    conn.execute(self._sql_insert, (task_id, *scope, *fields))
                except sqlite3.IntegrityError:
                    raise ConflictError(f"task {task_id} already exists") from None
                return
            if conn.execute(self._sql_update, (*fields, task_id, version, *scope)).rowcount != 1:
                raise ConflictError(f"task {task_id} was changed by another writer (or is not in this scope)")

        await self._db.run(job)
        record.version = version + 1

    async def list(self, query: TaskQuery) -> ListPage:
        # Decoded before queueing, so a bad token fails fast with ValueError and costs the database nothing.
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
        page_sql = (
            f"SELECT status_ts, id, body FROM {self._table} WHERE {' AND '.join(page_where)} "
            "ORDER BY status_ts DESC, id DESC LIMIT ?"
        )
        size = max(query.page_size, 0)
        page_params.append(size + 1)

        def job(conn: sqlite3.Connection) -> ListPage:
            # One read transaction: the count and the page see the same snapshot.
            conn.execute("BEGIN")
            try:
                total = int(conn.execute(count_sql, params).fetchone()[0])
                rows = conn.execute(page_sql, page_params).fetchall()
            finally:
                conn.execute("COMMIT")
            page = rows[:size]
            more = len(rows) > size
            return ListPage(
                tasks=[Task.from_json(row[2]) for row in page],
                next_page_token=encode_token((int(page[-1][0]), str(page[-1][1]))) if more and page else "",
                total_size=total,
            )

        return await self._db.run(job)

    async def delete(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql_delete, (task_id, tenant, owner)).rowcount > 0

        return await self._db.run(job)

    async def fail_orphans(self, reason: str) -> int:
        def job(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                rows = conn.execute(self._sql_active, _ACTIVE).fetchall()
                for task_id, body in rows:
                    task = Task.from_json(body)
                    status = failed_status(reason)
                    task.status = status
                    # History holds the agent messages carried in status updates (CONTRACT): this one too.
                    if status.message is not None:
                        task.history.append(status.message)
                    conn.execute(self._sql_fail, (status.state.value, sort_key(task)[0], task.to_json(), task_id))
            return len(rows)

        return await self._db.run(job)

    async def purge(self, before: datetime) -> int:
        limit = timestamp_us(before)

        def job(conn: sqlite3.Connection) -> int:
            return conn.execute(self._sql_purge, (*_TERMINAL, limit)).rowcount

        return await self._db.run(job)


class SQLitePushConfigStore(AttachedStore[_Database]):
    """Push configs in the same SQLite file as the tasks.

    Pass the ``SQLiteTaskStore`` to share its connection, thread and owner lock (the normal case); given a
    path it opens the file itself, and then no task store in this process may hold that file. ``put`` of an
    existing (tenant, owner, task id, config id) replaces the config in place: it keeps its position in
    ``list``.
    """

    def __init__(self, tasks_or_path: SQLiteTaskStore | str | os.PathLike[str], *, namespace: str = "relaykit") -> None:
        if isinstance(tasks_or_path, SQLiteTaskStore):
            self._db = tasks_or_path._db
        else:
            self._db = _Database(os.fspath(tasks_or_path), namespace)
        self._started = False
        p = f"{self._db.namespace}_push_configs"
        # seq numbers configs per task in insertion order; the upsert leaves seq alone, so a replaced config
        # keeps its place. The subquery reads the primary-key index prefix only.
        self._sql_put = (
            f"INSERT INTO {p} (tenant, owner, task_id, id, seq, body) VALUES (?, ?, ?, ?, "
            f"(SELECT COALESCE(MAX(seq), 0) + 1 FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ?), ?) "
            "ON CONFLICT (tenant, owner, task_id, id) DO UPDATE SET body = excluded.body"
        )
        self._sql_get = f"SELECT body FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ? AND id = ?"
        self._sql_list = f"SELECT body FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ? ORDER BY seq"
        self._sql_delete = f"DELETE FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ? AND id = ?"
        self._sql_any = f"SELECT 1 FROM {p} LIMIT 1"

    @property
    def path(self) -> str:
        """The absolute path of the database file."""
        return self._db.path

    async def any_configs(self) -> bool:
        """Whether any config is stored (the push sender hooks the engine only once one may exist)."""

        def job(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql_any).fetchone() is not None

        return await self._db.run(job)

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        body = config.to_json()
        scope = (config.tenant, owner, config.task_id)

        def job(conn: sqlite3.Connection) -> None:
            conn.execute(self._sql_put, (*scope, config.id, *scope, body))

        await self._db.run(job)

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        def job(conn: sqlite3.Connection) -> TaskPushNotificationConfig | None:
            row = conn.execute(self._sql_get, (tenant, owner, task_id, config_id)).fetchone()
            return TaskPushNotificationConfig.from_json(row[0]) if row is not None else None

        return await self._db.run(job)

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        def job(conn: sqlite3.Connection) -> list[TaskPushNotificationConfig]:
            rows = conn.execute(self._sql_list, (tenant, owner, task_id)).fetchall()
            return [TaskPushNotificationConfig.from_json(row[0]) for row in rows]

        return await self._db.run(job)

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql_delete, (tenant, owner, task_id, config_id)).rowcount > 0

        return await self._db.run(job)


class SQLitePushOutbox(AttachedStore[_Database]):
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
            self._db = _Database(os.fspath(tasks_or_path), namespace)
        self._started = False
        self._claims: dict[StreamKey, str] = {}
        o = f"{self._db.namespace}_push_outbox"
        h = f"{self._db.namespace}_push_health"
        stream = "tenant = ? AND owner = ? AND task_id = ? AND config_id = ?"
        self._sql_discard = f"DELETE FROM {o} WHERE {stream} AND dead_at IS NULL"
        self._sql_add = (
            f"INSERT OR IGNORE INTO {o} (event_id, tenant, owner, task_id, config_id, seq, body, created_at, attempts, "
            "next_at, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
            "event_id, tenant, owner, task_id, config_id, seq, body, created_at, attempts, next_at, last_error, dead_at"
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
            )
            for e in changes.added
        ]
        delivered = [(e.event_id,) for e in changes.delivered]
        retried = [(e.attempts, e.next_attempt_at, e.last_error, e.event_id) for e in changes.retried]
        now = time.time()
        dead = [
            (e.attempts, e.last_error, e.dead_at if e.dead_at is not None else now, e.event_id) for e in changes.dead
        ]
        ok = [(*o.stream, o.url, o.at) for o in changes.outcomes if o.ok]
        failed = [(*o.stream, o.url, o.at, o.error) for o in changes.outcomes if not o.ok]

        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
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
                if ok:
                    conn.executemany(self._sql_ok, ok)
                if failed:
                    conn.executemany(self._sql_fail, failed)

        await self._db.run(job)

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

    async def dead_letters(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[OutboxEntry]:
        def job(conn: sqlite3.Connection) -> list[OutboxEntry]:
            return [self._entry(row) for row in conn.execute(self._sql_dead_letters, (tenant, owner, task_id))]

        return await self._db.run(job)
