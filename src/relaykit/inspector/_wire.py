"""The agent's answers as they came over the wire, next to what relaykit's client decoded from them.

``WireTap`` is the HTTP transport under one inspector request's HTTP client: it copies the body of every response as
the client reads it. ``_calls`` then gives the page the JSON the agent sent (a JSON-RPC envelope, a REST body, the
``data`` of each SSE frame) beside the decoded 1.0 object; for a 0.3 session that is the 0.3 shape (``kind``,
lower-case states), which the codec turned into 1.0 for the client.

Invariants:

* a tap belongs to one inspector request (one HTTP client, used by one call at a time), so "the latest response" is
  the response of the call being made; a new response restarts the copy;
* the copy is of the decoded body: the tap asks for ``Accept-Encoding: identity`` so what it keeps is the JSON;
* SSE frames are handed out in order, each once: the client yields an event after reading its frame, so the frame
  for the event just yielded is always complete in the copy;
* a body (or, in a stream, the part not yet handed out as frames) larger than ``MAX_COPY`` stops the copy for that
  response (never a truncated or spliced one): the page then shows the decoded objects only;
* the tap never changes what the client reads, and a body that is not JSON is given as text.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["InspectorHTTP", "WireTap"]

_FRAME_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
MAX_COPY = 4 * 1024 * 1024  # bytes of one response kept; past that the page shows the decoded objects only


class _Tee(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, tap: WireTap, body: bytearray) -> None:
        self.inner = inner
        self.tap = tap
        self.body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            # Past the limit the copy stops for good: a later chunk appended after a skipped one would splice frames.
            if self.tap.body is self.body and not self.tap.full:
                if len(self.body) + len(chunk) > MAX_COPY:
                    self.tap.full = True
                else:
                    self.body.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class WireTap(httpx.AsyncBaseTransport):
    """An HTTP transport that keeps a copy of the latest response body."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.body = bytearray()
        self.full = False  # the latest response outgrew MAX_COPY: no copy of it is given

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self.inner.handle_async_request(request)
        self.reset()
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, self, self.body),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    def reset(self) -> None:
        """Forget the latest response (called before a call: a call that gets no response has no wire copy)."""
        self.body = bytearray()
        self.full = False

    def answer(self) -> Any:
        """The latest response body: its JSON, or its text, or None when there was none."""
        return _json(bytes(self.body)) if self.body and not self.full else None

    def next_frame(self) -> Any:
        """The ``data`` of the next complete SSE frame not yet handed out (None when there is none)."""
        while not self.full:
            found = _FRAME_END.search(self.body)
            if found is None:
                return None
            frame = bytes(self.body[: found.start()])
            # Frames handed out are dropped (in place: the tee keeps writing to this buffer), so a long stream's copy
            # holds only what is not yet handed out.
            del self.body[: found.end()]
            data = [line[5:].removeprefix(b" ") for line in frame.splitlines() if line.startswith(b"data:")]
            if data:  # comments and keep-alives carry no event
                return _json(b"\n".join(data))
        return None


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


class InspectorHTTP(httpx.AsyncClient):
    """The HTTP client of one inspector request, over a ``WireTap`` (``wire``)."""

    def __init__(self, *, verify: ssl.SSLContext, timeout: httpx.Timeout) -> None:
        self.wire = WireTap(httpx.AsyncHTTPTransport(verify=verify))
        super().__init__(transport=self.wire, timeout=timeout, follow_redirects=False)
