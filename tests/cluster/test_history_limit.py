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
from relaykit.backends.redis import WorkItem
from relaykit.http import create_app
from relaykit.server import CallContext
from relaykit.server._front import encode_call, encode_request

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


async def test_a_follow_up_that_waited_in_the_queue_is_measured_against_the_history_it_finds(replica: Any) -> None:
    """A follow-up accepted while the history had room, then queued (its task was busy elsewhere), is measured again
    when a worker claims it: the messages run meanwhile may have grown the history past what it leaves room for.
    Before, only the accepting side measured it, so the messages waiting in the queue could each take a task past
    the limit. (The queue entry is built here as the accepting replica builds it, the accept having been passed.)"""
    engine = replica.engine
    cluster = engine.cluster
    call = CallContext()
    task = await asyncio.wait_for(engine.send(follow_up("a" * 20_000), call), WAIT)
    assert isinstance(task, Task)
    # Accepted now (20 kB and 20 kB fit in 64 kB), but queued: it runs after the next two.
    waiting = follow_up("z" * 20_000, task.id)
    for text in ("b" * 20_000, "c" * 20_000):
        task = await asyncio.wait_for(engine.send(follow_up(text, task.id), call), WAIT)
        assert task.status.state is TaskState.INPUT_REQUIRED
    before = await engine.get_task(task.id, call)
    item = WorkItem(task.id, "", call.user, encode_request(waiting), encode_call(call), False)
    tap, _ = await cluster.bus.open(task.id, execution=waiting.message.message_id)
    try:
        pending = await asyncio.wait_for(cluster._admit(item, waiting, call, waiting.message.message_id), WAIT)
        assert pending is None  # not run: refused
        events = engine._follow(tap, until_terminal=False, tenant="", owner=call.user)
        _seq, told, _data = await asyncio.wait_for(anext(events), WAIT)  # the caller, waiting on the log, is told why
        assert isinstance(told, InvalidParamsError)
        assert f"limit of {LIMIT} bytes" in told.message
    finally:
        cluster.bus.close_tap(tap)
    assert await engine.get_task(task.id, call) == before
    assert await cluster.store.claimant(task.id) is None  # and the claim is given back
