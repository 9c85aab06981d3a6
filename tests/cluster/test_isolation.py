"""Scale-out keeps one owner's tasks from another, also through the idempotency window and the per-task locks.

One replica in-process on the test PostgreSQL and Redis, two callers (``alice``, ``bob``: the owner keys every task
is scoped by).

* The idempotency key of a message (tenant, owner, scope, messageId) once took ``taskId or contextId`` as its scope:
  Bob, knowing Alice's task id T and the messageId M of her message, sent at once a continuation ``{taskId: T,
  messageId: M}`` and a new message ``{contextId: T, messageId: M}``. Both mapped to one key; whichever came second
  was served as a repeat of the first: the new message with Alice's execution (her task, her text), or the
  continuation with Bob's own new task instead of TaskNotFound.
* ``Cluster._claim`` made a lock per task id named in a continuation, kept for good unless this process came to hold
  the task: every SendMessage naming an unknown (or someone else's) task left one behind.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit
from relaykit._errors import TaskNotFoundError
from relaykit._requests import SendMessageConfiguration, SendMessageRequest
from relaykit._types import Message, Task
from relaykit.http import create_app
from relaykit.server import CallContext

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(60)]

WAIT = 5.0
ALICE = CallContext(user="alice")
BOB = CallContext(user="bob")


@relaykit.agent
async def parrot(context):  # type: ignore[no-untyped-def]
    context.requires_input(f"you said {context.text}")


@pytest.fixture
async def replica(postgres_url: str, redis_url: str, cluster_namespace: str) -> AsyncIterator[Any]:
    app = create_app(parrot, store=postgres_url, bus=redis_url, namespace=cluster_namespace, push=False, grace=1.0)
    server = app.state.relaykit
    await server.start()
    try:
        yield server
    finally:
        stopping = asyncio.ensure_future(server.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10.0)
        if not done:
            server.engine.bus._reader.cancel()  # as tests/cluster/test_sweeper_race.py
        await asyncio.wait_for(stopping, 10.0)


async def _bob_send(engine: Any, message: Message) -> bytes | Message:
    request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(return_immediately=True))
    return await asyncio.wait_for(engine.send_raw(request, BOB), WAIT)  # type: ignore[no-any-return]


async def _bob_stream(engine: Any, message: Message) -> bytes:
    async def read() -> bytes:
        stream = engine.stream(SendMessageRequest(message=message), BOB)
        return b"\n".join([data async for _seq, _event, data in stream])

    return await asyncio.wait_for(read(), WAIT)


async def test_a_continuation_and_a_new_message_under_another_owners_ids_get_nothing_of_hers(replica: Any) -> None:
    engine = replica.engine
    bobs_tasks: set[str] = set()
    for attempt in range(8):
        # Alice starts a task (its events, her text among them, are in the task's log).
        secret = f"alice-secret-{attempt}"
        mine = Message.user(secret)
        request = SendMessageRequest(message=mine, configuration=SendMessageConfiguration(return_immediately=True))
        task_id = Task.model_validate_json(await asyncio.wait_for(engine.send_raw(request, ALICE), WAIT)).id
        message_id = mine.message_id
        # Bob, who knows both ids, sends both messages at once (in both orders, blocking and streaming).
        continuation = _bob_send(engine, Message.user("bob", task_id=task_id, message_id=message_id))
        fresh_message = Message.user("bob", context_id=task_id, message_id=message_id)
        fresh = _bob_stream(engine, fresh_message) if attempt % 4 >= 2 else _bob_send(engine, fresh_message)
        pair = [continuation, fresh] if attempt % 2 == 0 else [fresh, continuation]
        results = await asyncio.gather(*pair, return_exceptions=True)
        got_continuation, got_fresh = results if attempt % 2 == 0 else results[::-1]

        assert isinstance(got_continuation, TaskNotFoundError), got_continuation
        assert isinstance(got_fresh, bytes), got_fresh
        assert secret.encode() not in got_fresh
        # Nothing but Bob's own new task, in the context he named.
        events = [json.loads(line) for line in got_fresh.splitlines()]
        if attempt % 4 < 2:
            events = [{"task": events[0]}]
        ids = {body.get("taskId") or body["id"] for event in events for body in event.values()}
        assert task_id not in ids, events
        (bobs,) = ids
        record = await engine.store.get(bobs, tenant="", owner="bob")
        assert record is not None
        assert record.task.context_id == task_id
        bobs_tasks.add(bobs)
    assert len(bobs_tasks) == 8


async def test_a_repeated_continuation_is_served_only_for_a_task_its_caller_can_see(replica: Any) -> None:
    """Whatever the key of a continuation holds (a first copy's, written before its task was looked up, or a reply
    recorded for it), a repeat that names a task its caller cannot see gets TaskNotFound, and nothing of the task."""
    engine = replica.engine
    mine = Message.user("alice-secret")
    request = SendMessageRequest(message=mine, configuration=SendMessageConfiguration(return_immediately=True))
    task_id = Task.model_validate_json(await asyncio.wait_for(engine.send_raw(request, ALICE), WAIT)).id
    queue = engine.cluster.queue
    held = {"m-task": {"t": "another-task"}, "m-reply": {"m": Message.agent("recorded").to_json().decode()}}
    for message_id, value in held.items():
        key = queue.idem_key("", "bob", task_id, "", message_id)
        assert await queue.remember(key, json.dumps(value), 60.0) is None
        try:
            for repeat in (_bob_send, _bob_stream):
                with pytest.raises(TaskNotFoundError):
                    await repeat(engine, Message.user("bob", task_id=task_id, message_id=message_id))
        finally:
            await queue.drop(key)


async def test_sends_naming_unknown_tasks_leave_no_lock_behind(replica: Any) -> None:
    engine = replica.engine
    cluster = engine.cluster
    # Alice's task: to Bob it does not exist either.
    request = SendMessageRequest(message=Message.user("hello"))
    alices = Task.model_validate_json(await asyncio.wait_for(engine.send_raw(request, ALICE), WAIT)).id
    named = [alices, *(f"no-such-task-{i}" for i in range(40))]
    # Several at once per id, so that some wait for the lock another holds.
    sends = [_bob_send(engine, Message.user("hi", task_id=task_id)) for task_id in named for _ in range(2)]
    results = await asyncio.gather(*sends, return_exceptions=True)
    assert all(isinstance(result, TaskNotFoundError) for result in results), results
    assert cluster._locks == {}
