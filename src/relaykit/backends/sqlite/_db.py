"""The SQLite file machinery every SQLite store shares: the owner lock, the one connection and its one thread,
the schema migration on open, and write transactions.

The stores (``_tasks.SQLiteTaskStore``, ``_push.SQLitePushConfigStore``, ``_outbox.SQLitePushOutbox``) run every
statement through ``Database.run(job)``; the package states the invariants this gives them.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from relaykit.backends._base import StoreLockedError
from relaykit.backends.sqlite._schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["BUSY_TIMEOUT_MS", "SYNCHRONOUS", "Database", "transaction"]

_T = TypeVar("_T")

BUSY_TIMEOUT_MS = 5000

_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}\Z")
_MEMORY = ":memory:"

# The ``synchronous`` levels a store may run at (PRAGMA synchronous values), the default first. NORMAL in WAL mode
# fsyncs at checkpoints only: a commit survives the process dying, and never corrupts the file, but the last
# commits may be lost when the machine does. FULL fsyncs the WAL on every commit, so they survive power loss too,
# at one fsync per write.
SYNCHRONOUS = ("normal", "full")


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction on ``conn``: committed when the block ends, rolled back when it raises."""
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


class _RolledBack(Exception):
    pass


def _outcome(job: Callable[[sqlite3.Connection], Any], conn: sqlite3.Connection) -> tuple[bool, Any]:
    try:
        return True, job(conn)
    except Exception as exc:
        return False, exc


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # its caller went away; the write itself ran (or runs) regardless
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class Database:
    """One SQLite file: its owner lock, its one connection and the one thread that uses the connection."""

    def __init__(self, path: str, namespace: str, synchronous: str = "normal") -> None:
        if not _NAMESPACE.match(namespace):
            raise ValueError(
                f"invalid namespace {namespace!r}: letters, digits and underscores, not starting with a digit"
            )
        if synchronous.lower() not in SYNCHRONOUS:
            raise ValueError(f"invalid synchronous {synchronous!r}: one of {', '.join(SYNCHRONOUS)}")
        self.synchronous = synchronous.lower()
        path = os.fspath(path)
        # Resolved once, now: the working directory may change later, messages should name the real file, and a
        # symlinked spelling of the same file must map to the same lock file.
        self.path = path if path == _MEMORY else os.path.realpath(path)
        self.lock_path = self.path + ".lock"
        self.namespace = namespace
        self._users = 0
        self._guard = asyncio.Lock()
        self._executor: ThreadPoolExecutor | None = None
        # Single-statement writes waiting to be sent to the thread together (``write``), and batches sent but not
        # done; touched only on the event loop.
        self._writes: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]] = []
        self._batches = 0
        # Touched only on the worker thread.
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._file_fd: int | None = None

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
                self._send_writes()  # writes made before close() run before it, as every other call does
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
        self._send_writes()  # writes made before this call run before it
        return await asyncio.get_running_loop().run_in_executor(executor, self._call, job)

    async def write(self, job: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``job(connection)``, one write statement, on the worker thread, in call order like ``run``.

        Writes made while an earlier batch of writes is on the thread wait and then go together, in one
        transaction: one hand-over to the thread, one wake-up of the event loop and one commit (one WAL append,
        and one fsync with ``synchronous=full``) for all of them, instead of one each. Each caller still gets its
        own outcome: a statement that fails (a constraint, a ``ConflictError``) is undone alone and the others
        commit. A lone write runs as it would through ``run``, in its own implicit transaction.
        """
        if self._executor is None:
            raise RuntimeError(f"the SQLite store {self.path} is not started (or already closed)")
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._writes.append((job, future))
        if self._batches == 0:
            self._send_writes()
        return await future

    def _send_writes(self) -> None:
        if not self._writes:
            return
        batch, self._writes = self._writes, []
        executor = self._executor
        if executor is None:
            for _, future in batch:
                _settle(future, False, RuntimeError(f"the SQLite store {self.path} is closed"))
            return
        self._batches += 1
        done = asyncio.get_running_loop().run_in_executor(executor, self._write_sync, [job for job, _ in batch])
        done.add_done_callback(functools.partial(self._writes_done, batch))

    def _writes_done(
        self, batch: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]], done: asyncio.Future[Any]
    ) -> None:
        self._batches -= 1
        if done.cancelled() or done.exception() is not None:
            failure = done.exception() if not done.cancelled() else RuntimeError("the SQLite write was cancelled")
            for _, future in batch:
                _settle(future, False, failure)
        else:
            for (_, future), (ok, value) in zip(batch, done.result(), strict=True):
                _settle(future, ok, value)
        if self._batches == 0:
            self._send_writes()

    def _write_sync(self, jobs: list[Callable[[sqlite3.Connection], Any]]) -> list[tuple[bool, Any]]:
        conn = self._conn
        if conn is None:
            raise RuntimeError(f"the SQLite store {self.path} is closed")
        if len(jobs) == 1:
            return [_outcome(jobs[0], conn)]
        try:
            with transaction(conn):
                outcomes = []
                for job in jobs:
                    outcomes.append(_outcome(job, conn))
                    if not conn.in_transaction:
                        # SQLite rolled the whole transaction back (disk full, I/O error): nothing of it is stored.
                        raise _RolledBack
        except Exception:
            # Not committed: each write again on its own, so each caller hears its own outcome.
            return [_outcome(job, conn) for job in jobs]
        return outcomes

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
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            self._migrate(conn)
        except BaseException:
            # Released before the error reaches the caller, so whoever retries finds the file free.
            self._close_sync()
            raise

    def _lock(self) -> None:
        # The lock is taken before the database is opened, so a refused second process never touches the file
        # (not even to migrate it). O_CLOEXEC: a program this process execs must not inherit the lock.
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise StoreLockedError(self._locked_message(holder)) from None
        except BaseException:
            os.close(fd)
            raise
        # The lock file is named after the path; the same database reached by another name (a hard link, a bind
        # mount) has another lock file. So the database file itself is locked too: a flock belongs to the file (its
        # inode), whatever name opened it. (SQLite locks with fcntl; on Linux the two kinds of lock never meet.)
        try:
            # A new database file is created readable by its owner only (0600): it holds task content and push
            # credentials; SQLite gives the -wal and -shm files it makes the database file's permissions.
            file_fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except BaseException:
            os.close(fd)
            raise
        try:
            fcntl.flock(file_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(file_fd)
            os.close(fd)
            raise StoreLockedError(
                f"another relaykit process is already serving {self.path} under another name (a hard link or "
                "another mount of the same file); stop it or use another --store"
            ) from None
        except BaseException:
            os.close(file_fd)
            os.close(fd)
            raise
        # The holder's pid, for the message a refused process prints; informative only, the flock is the lock.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._lock_fd = fd
        self._file_fd = file_fd

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
        with transaction(conn):
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
            for statements in MIGRATIONS[current:SCHEMA_VERSION]:
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
        file_fd, self._file_fd = self._file_fd, None
        try:
            if conn is not None:
                conn.close()
        finally:
            # Released only after the connection is closed: the next owner must find the file quiescent.
            for held in (file_fd, fd):
                if held is not None:
                    fcntl.flock(held, fcntl.LOCK_UN)
                    os.close(held)
