"""Connection-level limits for ``relaykit serve``'s HTTP server (uvicorn with httptools), on by default.

uvicorn bounds none of these by itself: a request head may grow without limit (httptools buffers a header until its
line ends), a connection that never finishes its head or body is kept forever, and ``limit_concurrency`` answers
503 to *requests* while the connections stay open. ``HttpLimits`` closes those holes in a ``HttpToolsProtocol``
subclass. Invariants:

* A request head (request line and headers) of more than ``max_header_bytes`` is answered ``431`` and the connection
  closed; what is buffered meanwhile is at most one socket read past the limit.
* A connection gets ``header_timeout`` seconds from its first byte (or from being opened, or from its previous
  response) to finish the next request head. A request body gets ``body_timeout`` seconds between two of its pieces,
  and in all ``body_timeout`` seconds from its head plus one second per ``min_body_rate`` bytes received (its
  *allowance*): a body that keeps coming at that average rate or faster is never cut, however long it takes (a
  10 MiB upload at 1 KiB/s, the default, gets ~3 hours), and one trickled a byte at a time is cut ``body_timeout``
  after its head, however regularly the bytes come. Past a bound the connection is closed, after a ``408`` when
  no request is in flight (a body's request is: its handler sees the client disconnect). Idle keep-alive
  connections close after ``idle_timeout`` (uvicorn's ``timeout_keep_alive``).
* At most ``max_connections`` connections are open. At the cap, a new connection first evicts the connection that
  has waited longest for a request head, else the one furthest behind on a body that has so far come slower than
  ``min_body_rate`` (its allowance less than ``body_timeout`` ahead); a slow, idle or trickling client holds nothing
  another client may not have. Only when every connection is busy with a request (being answered, or its body
  coming at the minimum rate) is the new one refused with ``503`` + ``Retry-After``. So neither a slowloris flood
  nor trickled bodies can lock out the next caller, and ``/healthz`` keeps answering.
* The hot path arms no timer per request: each connection has one deadline (a float the reads and the parser
  callbacks move, only ever later) and at most one timer, which on firing before the deadline re-arms itself for the
  rest. A keep-alive connection's requests cost a few float stores each, not a ``call_later`` and a ``cancel`` per
  head and per body; a body piece read apart from its head costs a few float operations.

Other ASGI servers: give them the same bounds (hypercorn ``h11_max_incomplete_size``, ``read_timeout``,
``keep_alive_timeout``; gunicorn ``limit_request_field_size``, ``timeout``; a proxy's ``client_header_timeout``,
``large_client_header_buffers``): see docs/limits.md.
"""

from __future__ import annotations

import asyncio
import functools
import math
import resource
from dataclasses import dataclass
from typing import Any

from relaykit.http._onesend import HeadWithBody

__all__ = ["HttpLimits", "default_max_connections", "guarded_protocol"]

_FD_HEADROOM = 64  # descriptors kept free for the store, the bus, logs and outgoing webhooks


def default_max_connections(cap: int = 1000) -> int:
    """``cap``, lowered to fit the process's open-file limit (a connection over it would fail ``accept``)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return cap
    return max(16, min(cap, soft - _FD_HEADROOM))


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The bounds; ``relaykit serve`` flags of the same names change them."""

    max_header_bytes: int = 16 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 5.0
    max_connections: int = 1000
    min_body_rate: int = 1024  # bytes per second a body averages past its first body_timeout; 0: no such bound

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for ``uvicorn.Config``: the guarded protocol and the keep-alive timeout."""
        return {"http": guarded_protocol(self), "timeout_keep_alive": self.idle_timeout}


def _response(status: bytes, message: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: "
        + str(len(message)).encode()
        + b"\r\nconnection: close\r\n"
        + extra
        + b"\r\n"
        + message
    )


class _HeadTooLarge(Exception):
    pass


_TOO_LARGE = _response(b"431 Request Header Fields Too Large", b"request headers too large")
_TIMEOUT = _response(b"408 Request Timeout", b"request not received in time")
_BUSY = _response(b"503 Service Unavailable", b"too many connections; retry shortly", b"retry-after: 1\r\n")


@functools.cache
def _guarded_base() -> type[Any]:
    # uvicorn is imported only by a server that serves: the CLI's client commands never pay for it.
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class _GuardedProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with the bounds of ``limits`` (set by ``guarded_protocol``)."""

        limits: HttpLimits
        _seconds_per_byte: float  # the allowance one byte of a body adds: 1 / min_body_rate

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_open = True  # waiting for (part of) a request head
            self._head_bytes = 0
            self._head_since = 0.0
            # When the connection times out (loop time), or None while a request is being answered.
            self._deadline: float | None = None
            self._allowance = 0.0  # when the request body being read must be complete by (loop time)
            self._timer: asyncio.TimerHandle | None = None

        # --- connections -----------------------------------------------------------------------------------

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= self.limits.max_connections and not self._evict():
                transport.write(_BUSY)
                transport.close()
                self.transport = transport
                self.parser = None  # type: ignore[assignment]
                return
            super().connection_made(transport)
            self._head_since = self.loop.time()
            self._arm(self.limits.header_timeout)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self.parser is None:  # refused in connection_made: never registered
                return
            super().connection_lost(exc)

        def _evict(self) -> bool:
            # The connection waiting longest for a request head, with no request of its own in flight; else the
            # one whose body is furthest behind the minimum rate (the earliest allowance), when it is behind: its
            # allowance is less than body_timeout ahead. A body at the minimum rate or faster is never evicted.
            oldest: _GuardedProtocol | None = None
            slowest: _GuardedProtocol | None = None
            for conn in self.connections:
                if not isinstance(conn, _GuardedProtocol):
                    continue
                if conn._head_open:
                    if (conn.cycle is None or conn.cycle.response_complete) and (
                        oldest is None or conn._head_since < oldest._head_since
                    ):
                        oldest = conn
                elif conn._deadline is not None and (slowest is None or conn._allowance < slowest._allowance):
                    slowest = conn  # a body is being read (no deadline while a request is answered)
            victim = oldest
            if victim is None and slowest is not None:
                # Strictly ahead to be kept: uvloop's clock moves once per loop iteration, so a body whose head came
                # in this one (nothing known of its rate yet) is level with it.
                if slowest._allowance > self.loop.time() + self.limits.body_timeout:
                    return False
                victim = slowest
            if victim is None:
                return False
            victim.connections.discard(victim)
            victim._disarm()
            victim.transport.close()
            return True

        # --- timers ----------------------------------------------------------------------------------------

        def _arm(self, seconds: float) -> float:
            # Moves the deadline; a timer is made only when none is pending at or before it (a pending one that
            # fires earlier re-arms itself for the rest).
            deadline = self.loop.time() + seconds
            self._deadline = deadline
            timer = self._timer
            if timer is None or timer.when() > deadline:
                if timer is not None:
                    timer.cancel()
                self._timer = self.loop.call_at(deadline, self._timed_out)
            return deadline

        def _disarm(self) -> None:
            self._deadline = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _timed_out(self) -> None:
            self._timer = None
            deadline = self._deadline
            if deadline is None:
                return  # a request is being answered: no clock runs until its response is complete
            if deadline > self.loop.time():
                self._timer = self.loop.call_at(deadline, self._timed_out)
                return
            if not self.transport.is_closing():
                if self.cycle is None or self.cycle.response_complete:
                    self.transport.write(_TIMEOUT)
                self.transport.close()

        # --- parsing ---------------------------------------------------------------------------------------

        def data_received(self, data: bytes) -> None:
            if self._head_open:
                if self._deadline is None:  # the first byte of a head after a response: its clock starts now
                    self._head_since = self.loop.time()
                    self._arm(self.limits.header_timeout)
                self._head_bytes += len(data)
            elif self._deadline is not None:
                # A piece of a request body: body_timeout from now, unless the body's allowance (body_timeout from
                # its head, one second more per min_body_rate bytes) ends first. Without the allowance each byte
                # moved the deadline, and a byte per body_timeout held a connection forever. Both bounds only move
                # later, so the timer pending since the head (it fires no later, then re-arms itself for the rest)
                # still stands: float arithmetic, not a callback per piece. (A body that came with its head was
                # armed for by the head.)
                self._allowance += len(data) * self._seconds_per_byte
                deadline = self.loop.time() + self.limits.body_timeout
                self._deadline = deadline if deadline < self._allowance else self._allowance
            # uvicorn's data_received, with the oversize head told apart from a malformed request.
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            except httptools.HttpParserError as exc:
                if isinstance(exc.__context__, _HeadTooLarge):
                    self._refuse_head()
                else:
                    self.logger.warning("Invalid HTTP request received.")
                    self.send_400_response("Invalid HTTP request received.")
                return
            # A head still incomplete after this read: its bytes so far count (httptools buffers an unfinished
            # header line whole, so this is the only place a never-ending header is seen).
            if self._head_open and self._head_bytes > self.limits.max_header_bytes:
                self._refuse_head()

        def _refuse_head(self) -> None:
            if self.transport.is_closing():
                return
            self.logger.warning("request head over %d bytes refused (431)", self.limits.max_header_bytes)
            self._disarm()
            self.transport.write(_TOO_LARGE)
            self.transport.close()

        def on_headers_complete(self) -> None:
            # A head that arrived in one read: measured here (one pass over the parsed headers).
            size = len(self.url) + sum([len(name) + len(value) + 4 for name, value in self.headers])
            if size > self.limits.max_header_bytes:
                raise _HeadTooLarge
            self._head_open = False
            self._head_bytes = 0
            self._allowance = self._arm(self.limits.body_timeout)
            before = self.cycle
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle is not before:  # a new request (not an upgrade): its answer in one send
                # The cycle uses only write, close and is_closing of its transport, which HeadWithBody provides.
                cycle.transport = HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]

        def on_message_complete(self) -> None:
            # No clock while the request is answered; a pending timer finds no deadline and lapses.
            self._deadline = None
            self._head_open = True
            super().on_message_complete()

    return _GuardedProtocol


def guarded_protocol(limits: HttpLimits) -> type[Any]:
    """An uvicorn ``HttpToolsProtocol`` class enforcing ``limits`` (pass as ``uvicorn.Config(http=...)``)."""
    # min_body_rate 0: no allowance. Infinity per byte puts it out of reach at the first piece (a read is never empty).
    per_byte = 1.0 / limits.min_body_rate if limits.min_body_rate > 0 else math.inf
    return type("RelaykitHttpProtocol", (_guarded_base(),), {"limits": limits, "_seconds_per_byte": per_byte})
