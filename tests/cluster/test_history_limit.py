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
from relaykit._requests import SendMessageConfiguration, SendMessageRequest
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


GATE: asyncio.Event | None = None


async def _queued(queue: Any, count: int) -> None:
    """Until the work queue holds ``count`` entries (bounded: WAIT seconds)."""
    for _ in range(int(WAIT / 0.01)):
        if await queue.client.xlen(queue.stream) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the work queue never held {count} entries")


@relaykit.agent
async def holds(context):  # type: ignore[no-untyped-def]
    if context.text == "hold" and GATE is not None:
        await GATE.wait()
    context.requires_input("more?")


async def test_a_follow_up_that_waited_in_the_queue_is_measured_against_the_history_it_finds(
    postgres_url: str, redis_url: str, cluster_namespace: str
) -> None:
    """Two follow-ups accepted (by replica B) while the task runs on replica A both fit the history as it was then;
    they wait in the work queue, and the first one run grows the history: the second is refused when claimed
    (before, only the accepting side measured it, so queued messages could take a task past the limit)."""
    global GATE
    GATE = asyncio.Event()
    limit = 32 * 1024
    replicas = [
        create_app(
            holds, store=postgres_url, bus=redis_url, namespace=cluster_namespace, push=False, max_history_bytes=limit
        ).state.relaykit
        for _ in range(2)
    ]
    for server in replicas:
        await server.start()
    try:
        a, b = (server.engine for server in replicas)
        call = CallContext()
        first = follow_up("hold")
        first.configuration = SendMessageConfiguration(return_immediately=True)
        task = await asyncio.wait_for(a.send(first, call), WAIT)
        assert isinstance(task, Task)
        texts = ("e" * 20_000, "f" * 20_000)
        answers = [asyncio.ensure_future(b.send(follow_up(text, task.id), call)) for text in texts]
        # Both accepted (they fit the history as it is) and queued behind A's running execution.
        await _queued(b.cluster.queue, 2)
        assert not any(answer.done() for answer in answers)
        GATE.set()
        results = await asyncio.wait_for(asyncio.gather(*answers, return_exceptions=True), WAIT)
        refused = [r for r in results if isinstance(r, InvalidParamsError)]
        answered = [r for r in results if isinstance(r, Task)]
        assert len(refused) == 1, results
        assert f"limit of {limit} bytes" in refused[0].message
        assert len(answered) == 1
        stored = await a.get_task(task.id, call)
        long = [p.text for m in stored.history for p in m.parts if p.text in texts]
        assert len(long) == 1  # the history holds one of the two, and stays within the limit
    finally:
        GATE = None
        for server in replicas:
            await asyncio.wait_for(server.stop(), WAIT)
