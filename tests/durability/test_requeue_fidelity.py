"""Gap 4 (issue 19): a queue entry the sweeper re-creates from the store equals the original, so the agent gets the
request as it was sent: configuration (returnImmediately, historyLength, an inline push config), metadata,
requested extensions, forwarded headers.

Real PostgreSQL and Redis: an API-only replica accepts a message; its queue entry is then lost (XDEL, as a Redis
restart without persistence would lose it); a worker replica's sweeper finds the unstarted task and runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from relaykit._enums import Role, TaskState
from relaykit._requests import SendMessageConfiguration, SendMessageRequest
from relaykit._types import Message, Part, TaskPushNotificationConfig
from relaykit.http import create_app
from relaykit.server import CallContext, FunctionAgent
from relaykit.server._front import requeued

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(60)]

WAIT = 15.0


class Recording(FunctionAgent):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []
        super().__init__(self.run)

    async def run(self, context: Any) -> str:
        call = context.call
        self.seen.append(
            (
                context.message.message_id,
                context.message.metadata,
                context.configuration,
                context.metadata,
                sorted(call.requested_extensions),
                call.headers.get("x-trace"),
            )
        )
        return "ok"


@contextlib.asynccontextmanager
async def replica(agent: Any, postgres_url: str, redis_url: str, namespace: str, **options: Any) -> AsyncIterator[Any]:
    app = create_app(agent, store=postgres_url, bus=redis_url, namespace=namespace, push=False, grace=1.0, **options)
    server = app.state.relaykit
    await server.start()
    try:
        yield server
    finally:
        await asyncio.wait_for(server.stop(), 15.0)


async def test_a_lost_entry_is_recreated_as_it_was_sent(
    postgres_url: str, redis_url: str, cluster_namespace: str
) -> None:
    agent = Recording()
    request = SendMessageRequest(
        message=Message(message_id="m-requeue", role=Role.USER, parts=[Part(text="hi")], metadata={"origin": "test"}),
        configuration=SendMessageConfiguration(
            return_immediately=True,
            history_length=3,
            task_push_notification_config=TaskPushNotificationConfig(url="https://hooks.example/x", token="tk"),
        ),
        metadata={"trace": "abc"},
    )
    call = CallContext(
        user="alice", requested_extensions=frozenset({"https://ext.example/a"}), headers={"x-trace": "t-1"}
    )
    expected = (
        "m-requeue",
        {"origin": "test"},
        request.configuration.model_copy(deep=True),  # type: ignore[union-attr]
        {"trace": "abc"},
        ["https://ext.example/a"],
        "t-1",
    )
    async with replica(agent, postgres_url, redis_url, cluster_namespace, worker=False) as api:
        cluster = api.engine.cluster
        tap, task_id, _key, _repeat, _original, item, _pending = await cluster._submit(request, call, streaming=False)
        cluster.bus.close_tap(tap)
        original = dataclasses.replace(item, entry_id=b"")
        # The entry is lost.
        assert await cluster.queue.client.xdel(cluster.queue.stream, item.entry_id) == 1
        # What the store holds re-creates it exactly (read through a claim by a worker that is not alive, released).
        claim = await cluster.store.claim(task_id, "probe", tenant="", owner="alice")
        assert requeued(claim.record, fresh=True) == original
        await cluster.store.release(task_id, "probe")
    started = time.monotonic()
    async with replica(agent, postgres_url, redis_url, cluster_namespace, lease=1.0, unstarted_after=0.5) as worker:
        deadline = time.monotonic() + WAIT
        while (record := await worker.engine.store.get(task_id, owner="alice")).task.status.state is not (
            TaskState.COMPLETED
        ):
            assert time.monotonic() < deadline, record.task.status
            await asyncio.sleep(0.1)
    assert agent.seen == [expected]
    assert time.monotonic() - started < WAIT
