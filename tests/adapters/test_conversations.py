"""The conversation store contract, run against every store it lives with: memory, SQLite, PostgreSQL.

A value is kept per (context, kind, tenant, owner); a save replaces it; scopes and kinds never see each other's; the
SQLite and PostgreSQL ones live in the task store's own file / namespace and survive reopening it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from relaykit.adapters import ConversationKey, MemoryConversationStore, open_conversations
from relaykit.backends import MemoryTaskStore


async def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any]]:
    store = MemoryTaskStore()
    return store, lambda: store


async def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any]]:
    from relaykit.backends.sqlite import SQLiteTaskStore

    path = str(tmp_path / "relaykit.db")
    return SQLiteTaskStore(path), lambda: SQLiteTaskStore(path)


async def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any]]:
    url = request.getfixturevalue("postgres_url")
    namespace = request.getfixturevalue("pg_namespace")
    from relaykit.backends.postgres import PostgresTaskStore

    return PostgresTaskStore(url, namespace=namespace), lambda: PostgresTaskStore(url, namespace=namespace)


async def _opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Callable[[], Any]]]:
    store, reopen = await request.param(tmp_path, request)
    await store.start()
    try:
        yield store, reopen
    finally:
        await store.close()


_POSTGRES = pytest.param(_postgres, marks=pytest.mark.postgres)


@pytest.fixture(params=[_memory, _sqlite, _POSTGRES], ids=["memory", "sqlite", "postgres"])
async def tasks(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Callable[[], Any]]]:
    async for opened in _opened(request, tmp_path):
        yield opened


@pytest.fixture(params=[_sqlite, _POSTGRES], ids=["sqlite", "postgres"])
async def durable_tasks(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Callable[[], Any]]]:
    """The stores that keep conversations across a restart (memory does not, by design)."""
    async for opened in _opened(request, tmp_path):
        yield opened


KEY = ConversationKey("ctx-1", "pydantic-ai", "acme", "alice")


async def test_save_load_replace_delete(tasks: tuple[Any, Callable[[], Any]]) -> None:
    conversations = open_conversations(tasks[0])
    assert await conversations.load(KEY) is None
    await conversations.save(KEY, b"one")
    assert await conversations.load(KEY) == b"one"
    await conversations.save(KEY, b"two")
    assert await conversations.load(KEY) == b"two"
    assert await conversations.delete(KEY) is True
    assert await conversations.load(KEY) is None
    assert await conversations.delete(KEY) is False


async def test_scopes_and_kinds_are_separate(tasks: tuple[Any, Callable[[], Any]]) -> None:
    conversations = open_conversations(tasks[0])
    await conversations.save(KEY, b"alice's")
    others = [
        ConversationKey("ctx-1", "pydantic-ai", "acme", "mallory"),  # another principal, same context id
        ConversationKey("ctx-1", "pydantic-ai", "other", "alice"),  # another tenant
        ConversationKey("ctx-1", "langgraph", "acme", "alice"),  # another framework
        ConversationKey("ctx-2", "pydantic-ai", "acme", "alice"),  # another context
    ]
    for key in others:
        assert await conversations.load(key) is None, key
    assert await conversations.load(KEY) == b"alice's"


async def test_survives_reopening_the_store(durable_tasks: tuple[Any, Callable[[], Any]]) -> None:
    store, reopen = durable_tasks
    await open_conversations(store).save(KEY, b"\x00binary\xff")
    await store.close()
    again = reopen()
    await again.start()
    try:
        assert await open_conversations(again).load(KEY) == b"\x00binary\xff"
    finally:
        await again.close()
    await store.start()  # the fixture closes it


def test_kinds_of_store() -> None:
    assert isinstance(open_conversations(MemoryTaskStore()), MemoryConversationStore)
