"""Scale-out keeps ``max_history_bytes`` too: the accepting side refuses a follow-up that would take a task's history
past it (``accept_continuation``, shared with the in-process runner), before anything is stored or queued.

One replica in-process on the test PostgreSQL and Redis; an agent that always asks for more; the answers to it run
where they are accepted (``Front._continue_here``), the claim's stored task measured.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit
from relaykit._enums import Role, TaskState
from relaykit._errors import InvalidParamsError
from relaykit._requests import SendMessageRequest
from relaykit._types import Message, Part, Task
from relaykit.http import create_app
from relaykit.server import CallContext

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(60)]

WAIT = 8.0
LIMIT = 64 * 1024


@relaykit.agent
async def asks(context):  # type: ignore[no-untyped-def]
    context.requires_input("more?")


@pytest.fixture
async def replica(postgres_url: str, redis_url: str, cluster_namespace: str) -> AsyncIterator[Any]:
    app = create_app(
        asks, store=postgres_url, bus=redis_url, namespace=cluster_namespace, push=False, max_history_bytes=LIMIT
    )
    server = app.state.relaykit
    await server.start()
    try:
        yield server
    finally:
        await asyncio.wait_for(server.stop(), WAIT)


def follow_up(text: str, task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            message_id=f"m-{text[:1]}-{len(text)}", role=Role.USER, parts=[Part(text=text)], task_id=task_id
        )
    )


async def test_a_follow_up_past_the_history_limit_is_refused_where_accepted(replica: Any) -> None:
    engine = replica.engine
    call = CallContext()
    task = await asyncio.wait_for(engine.send(follow_up("a" * 20_000), call), WAIT)
    assert isinstance(task, Task)
    for text in ("b" * 20_000, "c" * 20_000):
        task = await asyncio.wait_for(engine.send(follow_up(text, task.id), call), WAIT)
        assert task.status.state is TaskState.INPUT_REQUIRED
    before = await engine.get_task(task.id, call)

    with pytest.raises(InvalidParamsError, match=f"limit of {LIMIT} bytes"):
        await asyncio.wait_for(engine.send(follow_up("d" * 20_000, task.id), call), WAIT)
    assert await engine.get_task(task.id, call) == before
    answered = await asyncio.wait_for(engine.send(follow_up("short", task.id), call), WAIT)
    assert answered.status.state is TaskState.INPUT_REQUIRED
    assert len(answered.history) == len(before.history) + 2
