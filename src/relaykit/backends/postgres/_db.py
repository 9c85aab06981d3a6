"""The PostgreSQL connection machinery: one pool per URL and namespace (``Database``), the namespace guard, outage
mapping to ``ServiceUnavailableError``, and the administration entry points (``upgrade``, ``drop_namespace``).

The stores (``_tasks.PostgresTaskStore``, ``_push.PostgresPushConfigStore``) run every operation through
``Database.run(job)``, the one place where a lost server becomes ``ServiceUnavailableError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from relaykit._errors import ServiceUnavailableError
from relaykit.backends._base import StoreLockedError
from relaykit.backends.postgres._schema import check_namespace, lock_key, migrate

__all__ = [
    "CONNECT_TIMEOUT",
    "UNAVAILABLE",
    "Database",
    "Guard",
    "StoreInUseError",
    "close_quietly",
    "columns",
    "connect_once",
    "connection_lost",
    "describe",
    "drop_namespace",
    "has_nul",
    "redact",
    "rowcount",
    "upgrade",
]

_T = TypeVar("_T")

CONNECT_TIMEOUT = 10.0
"""Seconds a connection attempt may take before the server counts as unreachable."""

# What "the server is not there (any more)" looks like: the socket (refused, reset, timed out, DNS), the
# protocol (connection closed in the middle of an operation: class 08), the server going away or not taking
# connections yet (class 57: admin/crash shutdown, starting up, statement cancelled) or out of resources
# (class 53: too many connections, disk full), and a primary that became a read-only standby.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.ReadOnlySQLTransactionError,
)


Guard = Literal["exclusive", "shared"]
"""How a task store holds its namespace's guard: ``exclusive`` (the in-process bus: one process alone) or ``shared``
(Redis-bus replicas and workers: any number of them, never beside an exclusive holder)."""


class StoreInUseError(StoreLockedError):
    """The namespace's guard is held in a way this store cannot join: another process with the in-process bus, or
    (for such a process) live Redis-bus replicas."""


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


def has_nul(*values: str) -> bool:
    return any("\x00" in value for value in values)


def columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as the column arrays ``unnest`` takes (one array per column, ``width`` of them)."""
    return [[row[i] for row in rows] for i in range(width)] if rows else [[] for _ in range(width)]


def rowcount(status: str) -> int:
    # asyncpg returns the command tag: "INSERT 0 1", "UPDATE 3", "DELETE 0".
    return int(status.rpartition(" ")[2] or 0)


async def _keep_session(conn: Any) -> None:
    # Pool connections are released as they were acquired: the store never changes session state (no SET, no
    # LISTEN, no session-level advisory lock, no open cursor), and asyncpg rolls back a transaction left open
    # itself. Skipping asyncpg's default reset query saves one round trip on every operation.
    return None


# The holders of the namespace guard (its key split as pg_locks shows it) and how each holds it.
_HOLDERS = (
    "SELECT a.application_name, l.mode FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1 "
    "ORDER BY l.mode, a.application_name"
)

_JOIN = (
    "a process with the in-process bus cannot serve beside Redis-bus replicas (it would fail the tasks they run): "
    "start it with their --bus redis://…, stop them first, or use another --namespace"
)


def _listed(items: list[str], shown: int = 3) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


async def _live_workers(conn: Any, namespace: str) -> list[tuple[str, float]]:
    """``(worker id, seconds its heartbeat still lasts)`` of the namespace's live Redis-bus replicas, longest first."""
    table = f"{namespace}_workers"
    if await conn.fetchval("SELECT to_regclass($1)", table) is None:
        return []  # a new namespace, or one no replica ever served (schema version 1)
    rows = await conn.fetch(
        f"SELECT id, extract(epoch FROM expires_at - now())::float8 FROM {table} WHERE expires_at > now() "
        "ORDER BY expires_at DESC"
    )
    return [(str(row[0]), float(row[1])) for row in rows]


def _application_name(namespace: str, role: str) -> str:
    # Shown in pg_stat_activity (and in the refusal a second process prints); the server truncates to 63 bytes.
    return f"relaykit {namespace} {role} pid {os.getpid()}@{socket.gethostname()}"


class Database:
    """One PostgreSQL URL and namespace: the pool, the namespace guard, the schema.

    ``guard``: ``None`` takes no guard (a store that only borrows the namespace, e.g. a push store opened from a URL).
    """

    def __init__(
        self,
        dsn: str,
        namespace: str,
        *,
        pool: Any = None,
        min_size: int,
        max_size: int,
        guard: Guard | None,
        connect_timeout: float,
    ) -> None:
        self.dsn = dsn
        self.where = redact(dsn)
        self.namespace = check_namespace(namespace)
        self.guard = guard
        self._external_pool = pool
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._users = 0
        self._guard = asyncio.Lock()
        self._pool: Any = None
        self._lock_conn: Any = None
        self._relock = asyncio.Lock()
        # A connection of its own for statements that must not queue behind the pool's work (lease heartbeats).
        self._side_conn: Any = None
        self._side_lock = asyncio.Lock()
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
            # The guard first, so a refused process never touches the schema or a task.
            if self.guard is not None:
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
                self.migrated = await migrate(conn, self.namespace, self.where)
        except BaseException as exc:
            await self._close()
            if isinstance(exc, UNAVAILABLE):
                raise ServiceUnavailableError(
                    f"cannot connect to the PostgreSQL store {self.where}: {describe(exc)}"
                ) from exc
            if isinstance(exc, asyncpg.PostgresError):
                raise RuntimeError(f"cannot open the PostgreSQL store {self.where}: {exc}") from exc
            raise

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        lock_conn, self._lock_conn = self._lock_conn, None
        side, self._side_conn = self._side_conn, None
        if side is not None:
            await close_quietly(side)
        try:
            if pool is not None and pool is not self._external_pool:
                # Waits for operations still running on acquired connections.
                await pool.close()
        finally:
            # Released only after the pool is closed: the next owner must find the namespace quiescent.
            if lock_conn is not None:
                await close_quietly(lock_conn)

    # --- the namespace guard --------------------------------------------------------------------------------
    #
    # One session-level advisory lock per namespace (``lock_key("serve", …)``), held on a dedicated connection from
    # start to close: exclusively by a process on the in-process bus, shared by each Redis-bus replica or worker. So
    # replicas start together (shared holders do not conflict) and neither kind starts beside the other. It is only
    # ever taken with a *try* call: nobody waits on this key, so no try fails behind a waiter, and it cannot deadlock
    # with the migration lock (another key, waited for inside ``migrate`` after this one is taken, and by
    # ``relaykit db upgrade``, which never takes this one).

    async def _take_lock(self, *, starting: bool) -> None:
        key = lock_key("serve", self.namespace)
        shared = self.guard == "shared"
        conn = await asyncpg.connect(
            self.dsn,
            timeout=self._connect_timeout,
            server_settings={"application_name": _application_name(self.namespace, "replica" if shared else "guard")},
        )
        try:
            take = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
            if await conn.fetchval(f"SELECT {take}($1)", key):
                # A server restart drops every session lock, and each replica takes its own again only at its next
                # operation (a heartbeat at the latest): replicas live meanwhile are still known by their heartbeats,
                # and an in-process-bus process starting beside them would fail the tasks they run. Only at start:
                # a store taking its lock back may be heartbeating itself (one process with the Redis bus and an
                # exclusive store), and a start is what fails tasks.
                live = await _live_workers(conn, self.namespace) if starting and not shared else []
                if not live:
                    self._lock_conn = conn
                    return
                message = self._beside_replicas(live)
            else:
                rows = await conn.fetch(_HOLDERS, (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)
                message = self._refusal([(row[0], row[1] == "ExclusiveLock") for row in rows])
        except BaseException:
            await close_quietly(conn)
            raise
        await close_quietly(conn)  # and with it the lock, if it was taken
        if starting:
            raise StoreInUseError(message)
        lost = "the Redis-bus replicas' shared lock" if shared else "the single-process lock"
        raise ServiceUnavailableError(f"lost {lost} of the PostgreSQL store: {message}")

    def _store(self) -> str:
        return f"this PostgreSQL store (namespace {self.namespace!r} at {self.where})"

    def _refusal(self, holders: list[tuple[str | None, bool]]) -> str:
        """Why the lock was refused, from its holders: ``(application_name, exclusive)``."""
        named = [repr(name) for name, _ in holders if name]
        held = f"held by {_listed(named)}" if named else "holder unknown"
        if any(exclusive for _, exclusive in holders):
            head = f"another relaykit process is using {self._store()} with the in-process bus ({held})"
            if self.guard == "shared":
                return (
                    f"{head}; it serves the namespace alone, so Redis-bus replicas and workers cannot join it: stop "
                    "it (or restart it with --bus redis://…) first, or use another --namespace"
                )
            return (
                f"{head}; with the in-process bus only one process may serve a namespace: use --bus redis://… to run "
                "several, or another --namespace"
            )
        if holders:
            return (
                f"another relaykit process is using {self._store()} with the Redis bus ({len(holders)} replica(s) or "
                f"worker(s), {held}); {_JOIN}"
            )
        # The holders let go between the two statements.
        return f"another relaykit process was using {self._store()} and has just stopped: try again"

    def _beside_replicas(self, live: list[tuple[str, float]]) -> str:
        worker, seconds = live[0]
        more = f" and {len(live) - 1} more" if len(live) > 1 else ""
        return (
            f"another relaykit process is using {self._store()} with the Redis bus (worker {worker!r}{more} "
            f"heartbeating, live for {seconds:.1f} s more; a replica that died counts as live until its --lease "
            f"lapses); {_JOIN}"
        )

    async def _ensure_lock(self) -> None:
        # The guard's session lock dies with its connection (server restart, pg_terminate_backend, network):
        # take it again before doing anything else, so the namespace is never shared against its rule unnoticed.
        async with self._relock:
            lock_conn = self._lock_conn
            if lock_conn is not None and not lock_conn.is_closed():
                return
            self._lock_conn = None
            if lock_conn is not None:
                await close_quietly(lock_conn)
            await self._take_lock(starting=False)

    # --- operations -----------------------------------------------------------------------------------------

    async def run(self, job: Callable[[Any], Awaitable[_T]]) -> _T:
        """Run ``job(connection)`` on a pooled connection; a lost server becomes ``ServiceUnavailableError``."""
        pool = self._pool
        if pool is None:
            raise RuntimeError(f"the PostgreSQL store {self.where} is not started (or already closed)")
        try:
            if self.guard is not None and (self._lock_conn is None or self._lock_conn.is_closed()):
                await self._ensure_lock()
            async with pool.acquire() as conn:
                try:
                    return await job(conn)
                except Exception as exc:
                    if not connection_lost(exc, conn):
                        raise
                    # Never hand a connection in doubt back to the pool: the next acquire opens a fresh one. (A
                    # connection that closed itself is already detached from its proxy: nothing to do.)
                    with contextlib.suppress(asyncpg.InterfaceError):
                        conn.terminate()
                    raise self._unavailable(exc) from exc
        except UNAVAILABLE as exc:
            # Acquiring: the pool could not open a connection (or the guard's).
            raise self._unavailable(exc) from exc

    async def run_aside(self, job: Callable[[Any], Awaitable[_T]]) -> _T:
        """Run ``job(connection)`` on this store's side connection, never queued behind the pool's work.

        For lease heartbeats: under load every pooled connection may be busy with task writes for seconds, and a
        heartbeat that waits behind them lets a live worker's lease lapse (its tasks would be taken over).
        """
        if self._pool is None:
            raise RuntimeError(f"the PostgreSQL store {self.where} is not started (or already closed)")
        async with self._side_lock:
            try:
                # Heartbeats come every few seconds even when no request does: a replica whose shared guard died
                # with its connection (a server restart) takes it again within one heartbeat, not at its next
                # request, so the window in which an in-process-bus process could start beside it stays short.
                if self.guard is not None and (self._lock_conn is None or self._lock_conn.is_closed()):
                    await self._ensure_lock()
                if self._side_conn is None or self._side_conn.is_closed():
                    self._side_conn = await asyncpg.connect(
                        self.dsn,
                        timeout=self._connect_timeout,
                        server_settings={"application_name": _application_name(self.namespace, "lease")},
                    )
                conn = self._side_conn
                try:
                    return await job(conn)
                except Exception as exc:
                    if not connection_lost(exc, conn):
                        raise
                    self._side_conn = None
                    with contextlib.suppress(Exception):
                        conn.terminate()
                    raise self._unavailable(exc) from exc
            except UNAVAILABLE as exc:
                raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> ServiceUnavailableError:
        return ServiceUnavailableError(f"the PostgreSQL store {self.where} is unavailable: {describe(exc)}")


def shared_database(
    tasks_or_dsn: Any, namespace: str, *, pool: Any, min_size: int, max_size: int, connect_timeout: float
) -> Database:
    """The task store's Database (one pool for the stores of one namespace), or a new one for a URL."""
    if not isinstance(tasks_or_dsn, str):
        return tasks_or_dsn._db  # type: ignore[no-any-return]
    return Database(
        tasks_or_dsn,
        namespace,
        pool=pool,
        min_size=min_size,
        max_size=max_size,
        # A store opened from a URL alone shares the namespace with a task store that holds the guard.
        guard=None,
        connect_timeout=connect_timeout,
    )


def connection_lost(exc: BaseException, conn: Any) -> bool:
    if isinstance(exc, UNAVAILABLE):
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


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, TimeoutError) and not text:
        return "connection timed out"
    return text or type(exc).__name__


async def close_quietly(conn: Any) -> None:
    try:
        await asyncio.wait_for(conn.close(), timeout=CONNECT_TIMEOUT)
    except Exception:
        conn.terminate()


# --- administration ---------------------------------------------------------------------------------------------


async def connect_once(dsn: str, connect_timeout: float) -> Any:
    try:
        return await asyncpg.connect(dsn, timeout=connect_timeout)
    except UNAVAILABLE as exc:
        raise ServiceUnavailableError(f"cannot connect to the PostgreSQL store {redact(dsn)}: {describe(exc)}") from exc


async def upgrade(
    dsn: str, *, namespace: str = "relaykit", connect_timeout: float = CONNECT_TIMEOUT
) -> tuple[int, int]:
    """Create or migrate the schema of ``namespace`` (``relaykit db upgrade``); returns (version found, now).

    Safe while servers run on the namespace: it takes the same migration lock as their ``start()`` and not the
    single-process guard.
    """
    namespace = check_namespace(namespace)
    conn = await connect_once(dsn, connect_timeout)
    try:
        return await migrate(conn, namespace, redact(dsn))
    finally:
        await close_quietly(conn)


async def drop_namespace(dsn: str, namespace: str, *, connect_timeout: float = CONNECT_TIMEOUT) -> list[str]:
    """Drop every table of ``namespace`` (``<namespace>_*``); returns their names. Destructive: tests and benches."""
    namespace = check_namespace(namespace)
    conn = await connect_once(dsn, connect_timeout)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("migrate", namespace))
            rows: Sequence[Any] = await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE $1",
                namespace.replace("_", "\\_") + "\\_%",
            )
            names = [str(row[0]) for row in rows]
            if names:
                await conn.execute(f"DROP TABLE IF EXISTS {', '.join(names)} CASCADE")
        return names
    finally:
        await close_quietly(conn)
