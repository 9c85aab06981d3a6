"""``WireTap``: the copy of what the agent sent, over a real socket (``MiniHTTP``): SSE frames handed out in order,
once each, comments and keep-alives skipped, CRLF frames read, a non-JSON body kept as text, nothing copied past the
limit, and the bytes the client reads left as they are."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest
from client._net import MiniHTTP, Request, Response

from relaykit.inspector import _wire
from relaykit.inspector._wire import InspectorHTTP

T = 10.0


async def _frames() -> AsyncIterator[bytes]:
    yield b': keep-alive\n\nid: 1\ndata: {"kind":"task",\n'
    yield b'data: "id":"t"}\n\n'  # one frame split across chunks, two data lines
    yield b'id: 2\r\ndata: {"kind":"status-update"}\r\n\r\n'
    yield b"data: not json\n\n"


async def _big() -> AsyncIterator[bytes]:
    yield b"x" * 60  # fits the limit of the test...
    yield b"x" * 60  # ...and this does not: no copy at all, not the first 60 bytes


async def handle(request: Request) -> Response:
    if request.path == "/sse":
        return Response(headers=[("content-type", "text/event-stream")], body=_frames())
    if request.path == "/big":
        return Response(body=_big())
    return Response(headers=[("content-type", "application/json")], body=b'{"result":{"kind":"task"}}')


async def test_the_tap_copies_bodies_and_hands_out_sse_frames_once() -> None:
    server = await MiniHTTP(handle).start()
    http = InspectorHTTP(verify=ssl.create_default_context(), timeout=httpx.Timeout(T))
    try:
        async with asyncio.timeout(T):
            response = await http.get(server.url + "/json")
            assert response.json() == {"result": {"kind": "task"}}
            assert http.wire.answer() == {"result": {"kind": "task"}}
            assert server.requests[-1].headers["accept-encoding"] == "identity"
            frames = []
            async with http.stream("GET", server.url + "/sse") as streamed:
                read = b"".join([chunk async for chunk in streamed.aiter_raw()])
                while (frame := http.wire.next_frame()) is not None:
                    frames.append(frame)
            assert read.startswith(b": keep-alive")  # the client reads the bytes unchanged
            assert frames == [{"kind": "task", "id": "t"}, {"kind": "status-update"}, "not json"]
            assert http.wire.next_frame() is None
            http.wire.reset()
            assert http.wire.answer() is None
    finally:
        await http.aclose()
        await server.aclose()


async def test_nothing_is_copied_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wire, "MAX_COPY", 100)
    server = await MiniHTTP(handle).start()
    http = InspectorHTTP(verify=ssl.create_default_context(), timeout=httpx.Timeout(T))
    try:
        async with asyncio.timeout(T):
            response = await http.get(server.url + "/big")
            assert len(response.content) == 120
            assert http.wire.answer() is None
    finally:
        await http.aclose()
        await server.aclose()
