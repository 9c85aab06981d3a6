"""``/metrics`` on a port of its own (``relaykit serve --metrics-port``): a minimal HTTP/1.1 responder, so the
Prometheus exposition can stay off the public A2A port (scraped from a private network) without a second web app.

Invariants: one request per connection (``Connection: close``); a request head is bounded in size and time, so a
slow or hostile peer holds one socket for at most ``_HEAD_TIMEOUT`` seconds; only ``GET``/``HEAD /metrics`` is
answered, everything else is 404 (405 for another method).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from relaykit.telemetry._metrics import Metrics

__all__ = ["serve_metrics"]

_HEAD_LIMIT = 16 * 1024
_HEAD_TIMEOUT = 10.0
_CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


def _response(
    status: bytes, body: bytes, content_type: bytes = b"text/plain; charset=utf-8", head: bool = False
) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + content_type
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + (b"" if head else body)
    )


async def serve_metrics(
    metrics: Metrics, host: str = "127.0.0.1", port: int = 0, *, sock: socket.socket | None = None
) -> asyncio.Server:
    """Serve ``GET /metrics`` (Prometheus text) for ``metrics`` on ``host:port`` (or an already bound ``sock``);
    close the returned server to stop.

    >>> import asyncio
    >>> async def demo() -> int:
    ...     server = await serve_metrics(Metrics())
    ...     port = server.sockets[0].getsockname()[1]
    ...     server.close()
    ...     await server.wait_closed()
    ...     return port
    >>> asyncio.run(demo()) > 0
    True
    """

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            method, _, rest = head.partition(b" ")
            target = rest.partition(b" ")[0].partition(b"?")[0]
            if method not in (b"GET", b"HEAD"):
                writer.write(_response(b"405 Method Not Allowed", b"GET /metrics\n"))
            elif target != b"/metrics":
                writer.write(_response(b"404 Not Found", b"GET /metrics\n"))
            else:
                body = await metrics.render()
                writer.write(_response(b"200 OK", body, _CONTENT_TYPE, head=method == b"HEAD"))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a peer that sent no complete head in time, or went away: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    if sock is not None:
        return await asyncio.start_server(answer, sock=sock, limit=_HEAD_LIMIT)
    return await asyncio.start_server(answer, host, port, limit=_HEAD_LIMIT)
