"""The in-memory engine: the reference stores (``_stores``); nothing survives the process.

Always imported with ``relaykit.backends`` (it has no optional dependency).
"""

from relaykit.backends.memory._stores import MemoryPushConfigStore, MemoryPushOutbox, MemoryTaskStore

__all__ = ["MemoryPushConfigStore", "MemoryPushOutbox", "MemoryTaskStore"]
