"""The owed marker's price (``push._owed``), counted at the database driver: a task with a push config stores each
state with its marker in the state's own statement, and the outbox commit of its notifications clears it; a task
without one costs exactly the statements it cost before any push config existed (the benchmarked path).

The app runs in this event loop on real sockets (``serving``), with relaykit's ``WebhookReceiver`` as the webhook;
the statements are those the store's connection runs (SQLite's trace callback; asyncpg's calls on PostgreSQL).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from push_helpers import A2A, serving

from relaykit import StreamResponse, TaskState, agent
from relaykit.backends.sqlite import SQLiteTaskStore
from relaykit.http import create_app
from relaykit.push import DeliveryPolicy, WebhookReceiver

FAST = DeliveryPolicy(timeout=5.0, backoff=0.02, max_backoff=0.1, max_attempts=5)
WAIT = 20.0
SAMPLES = 3


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    return context.text


Statement = tuple[str, tuple[Any, ...]]  # the SQL, and its parameters (SQLite: expanded into the SQL)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, list[Statement]]]:
    """An app on a durable store, and the list its store's statements are appended to."""
    seen: list[Statement] = []
    if request.param == "sqlite":
        made = create_app(echo, store=f"sqlite:///{tmp_path / 'owed.db'}", push_allow=("127.0.0.1",), push_policy=FAST)
        yield made, seen
        return
    postgres_url = request.getfixturevalue("postgres_url")
    namespace = request.getfixturevalue("pg_namespace")
    originals: dict[str, Any] = {}

    def wrap(name: str) -> None:
        original = originals[name] = getattr(asyncpg.connection.Connection, name)

        async def counted(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            seen.append((query, args))
            return await original(self, query, *args, **kwargs)

        setattr(asyncpg.connection.Connection, name, counted)

    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        wrap(name)
    try:
        yield (
            create_app(echo, store=postgres_url, namespace=namespace, push_allow=("127.0.0.1",), push_policy=FAST),
            seen,
        )
    finally:
        for name, original in originals.items():
            setattr(asyncpg.connection.Connection, name, original)


async def _trace_sqlite(made: Any, seen: list[Statement]) -> None:
    def trace(sql: str) -> None:
        seen.append((sql, ()))

    store = made.state.relaykit.engine.store
    if isinstance(store, SQLiteTaskStore):  # its one connection, on its thread
        await store._db.run(lambda conn: conn.set_trace_callback(trace))


def _push_free(statements: list[Statement]) -> bool:
    return not any("push" in sql for sql, _ in statements)


async def _message(
    http: httpx.AsyncClient, base: str, text: str, seen: list[Statement], push: dict[str, Any] | None = None
) -> list[Statement]:
    """The statements one blocking message costs (``seen`` cleared first)."""
    body: dict[str, Any] = {"message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}}
    if push is not None:
        body["configuration"] = {"taskPushNotificationConfig": push}
    seen.clear()
    reply = await http.post(f"{base}/message:send", json=body, headers=A2A)
    statements = list(seen)
    assert reply.status_code == 200, reply.text
    assert reply.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply.text
    return statements


async def test_only_a_task_with_push_configs_pays_for_its_owed_marker(app: tuple[Any, list[Statement]]) -> None:
    made, seen = app
    told: list[StreamResponse] = []
    completed = asyncio.Event()

    def collect(event: StreamResponse) -> None:
        told.append(event)
        if event.status_update is not None and event.status_update.status.state.is_terminal:
            completed.set()

    async with serving(WebhookReceiver(collect)) as hook, serving(made) as base, httpx.AsyncClient(timeout=10) as http:
        await made.state.relaykit.start()  # (idempotent: the lifespan's start may not have run yet)
        await _trace_sqlite(made, seen)
        sender = made.state.relaykit.push_sender
        # Before any push config exists (push not even armed): what a message costs.
        before = [await _message(http, base, f"before {n}", seen) for n in range(SAMPLES)]
        # A task with a config: its COMPLETED is stored with the marker, in the statement that stores the state.
        with_config = await _message(http, base, "configured", seen, push={"id": "hook", "url": hook})
        await asyncio.wait_for(completed.wait(), WAIT)
        await asyncio.wait_for(sender.drained(), WAIT)
        seen.clear()
        # Push is armed now: a task without configs still costs what it did, and nothing of push.
        after = [await _message(http, base, f"after {n}", seen) for n in range(SAMPLES)]
    marked = [sql for sql, args in with_config if "push_owed" in sql and "COMPLETED" in f"{sql} {args}"]
    assert len(marked) == 1, with_config
    assert not marked[0].lstrip().upper().startswith("SELECT")
    cleared = [sql for sql, _ in with_config if "push_owed = NULL" in sql]
    assert cleared, with_config  # by the outbox commit that holds the notifications
    assert told[-1].status_update is not None
    # The fewest of a few messages is a message's own cost (a background loop only ever adds).
    cheapest_before, cheapest_after = min(before, key=len), min(after, key=len)
    assert _push_free(cheapest_before), cheapest_before
    assert len(cheapest_after) == len(cheapest_before), (cheapest_before, cheapest_after)
    assert _push_free(cheapest_after), cheapest_after


async def test_sqlite_a_marker_a_failed_hook_left_is_pushed_by_the_sweep(tmp_path: Path) -> None:
    """The push hook fails for a task's COMPLETED (the store is written, the outbox never gets the notification):
    the marker stays, and the sweep of the running process (every 0.1 s here, instead of its 10 s) turns it into a
    ``{"task": ...}`` snapshot the webhook receives, with no restart. Before, only the next start recovered it."""
    made = create_app(echo, store=f"sqlite:///{tmp_path / 'sweep.db'}", push_allow=("127.0.0.1",), push_policy=FAST)
    sender = made.state.relaykit.push_sender
    sender.sweep_every = 0.1
    hook = sender.on_event
    failed = asyncio.Event()

    async def failing(active: Any, seq: int, event: Any, data: bytes) -> None:
        status = getattr(event, "status", None)
        if status is not None and status.state.is_terminal and not failed.is_set():
            failed.set()
            raise RuntimeError("the push hook failed")  # the engine logs it; the COMPLETED marker is not settled
        await hook(active, seq, event, data)

    sender.on_event = failing
    told: list[StreamResponse] = []
    completed = asyncio.Event()

    def collect(event: StreamResponse) -> None:
        told.append(event)
        if event.task is not None and event.task.status.state.is_terminal:
            completed.set()

    async with serving(WebhookReceiver(collect)) as hook_url, serving(made) as base, httpx.AsyncClient(timeout=10) as c:
        await made.state.relaykit.start()
        await _message(c, base, "swept", [], push={"id": "hook", "url": hook_url})
        assert failed.is_set()
        await asyncio.wait_for(completed.wait(), WAIT)
        await asyncio.wait_for(sender.drained(), WAIT)
        store = made.state.relaykit.engine.store
        markers = await store._db.run(lambda conn: conn.execute("SELECT push_owed FROM relaykit_tasks").fetchall())
    snapshot = told[-1].task
    assert snapshot is not None
    assert snapshot.status.state is TaskState.COMPLETED
    assert snapshot.artifacts[0].parts[0].text == "swept"
    assert markers == [(None,)]  # cleared with the snapshot's commit
