"""The SSE writer groups a burst of events into a few writes, and never holds back an event its producer waits on.

A producer that awaits between events (as framework streams do: pydantic-ai takes several loop turns per delta) has
its burst sent in a few writes, every frame once and in order; a producer that publishes and then waits for the
client to have seen that event gets it flushed (no event waits for a later one).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from relaykit.http._asgi import stream_sse

WAIT = 5.0


class Feed:
    """Items a producer task publishes, read by the writer; ``pending()`` as the engine's event streams have it."""

    def __init__(self) -> None:
        self.items: deque[tuple[int, Any, bytes] | None] = deque()
        self.ready = asyncio.Event()

    def publish(self, seq: int) -> None:
        self.items.append((seq, None, f"{seq}".encode()))
        self.ready.set()

    def end(self) -> None:
        self.items.append(None)
        self.ready.set()

    def pending(self) -> int:
        return sum(1 for item in self.items if item is not None)

    def __aiter__(self) -> Feed:
        return self

    async def __anext__(self) -> tuple[int, Any, bytes]:
        while not self.items:
            self.ready.clear()
            await self.ready.wait()
        item = self.items.popleft()
        if item is None:
            raise StopAsyncIteration
        return item


async def _never() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def _frame(seq: int, data: bytes) -> bytes:
    return b"[" + data + b"]"


def _error(exc: Any) -> bytes:
    return b"error"


async def test_a_burst_goes_out_in_a_few_writes_every_frame_once_in_order() -> None:
    feed = Feed()
    writes: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            writes.append(message["body"])

    async def produce() -> None:
        for seq in range(1, 301):
            for _ in range(4):  # a framework's own hops between two deltas
                await asyncio.sleep(0)
            feed.publish(seq)
        feed.end()

    producer = asyncio.create_task(produce())
    async with asyncio.timeout(WAIT):
        await stream_sse(_never, send, (0, None, b"0"), feed, _frame, _error, keepalive=60)
        await producer
    assert b"".join(writes) == b"".join(b"[%d]" % seq for seq in range(301))
    assert len(writes) <= 30, f"{len(writes)} writes for 301 frames"


async def test_an_event_the_producer_waits_on_is_flushed() -> None:
    feed = Feed()
    seen: list[bytes] = []
    arrived = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            seen.append(message["body"])
            arrived.set()

    async def produce() -> None:
        for seq in range(1, 4):
            feed.publish(seq)
            # Like a model's next token, or an agent waiting for the client: nothing more until the client saw it.
            while b"[%d]" % seq not in b"".join(seen):
                arrived.clear()
                await arrived.wait()
        feed.end()

    producer = asyncio.create_task(produce())
    async with asyncio.timeout(WAIT):
        await stream_sse(_never, send, (0, None, b"0"), feed, _frame, _error, keepalive=60)
        await producer
    assert b"".join(seen) == b"[0][1][2][3]"
