"""A response's head and its first body bytes in one send, for ``relaykit serve``'s HTTP server.

uvicorn writes a response's status line and headers as soon as the app sends ``http.response.start``, and the body
with the next message: two ``send`` system calls and two TCP segments for every small JSON answer, and the client
wakes twice. On loopback in a VM a send costs tens of microseconds of CPU in the kernel, a large share of a
~100 µs request. ``HeadWithBody`` is the transport a request's ``RequestResponseCycle`` writes to (set by the
protocol in ``_guard``): it holds the head and sends it joined to the first body bytes.

Invariants:

* Bytes leave in the order they were written; nothing is held past the current event-loop pass. A head whose body
  does not follow at once (a stream whose first event is not ready, a HEAD request, a 204) is sent alone at the end
  of the pass, so a client never waits for headers.
* ``100 Continue`` (written before the head, while the app reads the body) goes out at once.
* ``close()`` sends what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HeadWithBody"]

_CONTINUE = b"HTTP/1.1 100 "


class HeadWithBody:
    """The connection as one response's cycle sees it: ``write``, ``close`` and ``is_closing`` of ``transport``,
    with the response head held until the body's first bytes (or the end of the loop pass)."""

    __slots__ = ("_head_seen", "_held", "_loop", "_transport")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._head_seen = False

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif self._head_seen or data.startswith(_CONTINUE):
            self._transport.write(data)
        else:
            # The first write of a response that is not an interim 100 is its head (uvicorn writes it whole).
            self._head_seen = True
            self._held = data
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send the held head, if any (the end of the pass it was written in)."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return bool(self._transport.is_closing())
