"""Push amplification is bounded (issue 14, Build 4): one SendMessage whose agent streams 5,000 chunks used to make
5,002 webhook POSTs per config; now every state change is notified and the other events of a task are limited to
a token bucket (``push._rate.NotificationGate``: 100 per second, 1,000 deep). The outbox is counted: what is never
queued is never POSTed."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx

from relaykit import agent
from relaykit._enums import TaskState
from relaykit.backends._base import OutboxChanges
from relaykit.backends.memory import MemoryPushOutbox
from relaykit.http._app import create_app
from relaykit.push._rate import DROP, SEND, SNAPSHOT, NotificationGate
from relaykit.testing import StreamingASGITransport

CHUNKS = 5000


@agent
async def chunks(context: Any) -> Any:
    for i in range(CHUNKS):
        yield f"chunk {i}"


class CountingOutbox(MemoryPushOutbox):
    def __init__(self) -> None:
        super().__init__()
        self.added = 0

    async def commit(self, changes: OutboxChanges) -> None:
        self.added += len(changes.added)
        await super().commit(changes)


async def test_5000_chunk_stream_is_bounded_as_designed() -> None:
    outbox = CountingOutbox()
    app = create_app(chunks, store="memory", push_allow=("127.0.0.1",), push_outbox=outbox)
    await app.state.relaykit.start()
    try:
        transport = StreamingASGITransport(app)
        headers = {"A2A-Version": "1.0"}
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers, timeout=30) as c:
            message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "go"}]}
            # Nothing listens on port 9: deliveries fail and retry; only what is queued matters here.
            config = {"url": "http://127.0.0.1:9/hook"}
            t = time.monotonic()
            r = await c.post(
                "/message:send", json={"message": message, "configuration": {"taskPushNotificationConfig": config}}
            )
            elapsed = time.monotonic() - t
            assert r.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        await asyncio.wait_for(app.state.relaykit.push_sender.flush(), 10)
    finally:
        await app.state.relaykit.stop()
    bound = 1000 + 100 * elapsed + 3  # burst + refill over the stream + the state changes
    assert outbox.added <= bound, (outbox.added, elapsed)
    assert 1000 <= outbox.added < CHUNKS  # the burst was used: the stream did reach the outbox


def test_state_changes_always_pass_and_chunks_spend_tokens() -> None:
    gate = NotificationGate(rate=0.001, burst=3)
    assert gate.allow("t", TaskState.SUBMITTED)
    assert gate.allow("t", TaskState.WORKING)
    assert [gate.allow("t", None) for _ in range(5)] == [True, True, True, False, False]
    assert not gate.allow("t", TaskState.WORKING)  # same state again: an ordinary event, no token left
    assert gate.allow("t", TaskState.INPUT_REQUIRED)
    assert gate.allow("t", TaskState.COMPLETED)
    assert gate.allow("other", None)  # per task


def test_the_notification_after_a_dropped_one_is_a_snapshot() -> None:
    """Once an event was coalesced, the task's next notification must carry the task as it stands (the sender
    sends a ``{"task": ...}`` snapshot), be it a state change, a refilled token or the terminal event."""
    gate = NotificationGate(rate=0.001, burst=1)
    assert gate.admit("t", TaskState.WORKING) == SEND
    assert [gate.admit("t", None) for _ in range(3)] == [SEND, DROP, DROP]
    assert gate.admit("t", TaskState.INPUT_REQUIRED) == SNAPSHOT
    assert gate.admit("t", TaskState.WORKING) == SEND  # nothing dropped since the snapshot
    assert gate.admit("t", None) == DROP
    assert gate.admit("t", TaskState.COMPLETED) == SNAPSHOT
    assert gate.admit("t", None) == SEND  # a terminal task is forgotten: a new bucket
