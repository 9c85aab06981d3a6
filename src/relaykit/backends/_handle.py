"""Stores that share one database handle (a SQLite file and its thread, a PostgreSQL pool) count their users on it:
the handle opens with its first started store and closes with its last."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

__all__ = ["AttachedStore", "SharedHandle"]


class SharedHandle(Protocol):
    """A reference-counted database handle."""

    async def acquire(self) -> None:
        """Open on first use; count one more user."""

    async def release(self) -> None:
        """Count one user less; close with the last."""


H = TypeVar("H", bound=SharedHandle)


class AttachedStore(Generic[H]):
    """``start()`` / ``close()`` of a store attached to a ``SharedHandle`` (idempotent both ways)."""

    _db: H
    _started: bool = False

    async def start(self) -> None:
        """Attach to the shared handle (opening it if this is its first user)."""
        if not self._started:
            await self._db.acquire()
            self._started = True

    async def close(self) -> None:
        """Detach (closing the handle if this was its last user)."""
        if self._started:
            self._started = False
            await self._db.release()
