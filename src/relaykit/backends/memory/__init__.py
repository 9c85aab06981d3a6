"""The in-memory engine: the reference stores (``_stores``) and the single-process event bus (``_bus``); nothing
survives the process.

Always imported with ``relaykit.backends`` (it has no optional dependency).
"""

from relaykit.backends.memory._bus import LocalEventBus
from relaykit.backends.memory._stores import MemoryPushConfigStore, MemoryPushOutbox, MemoryTaskStore

__all__ = ["LocalEventBus", "MemoryPushConfigStore", "MemoryPushOutbox", "MemoryTaskStore"]
