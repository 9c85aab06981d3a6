"""Storage backends behind small interfaces: memory (reference), SQLite (embedded default), PostgreSQL.

>>> from relaykit.backends import MemoryTaskStore, open_store
>>> isinstance(open_store("memory"), MemoryTaskStore)
True
"""

from relaykit.backends._base import (
    Claim,
    ConflictError,
    ListPage,
    Orphan,
    PushConfigStore,
    TaskClaims,
    TaskQuery,
    TaskRecord,
    TaskStore,
)
from relaykit.backends._memory import MemoryPushConfigStore, MemoryTaskStore, failed_status
from relaykit.backends._url import open_push_store, open_store


def __getattr__(name: str) -> object:
    # StoreLockedError lives in the SQLite module, which is imported only when a SQLite store is used.
    if name == "StoreLockedError":
        from relaykit.backends._sqlite import StoreLockedError

        return StoreLockedError
    # The PostgreSQL store needs asyncpg (the "postgres" extra): imported only when named.
    if name in ("PostgresPushConfigStore", "PostgresTaskStore", "StoreInUseError"):
        from relaykit.backends import _postgres

        return getattr(_postgres, name)
    raise AttributeError(name)


__all__ = [
    "Claim",
    "ConflictError",
    "ListPage",
    "MemoryPushConfigStore",
    "MemoryTaskStore",
    "Orphan",
    "PostgresPushConfigStore",
    "PostgresTaskStore",
    "PushConfigStore",
    "StoreInUseError",
    "StoreLockedError",
    "TaskClaims",
    "TaskQuery",
    "TaskRecord",
    "TaskStore",
    "failed_status",
    "open_push_store",
    "open_store",
]
