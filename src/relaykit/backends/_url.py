"""Store URLs (CONTRACT "Store grammar"): ``memory``; ``sqlite:///rel.db``, ``sqlite:////abs.db`` or a bare
``*.db`` path; ``postgresql://…`` / ``postgres://…``. Each backend module is imported only when named."""

from __future__ import annotations

from relaykit.backends._base import PushConfigStore, TaskStore
from relaykit.backends._memory import MemoryPushConfigStore, MemoryTaskStore

__all__ = ["open_push_store", "open_store", "sqlite_path"]


def sqlite_path(url: str) -> str | None:
    """The file path a SQLite store URL names, or ``None`` if the URL is not SQLite."""
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :]
    if url.startswith("sqlite://"):
        raise ValueError(f"invalid SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute.db")
    if "://" not in url and url.endswith(".db"):
        return url
    return None


def open_store(url: str, *, namespace: str = "relaykit") -> TaskStore:
    """A task store for ``url`` (not started yet); ``namespace`` prefixes its tables."""
    if url == "memory":
        return MemoryTaskStore()
    path = sqlite_path(url)
    if path is not None:
        from relaykit.backends._sqlite import SQLiteTaskStore

        return SQLiteTaskStore(path, namespace=namespace)
    if url.startswith(("postgresql://", "postgres://")):
        raise ValueError("the PostgreSQL store is not available yet in this version of relaykit")
    raise ValueError(f"unknown store {url!r}: use memory, sqlite:///path.db, path.db or postgresql://…")


def open_push_store(url: str, tasks: TaskStore | None = None) -> PushConfigStore:
    """The push-config store that goes with ``url``; shares the SQLite file (and owner lock) with ``tasks``."""
    if url == "memory":
        return MemoryPushConfigStore()
    path = sqlite_path(url)
    if path is not None:
        from relaykit.backends._sqlite import SQLitePushConfigStore, SQLiteTaskStore

        return SQLitePushConfigStore(tasks if isinstance(tasks, SQLiteTaskStore) else path)
    raise ValueError(f"unknown store {url!r}")
