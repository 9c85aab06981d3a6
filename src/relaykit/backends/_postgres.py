"""The PostgreSQL store: tasks and push configs in namespaced tables, shared by every replica of an agent.

Invariants (on top of the ``TaskStore`` / ``PushConfigStore`` rules in ``_base``, mirroring ``_sqlite``):

* **One pool per URL.** ``PostgresTaskStore`` owns an asyncpg pool (or borrows the one it is given);
  ``PostgresPushConfigStore(task_store)`` shares the task store's pool, which closes when the last of the two
  closes. ``open_store`` / ``open_push_store`` build exactly that pair from one URL.
* **Schema on start, under an advisory lock.** ``start()`` creates or migrates ``<namespace>_tasks``,
  ``<namespace>_push_configs`` and ``<namespace>_schema`` (its version) in one transaction holding
  ``pg_advisory_xact_lock(<namespace key>)``, so any number of replicas may start at once: the first one
  migrates, the others wait for its commit and find the schema current. The transaction-scoped lock is
  released by COMMIT/ROLLBACK, or by the server when the connection dies, so a crashed migrator never leaves it
  held. A schema written by a newer relaykit is refused rather than misread. ``upgrade()`` (``relaykit db
  upgrade``) runs the same migration alone.
* **One process per namespace, unless told otherwise.** With the in-process (memory) bus, only one process may
  serve a namespace: events and cancels of a task would otherwise never reach the process running it. The task
  store holds ``pg_try_advisory_lock(<guard key>)`` on a dedicated connection (outside the pool) from
  ``start()`` to ``close()``; a second process gets ``StoreInUseError`` telling it to use the Redis bus.
  ``exclusive=False`` skips the guard (the Redis bus coordinates replicas itself). If the guard connection
  dies, the next operation takes the lock again first; if another process took it meanwhile, operations fail
  with ``ServiceUnavailableError`` instead of silently sharing the namespace.
* **Outages are ``ServiceUnavailableError``.** An unreachable server at ``start()``, and a connection lost or
  refused during an operation, surface as ``relaykit.errors.ServiceUnavailableError`` naming the server (the
  password redacted). The mapping happens in one place (``_Database.run``). Operations are not retried (a lost
  ``save`` may or may not have committed; the caller's version then lags and its next ``save`` conflicts,
  which is safe); asyncpg's pool replaces dead connections on the next acquire, so the store recovers by
  itself when the server is back.
* **Optimistic concurrency in one statement.** Insert is ``INSERT … ON CONFLICT (id) DO NOTHING``, update is
  ``UPDATE … WHERE id = $ AND version = $ AND tenant = $ AND owner = $``; zero rows ⇒ ``ConflictError``.
* **Same order and cursor as every store.** ``status_ts`` is ``_paging.sort_key`` in µs; ids (and every key
  column) use ``COLLATE "C"``, i.e. byte order, which for UTF-8 is Python's ``str`` order, so the keyset
  ``(status_ts, id) < cursor`` means exactly what it means in SQLite and memory, and page tokens are
  ``_paging``'s. ``list`` computes the count and the page in ONE statement (one snapshot, one round trip), on
  the indexes ``(tenant, owner, status_ts DESC, id DESC)`` and ``(tenant, owner, context_id, status_ts DESC,
  id DESC)``, both ``INCLUDE (state)`` so a count filtered by state is index-only too.
* **Bodies are ``bytea``,** the task's ProtoJSON bytes exactly as written (``TaskRecord.body`` when the writer
  has it). ``jsonb`` would make the server parse every write and re-serialise every read (and asyncpg return
  ``str`` to be re-encoded); the store never queries inside a body, so bytes in, the same bytes out.
* Namespaces follow the SQLite rule (letters, digits, underscores, not starting with a digit); table names are
  unquoted, so like SQLite they are case-insensitive.
* PostgreSQL text cannot hold NUL: an id or scope containing one can match no stored row (reads return
  nothing, ``save`` raises ``ValueError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from relaykit._errors import ServiceUnavailableError
from relaykit._types import Task, TaskPushNotificationConfig, TaskState
from relaykit.backends._base import ConflictError, ListPage, TaskQuery, TaskRecord
from relaykit.backends._handle import AttachedStore
from relaykit.backends._memory import failed_status
from relaykit.backends._paging import decode_token, encode_token, sort_key, timestamp_us
from relaykit.backends._sqlite import StoreLockedError

__all__ = [
    "SCHEMA_VERSION",
    "PostgresPushConfigStore",
    "PostgresTaskStore",
    "StoreInUseError",
    "drop_namespace",
    "redact",
    "upgrade",
]

_T = TypeVar("_T")

SCHEMA_VERSION = 1
"""The schema version this relaykit writes; older schemas are migrated on start, newer ones refused."""

CONNECT_TIMEOUT = 10.0
"""Seconds a connection attempt may take before the server counts as unreachable."""

_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}\Z")

# States are stored as their proto names (the wire value), so the column reads the same as the JSON body.
_ACTIVE = [TaskState.SUBMITTED.value, TaskState.WORKING.value]
_TERMINAL = [state.value for state in TaskState if state.is_terminal]

# Schema migrations, applied in order: entry i brings a namespace from version i to version i + 1. Never edit
# an entry that has shipped; append a new one and bump SCHEMA_VERSION. Constraint and sequence names are given
# explicitly: PostgreSQL would truncate generated ones past 63 bytes for long namespaces.
_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE {ns}_tasks (
            id         TEXT COLLATE "C" NOT NULL,
            tenant     TEXT COLLATE "C" NOT NULL,
            owner      TEXT COLLATE "C" NOT NULL,
            context_id TEXT COLLATE "C" NOT NULL,
            state      TEXT COLLATE "C" NOT NULL,
            status_ts  BIGINT NOT NULL,
            version    BIGINT NOT NULL,
            event_seq  BIGINT NOT NULL DEFAULT 0,
            body       BYTEA NOT NULL,
            CONSTRAINT {ns}_tasks_pk PRIMARY KEY (id)
        )""",
        # ListTasks without a context filter: an index range scan in exactly the output order, so a page costs
        # O(page size), not O(tasks of the owner). INCLUDE (state): the COUNT of a state-filtered list is then an
        # index-only scan as well.
        "CREATE INDEX {ns}_tasks_list ON {ns}_tasks (tenant, owner, status_ts DESC, id DESC) INCLUDE (state)",
        # ListTasks with a context filter (the common "tasks of this conversation" query).
        "CREATE INDEX {ns}_tasks_context ON {ns}_tasks "
        "(tenant, owner, context_id, status_ts DESC, id DESC) INCLUDE (state)",
        # fail_orphans on start and purge on a timer: touch only active / old terminal rows, not every body.
        "CREATE INDEX {ns}_tasks_state ON {ns}_tasks (state, status_ts)",
        """CREATE TABLE {ns}_push_configs (
            tenant  TEXT COLLATE "C" NOT NULL,
            owner   TEXT COLLATE "C" NOT NULL,
            task_id TEXT COLLATE "C" NOT NULL,
            id      TEXT COLLATE "C" NOT NULL,
            seq     BIGINT GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME {ns}_push_seq),
            body    BYTEA NOT NULL,
            CONSTRAINT {ns}_push_pk PRIMARY KEY (tenant, owner, task_id, id)
        )""",
    ],
]

# What "the server is not there (any more)" looks like: the socket (refused, reset, timed out, DNS), the
# protocol (connection closed in the middle of an operation: class 08), the server going away or not taking
# connections yet (class 57: admin/crash shutdown, starting up, statement cancelled) or out of resources
# (class 53: too many connections, disk full), and a primary that became a read-only standby.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.ReadOnlySQLTransactionError,
)


class StoreInUseError(StoreLockedError):
    """Another relaykit process serves this PostgreSQL namespace with the in-process bus (one process only)."""


def redact(dsn: str) -> str:
    """``dsn`` with its password (in the authority or a ``password=`` parameter) replaced by ``***``."""
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(key == "password" for key, _ in pairs):
                query = urlencode([(k, "***" if k == "password" else v) for k, v in pairs], safe="*")
    except ValueError:
        return "<unparsable PostgreSQL URL>"
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _lock_key(purpose: str, namespace: str) -> int:
    # A stable signed 64-bit key per (purpose, namespace): the same in every process and every relaykit version.
    digest = hashlib.blake2b(f"relaykit:{purpose}:{namespace}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _check_namespace(namespace: str) -> str:
    if not _NAMESPACE.match(namespace):
        raise ValueError(
            f"invalid namespace {namespace!r}: letters, digits and underscores, not starting with a digit "
            "(at most 48 characters)"
        )
    # Unquoted identifiers fold to lower case: "Acme" and "acme" name the same tables, so they share locks too.
    return namespace.lower()


def _has_nul(*values: str) -> bool:
    return any("\x00" in value for value in values)


def _rowcount(status: str) -> int:
    # asyncpg returns the command tag: "INSERT 0 1", "UPDATE 3", "DELETE 0".
    return int(status.rpartition(" ")[2] or 0)


async def _keep_session(conn: Any) -> None:
    # Pool connections are released as they were acquired: the store never changes session state (no SET, no
    # LISTEN, no session-level advisory lock, no open cursor), and asyncpg rolls back a transaction left open
    # itself. Skipping asyncpg's default reset query saves one round trip on every operation.
    return None


async def _migrate(conn: Any, namespace: str, where: str) -> tuple[int, int]:
    """Create or migrate the schema of ``namespace`` on ``conn``; returns (version found, version now)."""
    table = f"{namespace}_schema"
    async with conn.transaction():
        # Waits for any replica migrating the same namespace; released at COMMIT / ROLLBACK.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key("migrate", namespace))
        if await conn.fetchval("SELECT to_regclass($1)", table) is None:
            await conn.execute(
                f"CREATE TABLE {table} (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
            )
        found = await conn.fetchval(f"SELECT version FROM {table} WHERE id = 1")
        current = int(found) if found is not None else 0
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"the PostgreSQL store {where} has schema version {current} (namespace {namespace!r}), "
                f"newer than this relaykit supports ({SCHEMA_VERSION}); upgrade relaykit"
            )
        for statements in _MIGRATIONS[current:SCHEMA_VERSION]:
            for statement in statements:
                await conn.execute(statement.format(ns=namespace))
        if current != SCHEMA_VERSION:
            await conn.execute(
                f"INSERT INTO {table} (id, version) VALUES (1, $1) "
                "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                SCHEMA_VERSION,
            )
    return current, SCHEMA_VERSION


def _application_name(namespace: str, role: str) -> str:
    # Shown in pg_stat_activity (and in the refusal a second process prints); the server truncates to 63 bytes.
    return f"relaykit {namespace} {role} pid {os.getpid()}@{socket.gethostname()}"


class _Database:
    """One PostgreSQL URL and namespace: the pool, the single-process guard, the schema."""

    def __init__(
        self,
        dsn: str,
        namespace: str,
        *,
        pool: Any = None,
        min_size: int,
        max_size: int,
        exclusive: bool,
        connect_timeout: float,
    ) -> None:
        self.dsn = dsn
        self.where = redact(dsn)
        self.namespace = _check_namespace(namespace)
        self.exclusive = exclusive
        self._external_pool = pool
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._users = 0
        self._guard = asyncio.Lock()
        self._pool: Any = None
        self._lock_conn: Any = None
        self._relock = asyncio.Lock()
        # (version found, version now) of the migration this object ran at start.
        self.migrated: tuple[int, int] | None = None

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def acquire(self) -> None:
        """Open for one more user (the first opens the pool, takes the guard, migrates)."""
        async with self._guard:
            if self._users == 0:
                await self._open()
            self._users += 1

    async def release(self) -> None:
        """Drop one user (the last releases the guard and closes the pool)."""
        async with self._guard:
            self._users -= 1
            if self._users == 0:
                await self._close()

    async def _open(self) -> None:
        try:
            # The guard first, so a refused second process never touches the schema.
            if self.exclusive:
                await self._take_lock(starting=True)
            if self._external_pool is not None:
                self._pool = self._external_pool
            else:
                self._pool = await asyncpg.create_pool(
                    self.dsn,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    timeout=self._connect_timeout,
                    reset=_keep_session,
                    server_settings={"application_name": _application_name(self.namespace, "pool")},
                )
            async with self._pool.acquire() as conn:
                self.migrated = await _migrate(conn, self.namespace, self.where)
        except BaseException as exc:
            await self._close()
            if isinstance(exc, _UNAVAILABLE):
                raise ServiceUnavailableError(
                    f"cannot connect to the PostgreSQL store {self.where}: {_describe(exc)}"
                ) from exc
            if isinstance(exc, asyncpg.PostgresError):
                raise RuntimeError(f"cannot open the PostgreSQL store {self.where}: {exc}") from exc
            raise

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        lock_conn, self._lock_conn = self._lock_conn, None
        try:
            if pool is not None and pool is not self._external_pool:
                # Waits for operations still running on acquired connections.
                await pool.close()
        finally:
            # Released only after the pool is closed: the next owner must find the namespace quiescent.
            if lock_conn is not None:
                await _close_quietly(lock_conn)

    # --- the single-process guard ---------------------------------------------------------------------------

    async def _take_lock(self, *, starting: bool) -> None:
        key = _lock_key("serve", self.namespace)
        conn = await asyncpg.connect(
            self.dsn,
            timeout=self._connect_timeout,
            server_settings={"application_name": _application_name(self.namespace, "guard")},
        )
        try:
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", key):
                self._lock_conn = conn
                return
            holder = await conn.fetchval(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1",
                (key >> 32) & 0xFFFFFFFF,
                key & 0xFFFFFFFF,
            )
        except BaseException:
            await _close_quietly(conn)
            raise
        await _close_quietly(conn)
        by = f" (held by {holder!r})" if holder else ""
        message = (
            f"another relaykit process is using this PostgreSQL store (namespace {self.namespace!r} at "
            f"{self.where}){by}; with the in-process bus only one process may serve a namespace: "
            "use --bus redis://… to run several, or another --namespace"
        )
        if starting:
            raise StoreInUseError(message)
        raise ServiceUnavailableError(f"lost the single-process lock of the PostgreSQL store: {message}")

    async def _ensure_lock(self) -> None:
        # The guard's session lock dies with its connection (server restart, pg_terminate_backend, network):
        # take it again before doing anything else, so two processes never share a namespace unnoticed.
        async with self._relock:
            lock_conn = self._lock_conn
            if lock_conn is not None and not lock_conn.is_closed():
                return
            self._lock_conn = None
            if lock_conn is not None:
                await _close_quietly(lock_conn)
            await self._take_lock(starting=False)

    # --- operations -----------------------------------------------------------------------------------------

    async def run(self, job: Callable[[Any], Awaitable[_T]]) -> _T:
        """Run ``job(connection)`` on a pooled connection; a lost server becomes ``ServiceUnavailableError``."""
        pool = self._pool
        if pool is None:
            raise RuntimeError(f"the PostgreSQL store {self.where} is not started (or already closed)")
        try:
            if self.exclusive and (self._lock_conn is None or self._lock_conn.is_closed()):
                await self._ensure_lock()
            async with pool.acquire() as conn:
                try:
                    return await job(conn)
                except Exception as exc:
                    if not _connection_lost(exc, conn):
                        raise
                    # Never hand a connection in doubt back to the pool: the next acquire opens a fresh one. (A
                    # connection that closed itself is already detached from its proxy: nothing to do.)
                    with contextlib.suppress(asyncpg.InterfaceError):
                        conn.terminate()
                    raise self._unavailable(exc) from exc
        except _UNAVAILABLE as exc:
            # Acquiring: the pool could not open a connection (or the guard's).
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> ServiceUnavailableError:
        return ServiceUnavailableError(f"the PostgreSQL store {self.where} is unavailable: {_describe(exc)}")


def _connection_lost(exc: BaseException, conn: Any) -> bool:
    if isinstance(exc, _UNAVAILABLE):
        return True
    # The server's FATAL "terminating connection" can reach asyncpg just before the socket closes; an operation
    # started in between fails on the protocol state (InternalClientError) or on the closed connection.
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        return True
    if not isinstance(exc, asyncpg.InterfaceError):
        return False
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        return True  # the proxy was detached because the connection closed


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, TimeoutError) and not text:
        return "connection timed out"
    return text or type(exc).__name__


async def _close_quietly(conn: Any) -> None:
    try:
        await asyncio.wait_for(conn.close(), timeout=CONNECT_TIMEOUT)
    except Exception:
        conn.terminate()


# --- the task store ---------------------------------------------------------------------------------------------


class PostgresTaskStore(AttachedStore[_Database]):
    """Tasks in PostgreSQL tables ``<namespace>_*``; several replicas may share them (with the Redis bus).

    >>> store = PostgresTaskStore("postgresql://postgres@127.0.0.1:5432/test", namespace="demo")
    >>> store.namespace
    'demo'
    """

    def __init__(
        self,
        dsn: str,
        *,
        namespace: str = "relaykit",
        pool: Any = None,
        min_size: int = 1,
        max_size: int = 10,
        exclusive: bool = True,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        """``pool``: an asyncpg pool to use instead of opening one (left open at ``close()``).

        ``exclusive=False`` skips the single-process guard: only for deployments whose bus coordinates replicas
        (Redis).
        """
        self._db = _Database(
            dsn,
            namespace,
            pool=pool,
            min_size=min_size,
            max_size=max_size,
            exclusive=exclusive,
            connect_timeout=connect_timeout,
        )
        self._started = False
        t = f"{self._db.namespace}_tasks"
        self._table = t
        self._sql_get = f"SELECT body, version, event_seq FROM {t} WHERE id = $1 AND tenant = $2 AND owner = $3"
        self._sql_insert = (
            f"INSERT INTO {t} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING"
        )
        # Scope in the WHERE clause too: a record can never move a task to another tenant or owner.
        self._sql_update = (
            f"UPDATE {t} SET context_id = $4, state = $5, status_ts = $6, version = $7, event_seq = $8, body = $9 "
            "WHERE id = $1 AND tenant = $2 AND owner = $3 AND version = $10"
        )
        self._sql_delete = f"DELETE FROM {t} WHERE id = $1 AND tenant = $2 AND owner = $3"
        self._sql_active = f"SELECT id, body FROM {t} WHERE state = ANY($1::text[]) FOR UPDATE"
        self._sql_fail = (
            f"UPDATE {t} AS o SET state = u.state, status_ts = u.status_ts, version = o.version + 1, body = u.body "
            "FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[]) AS u(id, state, status_ts, body) "
            "WHERE o.id = u.id"
        )
        self._sql_purge = f"DELETE FROM {t} WHERE state = ANY($1::text[]) AND status_ts < $2"

    @property
    def dsn(self) -> str:
        """The connection URL (with its password: do not log it; ``redact()`` it)."""
        return self._db.dsn

    @property
    def namespace(self) -> str:
        """The table prefix (lower case)."""
        return self._db.namespace

    @property
    def exclusive(self) -> bool:
        """Whether this store holds the single-process guard while started."""
        return self._db.exclusive

    @property
    def migrated(self) -> tuple[int, int] | None:
        """``(schema version found, schema version now)`` of the migration run at ``start()``."""
        return self._db.migrated

    async def ping(self) -> None:
        """One round trip to the server; ``ServiceUnavailableError`` when it is unreachable (for readiness)."""

        async def job(conn: Any) -> None:
            await conn.fetchval("SELECT 1")

        await self._db.run(job)

    async def get(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> TaskRecord | None:
        if _has_nul(task_id, tenant, owner):
            return None

        async def job(conn: Any) -> Any:
            return await conn.fetchrow(self._sql_get, task_id, tenant, owner)

        row = await self._db.run(job)
        if row is None:
            return None
        return TaskRecord(Task.from_json(row[0]), tenant, owner, int(row[1]), int(row[2]))

    async def save(self, record: TaskRecord) -> None:
        # Everything is read and encoded now: the caller may keep mutating the task while the write is in flight.
        task = record.task
        task_id, version = task.id, record.version
        if _has_nul(task_id, record.tenant, record.owner, task.context_id):
            raise ValueError("the PostgreSQL store cannot hold a task id, context id or scope containing NUL")
        body = record.body if record.body is not None else task.to_json()
        args = (
            task_id,
            record.tenant,
            record.owner,
            task.context_id,
            task.status.state.value,
            sort_key(task)[0],
            version + 1,
            record.event_seq,
            body,
        )

        if version == 0:

            async def job(conn: Any) -> str:
                return str(await conn.execute(self._sql_insert, *args))

            if _rowcount(await self._db.run(job)) != 1:
                raise ConflictError(f"task {task_id} already exists")
        else:

            async def job(conn: Any) -> str:
                return str(await conn.execute(self._sql_update, *args, version))

            if _rowcount(await self._db.run(job)) != 1:
                raise ConflictError(f"task {task_id} was changed by another writer (or is not in this scope)")
        record.version = version + 1

    async def list(self, query: TaskQuery) -> ListPage:
        # Decoded first, so a bad token fails fast with ValueError and costs the database nothing.
        after = decode_token(query.page_token) if query.page_token else None
        if after is not None and _has_nul(after[1]):
            raise ValueError(f"invalid page token {query.page_token!r}")
        if _has_nul(query.tenant, query.owner, query.context_id):
            return ListPage()
        sql, params = self.list_statement(query, after)

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(sql, *params))

        rows = await self._db.run(job)
        size = max(query.page_size, 0)
        total = int(rows[0][0]) if rows else 0
        found = [row for row in rows if row[2] is not None]
        page = found[:size]
        more = len(found) > size
        return ListPage(
            tasks=[Task.from_json(row[3]) for row in page],
            next_page_token=encode_token((int(page[-1][1]), str(page[-1][2]))) if more and page else "",
            total_size=total,
        )

    def list_statement(self, query: TaskQuery, after: tuple[int, str] | None = None) -> tuple[str, Sequence[object]]:
        """The one SQL statement (and its parameters) ``list`` runs: rows ``(total, status_ts, id, body)``.

        Public for ``EXPLAIN`` (bench/pg_list.py, tests); ``after`` is the decoded page token.
        """
        where = ["tenant = $1", "owner = $2"]
        params: list[object] = [query.tenant, query.owner]
        if query.context_id:
            params.append(query.context_id)
            where.append(f"context_id = ${len(params)}")
        if query.state is not None:
            params.append(query.state.value)
            where.append(f"state = ${len(params)}")
        if query.status_after is not None:
            params.append(timestamp_us(query.status_after))
            where.append(f"status_ts >= ${len(params)}")
        page_where = list(where)
        if after is not None:
            # A row-value comparison on consecutive index columns: the page starts with one index seek.
            params.extend(after)
            page_where.append(f"(status_ts, id) < (${len(params) - 1}, ${len(params)})")
        # One row more than the page tells whether a next page exists.
        params.append(max(query.page_size, 0) + 1)
        # The count and the page in one statement: one snapshot and one round trip. The LEFT JOIN keeps the count
        # row when the page is empty.
        sql = (
            f"SELECT c.total, p.status_ts, p.id, p.body "
            f"FROM (SELECT count(*) AS total FROM {self._table} WHERE {' AND '.join(where)}) AS c "
            f"LEFT JOIN LATERAL (SELECT status_ts, id, body FROM {self._table} WHERE {' AND '.join(page_where)} "
            f"ORDER BY status_ts DESC, id DESC LIMIT ${len(params)}) AS p ON true "
            "ORDER BY p.status_ts DESC, p.id DESC"
        )
        return sql, params

    async def delete(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        if _has_nul(task_id, tenant, owner):
            return False

        async def job(conn: Any) -> str:
            return str(await conn.execute(self._sql_delete, task_id, tenant, owner))

        return _rowcount(await self._db.run(job)) > 0

    async def fail_orphans(self, reason: str) -> int:
        # Every active task of the namespace: right while the single-process guard holds (no other process can be
        # running any of them). Replicas sharing the namespace (exclusive=False) must scope this by lease first.
        async def job(conn: Any) -> int:
            # One transaction: the active rows are locked (a concurrent writer waits, then conflicts on the
            # bumped version), rewritten in Python (the body gains the FAILED status and its message) and
            # updated in one statement.
            async with conn.transaction():
                rows = await conn.fetch(self._sql_active, _ACTIVE)
                if not rows:
                    return 0
                ids: list[str] = []
                states: list[str] = []
                stamps: list[int] = []
                bodies: list[bytes] = []
                for task_id, body in rows:
                    task = Task.from_json(body)
                    status = failed_status(reason)
                    task.status = status
                    # History holds the agent messages carried in status updates (CONTRACT): this one too.
                    if status.message is not None:
                        task.history.append(status.message)
                    ids.append(task_id)
                    states.append(status.state.value)
                    stamps.append(sort_key(task)[0])
                    bodies.append(task.to_json())
                await conn.execute(self._sql_fail, ids, states, stamps, bodies)
                return len(rows)

        return await self._db.run(job)

    async def purge(self, before: datetime) -> int:
        limit = timestamp_us(before)

        async def job(conn: Any) -> str:
            return str(await conn.execute(self._sql_purge, _TERMINAL, limit))

        return _rowcount(await self._db.run(job))


# --- the push-config store --------------------------------------------------------------------------------------


class PostgresPushConfigStore(AttachedStore[_Database]):
    """Push configs in ``<namespace>_push_configs``, next to the tasks.

    Pass the ``PostgresTaskStore`` to share its pool (the normal case); given a URL it opens its own pool and takes
    no single-process guard (that belongs to the task store). ``put`` of an existing (tenant, owner, task id,
    config id) replaces the config in place: it keeps its position in ``list``.
    """

    def __init__(
        self,
        tasks_or_dsn: PostgresTaskStore | str,
        *,
        namespace: str = "relaykit",
        pool: Any = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        if isinstance(tasks_or_dsn, PostgresTaskStore):
            self._db = tasks_or_dsn._db
        else:
            self._db = _Database(
                tasks_or_dsn,
                namespace,
                pool=pool,
                min_size=min_size,
                max_size=max_size,
                exclusive=False,
                connect_timeout=connect_timeout,
            )
        self._started = False
        p = f"{self._db.namespace}_push_configs"
        # seq (an identity column) numbers configs in insertion order; the upsert leaves it alone, so a replaced
        # config keeps its place, and a config deleted then put again goes last.
        self._sql_put = (
            f"INSERT INTO {p} (tenant, owner, task_id, id, body) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (tenant, owner, task_id, id) DO UPDATE SET body = excluded.body"
        )
        self._sql_get = f"SELECT body FROM {p} WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND id = $4"
        self._sql_list = f"SELECT body FROM {p} WHERE tenant = $1 AND owner = $2 AND task_id = $3 ORDER BY seq"
        self._sql_delete = f"DELETE FROM {p} WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND id = $4"

    @property
    def namespace(self) -> str:
        """The table prefix (lower case)."""
        return self._db.namespace

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        if _has_nul(config.tenant, owner, config.task_id, config.id):
            raise ValueError("the PostgreSQL store cannot hold a push config id or scope containing NUL")
        body = config.to_json()

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_put, config.tenant, owner, config.task_id, config.id, body)

        await self._db.run(job)

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        if _has_nul(task_id, config_id, tenant, owner):
            return None

        async def job(conn: Any) -> Any:
            return await conn.fetchval(self._sql_get, tenant, owner, task_id, config_id)

        body = await self._db.run(job)
        return TaskPushNotificationConfig.from_json(body) if body is not None else None

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        if _has_nul(task_id, tenant, owner):
            return []

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_list, tenant, owner, task_id))

        return [TaskPushNotificationConfig.from_json(row[0]) for row in await self._db.run(job)]

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        if _has_nul(task_id, config_id, tenant, owner):
            return False

        async def job(conn: Any) -> str:
            return str(await conn.execute(self._sql_delete, tenant, owner, task_id, config_id))

        return _rowcount(await self._db.run(job)) > 0


# --- administration ---------------------------------------------------------------------------------------------


async def _connect_once(dsn: str, connect_timeout: float) -> Any:
    try:
        return await asyncpg.connect(dsn, timeout=connect_timeout)
    except _UNAVAILABLE as exc:
        raise ServiceUnavailableError(
            f"cannot connect to the PostgreSQL store {redact(dsn)}: {_describe(exc)}"
        ) from exc


async def upgrade(
    dsn: str, *, namespace: str = "relaykit", connect_timeout: float = CONNECT_TIMEOUT
) -> tuple[int, int]:
    """Create or migrate the schema of ``namespace`` (``relaykit db upgrade``); returns (version found, now).

    Safe while servers run on the namespace: it takes the same migration lock as their ``start()`` and not the
    single-process guard.
    """
    namespace = _check_namespace(namespace)
    conn = await _connect_once(dsn, connect_timeout)
    try:
        return await _migrate(conn, namespace, redact(dsn))
    finally:
        await _close_quietly(conn)


async def drop_namespace(dsn: str, namespace: str, *, connect_timeout: float = CONNECT_TIMEOUT) -> list[str]:
    """Drop every table of ``namespace`` (``<namespace>_*``); returns their names. Destructive: tests and benches."""
    namespace = _check_namespace(namespace)
    conn = await _connect_once(dsn, connect_timeout)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key("migrate", namespace))
            rows: Sequence[Any] = await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE $1",
                namespace.replace("_", "\\_") + "\\_%",
            )
            names = [str(row[0]) for row in rows]
            if names:
                await conn.execute(f"DROP TABLE IF EXISTS {', '.join(names)} CASCADE")
        return names
    finally:
        await _close_quietly(conn)
