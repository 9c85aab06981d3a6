"""Gap 6 (issue 19): ``--retention`` purges push dead letters and delivery-health rows too, and counts them.

Against each real outbox (memory, a SQLite file, PostgreSQL), then through ``A2AServer.purge`` (what the retention
loop runs) on a SQLite-backed server: old dead letters and idle health rows go, fresh ones and the health of a stream
with something pending stay. A purged task's push configs go with it (memory and SQLite servers; each store's part is
in ``tests/backends/test_store_contract.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from relaykit import agent
from relaykit.assembly import assemble
from relaykit.backends._base import DeliveryOutcome, OutboxChanges, OutboxEntry, PushOutbox
from relaykit.backends.memory import MemoryPushOutbox, MemoryTaskStore
from relaykit.backends.sqlite import SQLitePushOutbox, SQLiteTaskStore
from relaykit.server import CallContext
from relaykit.types import AuthenticationInfo, Message, SendMessageRequest, Task, TaskPushNotificationConfig

OLD = 1_000_000.0  # epoch seconds, long before the cutoff
CUTOFF = 2_000_000.0
NEW = 3_000_000.0


def entry(task: str, seq: int, *, config: str = "c") -> OutboxEntry:
    return OutboxEntry(event_id=f"{task}-{config}-{seq}", task_id=task, config_id=config, seq=seq, body=b"{}")


async def fill(outbox: PushOutbox) -> None:
    """Dead letters of ``old`` (2, died long ago) and ``new`` (1, recent); health rows of ``old`` and ``quiet`` (no
    attempt since long ago: purged), ``new`` (recent) and ``busy`` (old, but still has a pending entry)."""
    old = [entry("old", 1), entry("old", 2)]
    new = [entry("new", 1)]
    await outbox.commit(OutboxChanges(added=[*old, *new, entry("busy", 1)]))
    for e in old:
        e.dead_at = OLD
    new[0].dead_at = NEW
    outcomes = [
        DeliveryOutcome(("", "anonymous", "old", "c"), ok=False, at=OLD, error="HTTP 500"),
        DeliveryOutcome(("", "anonymous", "quiet", "c"), ok=True, at=OLD),
        DeliveryOutcome(("", "anonymous", "new", "c"), ok=False, at=NEW, error="HTTP 500"),
        DeliveryOutcome(("", "anonymous", "busy", "c"), ok=False, at=OLD, error="HTTP 500"),
    ]
    await outbox.commit(OutboxChanges(dead=[*old, *new], outcomes=outcomes))


async def remaining(outbox: PushOutbox) -> dict[str, tuple[int, int, int]]:
    """Per task: (health rows, pending, dead letters)."""
    out = {}
    for task in ("old", "quiet", "new", "busy"):
        health = await outbox.health(task)
        out[task] = (
            sum(1 for h in health if h.delivered or h.failures),
            sum(h.pending for h in health),
            len(await outbox.dead_letters(task)),
        )
    return out


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def outbox(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[PushOutbox]:
    tasks: object
    if request.param == "memory":
        tasks, box = MemoryTaskStore(), MemoryPushOutbox()
    elif request.param == "sqlite":
        tasks = SQLiteTaskStore(tmp_path / "r.db")
        box = SQLitePushOutbox(tasks)
    else:
        from relaykit.backends.postgres import PostgresPushOutbox, PostgresTaskStore

        url, namespace = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_namespace")
        tasks = PostgresTaskStore(url, namespace=namespace)
        box = PostgresPushOutbox(tasks)
    await tasks.start()  # type: ignore[attr-defined]
    await box.start()
    try:
        yield box
    finally:
        await box.close()
        await tasks.close()  # type: ignore[attr-defined]


async def test_the_outbox_purges_old_dead_letters_and_idle_health(outbox: PushOutbox) -> None:
    await fill(outbox)
    assert await remaining(outbox) == {"old": (1, 0, 2), "quiet": (1, 0, 0), "new": (1, 0, 1), "busy": (1, 1, 0)}
    assert await outbox.purge(CUTOFF) == (2, 2)
    assert await remaining(outbox) == {"old": (0, 0, 0), "quiet": (0, 0, 0), "new": (1, 0, 1), "busy": (1, 1, 0)}
    assert await outbox.purge(CUTOFF) == (0, 0)


async def test_the_retention_purge_counts_tasks_dead_letters_and_health(tmp_path: Path) -> None:
    @agent
    async def echo(context: object) -> str:
        return "ok"

    server = assemble(echo, store=f"sqlite:///{tmp_path / 'server.db'}")
    await server.start()
    try:
        assert server.push_sender is not None
        await fill(server.push_sender.outbox)
        removed = await server.purge(datetime.fromtimestamp(CUTOFF, UTC))
    finally:
        await server.stop()
    assert removed == (0, 2, 2)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_the_retention_purge_removes_the_push_configs_of_the_tasks_it_purges(tmp_path: Path, store: str) -> None:
    """A push config (its token and credentials with it) goes with its task: after the purge neither the API's view
    (cached) nor the store (read again after a restart, for SQLite) has it; a task kept keeps its configs."""

    @agent
    async def echo(context: object) -> str:
        return "ok"

    url = "memory" if store == "memory" else f"sqlite:///{tmp_path / 'configs.db'}"
    server = assemble(echo, store=url)
    await server.start()
    try:
        call = CallContext()
        old = await server.engine.send(SendMessageRequest(message=Message.user("old")), call)
        kept = await server.engine.send(SendMessageRequest(message=Message.user("kept")), call)
        assert isinstance(old, Task)
        assert isinstance(kept, Task)
        configs = server.handler.push_store
        for task in (old, kept):
            for config_id in ("a", "b"):
                config = TaskPushNotificationConfig(
                    task_id=task.id,
                    id=config_id,
                    url="https://hooks.example.com/a2a",
                    token="tok-retention",
                    authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-retention"),
                )
                await configs.put(config)
        assert len(await configs.list(old.id)) == 2  # (and now cached)
        # Only the old task is older than the cutoff: the kept one's status is moved past it.
        stored = await server.engine.store.get(kept.id)
        assert stored is not None
        stored.task.status.timestamp = datetime.now(UTC) + timedelta(days=2)
        await server.engine.store.save(stored)
        removed = await server.purge(datetime.now(UTC) + timedelta(days=1))
        assert removed[0] == 1
        assert await configs.list(old.id) == []
        assert [c.id for c in await configs.list(kept.id)] == ["a", "b"]
    finally:
        await server.stop()
    if store == "sqlite":
        again = assemble(echo, store=url)
        await again.start()
        try:
            assert await again.handler.push_store.list(old.id) == []
            assert [c.id for c in await again.handler.push_store.list(kept.id)] == ["a", "b"]
        finally:
            await again.stop()


class _EarlierStore(MemoryTaskStore):
    """A custom store written against the earlier ``TaskStore`` protocol: its ``purge`` takes no ``purged=``."""

    async def purge(self, before: datetime, *, interrupted: bool = False) -> int:  # type: ignore[override]
        return await super().purge(before, interrupted=interrupted)


async def test_a_store_whose_purge_names_nothing_still_purges() -> None:
    """Retention keeps working on a custom store that cannot say which tasks it deleted (their configs stay)."""

    @agent
    async def echo(context: object) -> str:
        return "ok"

    server = assemble(echo, store=_EarlierStore())
    await server.start()
    try:
        done = await server.engine.send(SendMessageRequest(message=Message.user("old")), CallContext())
        assert isinstance(done, Task)
        removed = await server.purge(datetime.now(UTC) + timedelta(days=1))
        assert removed[0] == 1
        assert await server.engine.store.get(done.id) is None
    finally:
        await server.stop()
