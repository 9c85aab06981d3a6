"""Store URLs (CONTRACT "Store grammar"): ``memory``; ``sqlite:///rel.db``, ``sqlite:////abs.db`` or a bare
``*.db`` path; ``postgresql://…`` / ``postgres://…``. Each backend module is imported only when named.

A ``sqlite:///`` URL takes one option, ``?synchronous=normal|full`` (default ``normal``; see README "Durability")."""

from __future__ import annotations

import importlib.util

from relaykit.backends._base import PushConfigStore, TaskStore
from relaykit.backends.memory import MemoryPushConfigStore, MemoryTaskStore

__all__ = ["open_push_store", "open_store", "sqlite_path"]


def sqlite_path(url: str) -> str | None:
    """The file path a SQLite store URL names (without its options), or ``None`` if the URL is not SQLite."""
    parsed = _sqlite_url(url)
    return None if parsed is None else parsed[0]


def _sqlite_url(url: str) -> tuple[str, str] | None:
    # (path, synchronous level) of a SQLite store URL; None for another kind of store.
    if url.startswith("sqlite:///"):
        path, _, query = url[len("sqlite:///") :].partition("?")
        synchronous = "normal"
        for option in filter(None, query.split("&")):
            name, _, value = option.partition("=")
            if name != "synchronous" or value.lower() not in ("normal", "full"):
                raise ValueError(f"invalid SQLite URL option {option!r} in {url!r}: use synchronous=normal|full")
            synchronous = value.lower()
        return path, synchronous
    if url.startswith("sqlite://"):
        raise ValueError(f"invalid SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute.db")
    if "://" not in url and url.endswith(".db"):
        return url, "normal"
    return None


def open_store(url: str, *, namespace: str = "relaykit", shared: bool = False) -> TaskStore:
    """A task store for ``url`` (not started yet); ``namespace`` prefixes its tables.

    ``shared``: several replicas coordinated by the Redis bus use it (PostgreSQL only: they share its namespace
    guard, which a process on the in-process bus holds alone)."""
    if url == "memory":
        return MemoryTaskStore()
    parsed = _sqlite_url(url)
    if parsed is not None and shared:
        raise ValueError(
            "a SQLite store serves one process; replicas sharing tasks over the Redis bus need postgresql://…"
        )
    if parsed is not None:
        from relaykit.backends.sqlite import SQLiteTaskStore

        path, synchronous = parsed
        return SQLiteTaskStore(path, namespace=namespace, synchronous=synchronous)
    if url.startswith(("postgresql://", "postgres://")):
        _need_asyncpg()
        from relaykit.backends.postgres import PostgresTaskStore

        # Holds the namespace guard while started: alone with the in-process bus (it serves one process only),
        # shared by the replicas of the Redis bus; neither kind starts beside the other.
        return PostgresTaskStore(url, namespace=namespace, exclusive=not shared)
    raise ValueError(f"unknown store {url!r}: use memory, sqlite:///path.db, path.db or postgresql://…")


def open_push_store(url: str, tasks: TaskStore | None = None) -> PushConfigStore:
    """The push-config store that goes with ``url``; shares the SQLite file (and owner lock) with ``tasks``."""
    if url == "memory":
        return MemoryPushConfigStore()
    path = sqlite_path(url)
    if path is not None:
        from relaykit.backends.sqlite import SQLitePushConfigStore, SQLiteTaskStore

        return SQLitePushConfigStore(tasks if isinstance(tasks, SQLiteTaskStore) else path)
    if url.startswith(("postgresql://", "postgres://")):
        _need_asyncpg()
        from relaykit.backends.postgres import PostgresPushConfigStore, PostgresTaskStore

        # Built from the task store, it shares the task store's pool (and namespace).
        return PostgresPushConfigStore(tasks if isinstance(tasks, PostgresTaskStore) else url)
    raise ValueError(f"unknown store {url!r}")


def _need_asyncpg() -> None:
    # asyncpg is an optional dependency: say how to get it instead of failing with a bare ImportError.
    if importlib.util.find_spec("asyncpg") is None:
        raise ValueError("the PostgreSQL store needs asyncpg: pip install 'relaykit[postgres]'")
