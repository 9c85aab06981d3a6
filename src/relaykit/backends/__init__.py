"""Storage backends behind small interfaces: memory (reference), SQLite (embedded default), PostgreSQL.

Layout: what every engine shares sits here (``_base`` the interfaces and shared types, ``_bus`` the event-bus
interface and its taps, ``_handle``, ``_paging``, ``_url``); each engine is a subpackage (``memory``, ``sqlite``,
``postgres``, ``redis``) that imports only those and its own modules. ``postgres`` (asyncpg) and ``redis`` are
imported only when used.

>>> from relaykit.backends import MemoryTaskStore, open_store
>>> isinstance(open_store("memory"), MemoryTaskStore)
True
"""

from relaykit.backends._base import (
    Claim,
    ConflictError,
    ListPage,
    Orphan,
    PageTokenError,
    PushConfigStore,
    StoreLockedError,
    TaskClaims,
    TaskQuery,
    TaskRecord,
    TaskStore,
    failed_status,
)
from relaykit.backends._url import open_push_store, open_store
from relaykit.backends.memory import MemoryPushConfigStore, MemoryTaskStore


def __getattr__(name: str) -> object:
    # The PostgreSQL store needs asyncpg (the "postgres" extra): imported only when named.
    if name in ("PostgresPushConfigStore", "PostgresTaskStore", "StoreInUseError"):
        from relaykit.backends import postgres

        return getattr(postgres, name)
    raise AttributeError(name)


__all__ = [
    "Claim",
    "ConflictError",
    "ListPage",
    "MemoryPushConfigStore",
    "MemoryTaskStore",
    "Orphan",
    "PageTokenError",
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
