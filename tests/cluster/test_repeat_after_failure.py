"""A repeat of a message whose first copy failed before it ran does not wait for ever (scale-out).

A new message's idempotency key is written first (so that a concurrent copy finds it), then the message is checked,
stored and run or queued; a first copy refused after that (the shared quotas, a store or queue error) drops its key.
A repeat that found the key in between waited on the task's event log for an execution that never comes: with no
``send_timeout`` (the default), for ever. Now, while it waits for the first event, it asks every ``requeue_after``
whether the key still holds what it found: gone (and nothing stored) is a retryable UNAVAILABLE; a reply recorded
meanwhile is that reply.

One replica in-process on the test PostgreSQL and Redis; the failed first copy is played by writing its key by hand
(its fresh task id is never stored) and dropping it, as ``Front._submit`` does when it fails.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit
from relaykit._errors import ServiceUnavailableError
from relaykit._requests import SendMessageRequest
from relaykit._types import Message
from relaykit.http import create_app
from relaykit.server import CallContext

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(60)]

WAIT = 5.0
BOB = CallContext(user="bob")


@relaykit.agent
async def echo(context):  # type: ignore[no-untyped-def]
    return context.text


@pytest.fixture
async def engine(postgres_url: str, redis_url: str, cluster_namespace: str) -> AsyncIterator[Any]:
    app = create_app(echo, store=postgres_url, bus=redis_url, namespace=cluster_namespace, push=False, grace=1.0)
    server = app.state.relaykit
    await server.start()
    server.engine.cluster.requeue_after = 0.2  # how often a waiting repeat asks (at least 2 s in production)
    try:
        yield server.engine
    finally:
        stopping = asyncio.ensure_future(server.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10.0)
        if not done:
            server.engine.bus._reader.cancel()  # as tests/cluster/test_sweeper_race.py
        await asyncio.wait_for(stopping, 10.0)


async def _found(queue: Any) -> asyncio.Event:
    """Set once the next ``remember`` has answered: the repeat then holds what it found in the key."""
    answered = asyncio.Event()
    remember = queue.remember

    async def remembering(*args: Any, **kwargs: Any) -> Any:
        try:
            return await remember(*args, **kwargs)
        finally:
            answered.set()

    queue.remember = remembering
    return answered


async def _repeat(engine: Any, message_id: str, streaming: bool) -> Any:
    message = Message.user("again", message_id=message_id)
    if streaming:
        return [event async for _seq, event, _data in engine.stream(SendMessageRequest(message=message), BOB)]
    return await engine.send_raw(SendMessageRequest(message=message), BOB)


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_repeat_of_a_failed_first_copy_is_told_to_send_again(engine: Any, streaming: bool) -> None:
    queue = engine.cluster.queue
    message_id = f"m-failed-{streaming}"
    key = queue.idem_key("", "bob", "", "", message_id)
    assert await queue.remember(key, json.dumps({"t": "never-stored"}), 60.0) is None
    found = await _found(queue)
    repeat = asyncio.ensure_future(_repeat(engine, message_id, streaming))
    try:
        await asyncio.wait_for(found.wait(), WAIT)  # the repeat found the first copy's key
        await queue.drop(key)  # the first copy failed
        with pytest.raises(ServiceUnavailableError, match="send it again"):
            await asyncio.wait_for(repeat, WAIT)
    finally:
        repeat.cancel()
        await queue.drop(key)


async def test_a_repeat_gets_the_reply_recorded_meanwhile(engine: Any) -> None:
    queue = engine.cluster.queue
    key = queue.idem_key("", "bob", "", "", "m-replied")
    assert await queue.remember(key, json.dumps({"t": "never-stored"}), 60.0) is None
    found = await _found(queue)
    repeat = asyncio.ensure_future(_repeat(engine, "m-replied", False))
    try:
        await asyncio.wait_for(found.wait(), WAIT)
        reply = Message.agent("the first copy's reply")
        await queue.update(key, json.dumps({"m": reply.to_json().decode()}), 60.0)
        got = await asyncio.wait_for(repeat, WAIT)
        assert isinstance(got, Message)
        assert got.message_id == reply.message_id
    finally:
        repeat.cancel()
        await queue.drop(key)
