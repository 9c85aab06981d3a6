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
    StoreLockedError,
    TaskClaims,
    TaskQuery,
    TaskRecord,
    TaskStore,
    failed_status,
)
from relaykit.backends._memory import MemoryPushConfigStore, MemoryTaskStore
from relaykit.backends._url import open_push_store, open_store


def __getattr__(name: str) -> object:
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
