"""Conversation state: what a framework remembers between the turns of one A2A context, kept with relaykit's tasks.

An adapter stores one opaque value per conversation: the pydantic-ai ``Conversation``, the LangGraph thread's
checkpoint, the OpenAI Agents session items and paused run, the ADK session's events. The key is the A2A context
id plus the task scope (tenant, owner) and the adapter's ``kind``, so one user never reads another's conversation
even with a guessed context id, and two frameworks never read each other's state.

Invariants:

* the state lives where the tasks live: the same SQLite file (table ``<namespace>_conversations``, through the task
  store's one connection and thread), the same PostgreSQL namespace and pool, or memory for the memory store. So it
  survives a restart exactly when the tasks do, and every replica of a scale-out deployment reads the same state;
* a ``save`` replaces the whole value atomically (one statement): after a crash the conversation is as of the last
  completed turn, never half-written;
* an adapter loads at the start of a turn and saves once at its end (after a completed or interrupted run, before
  that outcome is published), so a cancelled or failed turn leaves the conversation as it was;
* two turns of one context running at once (two tasks) are serialised per key inside one process; across replicas
  the later save wins.

The table is created on first use with ``CREATE TABLE IF NOT EXISTS`` (not through the stores' versioned migrations,
which belong to the backends): the first statement of a process pays for it, later ones don't.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from relaykit.backends._base import TaskStore
from relaykit.backends.memory import MemoryTaskStore

__all__ = ["ConversationKey", "ConversationStore", "MemoryConversationStore", "open_conversations"]

log = logging.getLogger("relaykit.adapters")


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Which conversation: the A2A context id, scoped like tasks (tenant, owner), and the adapter's kind."""

    context_id: str
    kind: str
    tenant: str = ""
    owner: str = "anonymous"


@runtime_checkable
class ConversationStore(Protocol):
    """One opaque value per conversation."""

    async def load(self, key: ConversationKey) -> bytes | None:
        """The stored value, or ``None`` for a conversation never saved."""

    async def save(self, key: ConversationKey, state: bytes) -> None:
        """Replace the value (atomically)."""

    async def delete(self, key: ConversationKey) -> bool:
        """Forget the conversation; ``True`` when something was removed."""


class MemoryConversationStore:
    """Conversations in a dict: the reference implementation, and the one that goes with the memory task store."""

    def __init__(self) -> None:
        self._values: dict[ConversationKey, bytes] = {}

    async def load(self, key: ConversationKey) -> bytes | None:
        return self._values.get(key)

    async def save(self, key: ConversationKey, state: bytes) -> None:
        self._values[key] = bytes(state)

    async def delete(self, key: ConversationKey) -> bool:
        return self._values.pop(key, None) is not None


class _SQLiteConversations:
    """``<namespace>_conversations`` in the task store's SQLite file, on its one connection and thread."""

    def __init__(self, store: Any) -> None:
        # The task store's Database (``run(job)`` on its thread, ``namespace``): the file's owner lock and WAL
        # settings are the store's, and this table is written in the same serial order as the tasks.
        self._db = store._db
        table = f"{self._db.namespace}_conversations"
        self._ready = False
        self._create = (
            f"CREATE TABLE IF NOT EXISTS {table} (tenant TEXT NOT NULL, owner TEXT NOT NULL, context_id TEXT NOT NULL, "
            "kind TEXT NOT NULL, state BLOB NOT NULL, updated_at REAL NOT NULL, "
            "PRIMARY KEY (tenant, owner, context_id, kind))"
        )
        where = "tenant = ? AND owner = ? AND context_id = ? AND kind = ?"
        self._select = f"SELECT state FROM {table} WHERE {where}"
        self._upsert = (
            f"INSERT INTO {table} (tenant, owner, context_id, kind, state, updated_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, owner, context_id, kind) DO UPDATE SET state = excluded.state, "
            "updated_at = excluded.updated_at"
        )
        self._delete = f"DELETE FROM {table} WHERE {where}"

    def _prepare(self, conn: Any) -> None:
        if not self._ready:
            conn.execute(self._create)
            self._ready = True

    async def load(self, key: ConversationKey) -> bytes | None:
        def job(conn: Any) -> bytes | None:
            self._prepare(conn)
            row = conn.execute(self._select, (key.tenant, key.owner, key.context_id, key.kind)).fetchone()
            return bytes(row[0]) if row is not None else None

        result: bytes | None = await self._db.run(job)
        return result

    async def save(self, key: ConversationKey, state: bytes) -> None:
        def job(conn: Any) -> None:
            self._prepare(conn)
            # One statement: SQLite commits it atomically (autocommit mode), a crash never leaves half of it.
            conn.execute(self._upsert, (key.tenant, key.owner, key.context_id, key.kind, state, time.time()))

        await self._db.run(job)

    async def delete(self, key: ConversationKey) -> bool:
        def job(conn: Any) -> bool:
            self._prepare(conn)
            return bool(conn.execute(self._delete, (key.tenant, key.owner, key.context_id, key.kind)).rowcount)

        result: bool = await self._db.run(job)
        return result


class _PostgresConversations:
    """``<namespace>_conversations`` in the task store's PostgreSQL namespace, on its pool."""

    def __init__(self, store: Any) -> None:
        self._db = store._db
        table = f"{self._db.namespace}_conversations"
        self._ready = False
        self._guard = asyncio.Lock()
        self._create = (
            f"CREATE TABLE IF NOT EXISTS {table} (tenant TEXT NOT NULL, owner TEXT NOT NULL, context_id TEXT NOT NULL, "
            "kind TEXT NOT NULL, state BYTEA NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
            "PRIMARY KEY (tenant, owner, context_id, kind))"
        )
        where = "tenant = $1 AND owner = $2 AND context_id = $3 AND kind = $4"
        self._select = f"SELECT state FROM {table} WHERE {where}"
        self._upsert = (
            f"INSERT INTO {table} (tenant, owner, context_id, kind, state, updated_at) VALUES ($1, $2, $3, $4, $5, $6) "
            "ON CONFLICT (tenant, owner, context_id, kind) DO UPDATE SET state = excluded.state, "
            "updated_at = excluded.updated_at"
        )
        self._delete = f"DELETE FROM {table} WHERE {where}"
        self._lock_key = f"relaykit:{table}"

    async def _prepare(self) -> None:
        if self._ready:
            return
        async with self._guard:
            if self._ready:
                return

            async def job(conn: Any) -> None:
                # Replicas starting together may race on CREATE TABLE IF NOT EXISTS (a unique violation in the
                # catalog): a transaction-scoped advisory lock orders them.
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", self._lock_key)
                    await conn.execute(self._create)

            await self._db.run(job)
            self._ready = True

    async def load(self, key: ConversationKey) -> bytes | None:
        await self._prepare()

        async def job(conn: Any) -> Any:
            return await conn.fetchval(self._select, key.tenant, key.owner, key.context_id, key.kind)

        value = await self._db.run(job)
        return bytes(value) if value is not None else None

    async def save(self, key: ConversationKey, state: bytes) -> None:
        await self._prepare()

        async def job(conn: Any) -> None:
            await conn.execute(self._upsert, key.tenant, key.owner, key.context_id, key.kind, state, time.time())

        await self._db.run(job)

    async def delete(self, key: ConversationKey) -> bool:
        await self._prepare()

        async def job(conn: Any) -> str:
            done: str = await conn.execute(self._delete, key.tenant, key.owner, key.context_id, key.kind)
            return done

        status: str = await self._db.run(job)
        return status.endswith(" 1")


def open_conversations(tasks: TaskStore) -> ConversationStore:
    """The conversation store that lives with ``tasks``: the same SQLite file, PostgreSQL namespace, or memory.

    Recognised by the store's class name (no backend module is imported here). Other stores get a memory
    conversation store, with a warning: conversations then do not survive a restart.

    >>> from relaykit.backends import MemoryTaskStore
    >>> type(open_conversations(MemoryTaskStore())).__name__
    'MemoryConversationStore'
    """
    kind = type(tasks).__name__
    if kind == "SQLiteTaskStore" and hasattr(tasks, "_db"):
        return _SQLiteConversations(tasks)
    if kind == "PostgresTaskStore" and hasattr(tasks, "_db"):
        return _PostgresConversations(tasks)
    if not isinstance(tasks, MemoryTaskStore):
        log.warning("%s has no conversation table: framework conversations are kept in memory", kind)
    return MemoryConversationStore()
