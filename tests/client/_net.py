"""In-process network helpers on 127.0.0.1 (real sockets, the test's event loop): a TCP proxy that cuts connections
on demand, and a tiny HTTP/1.1 server for recording, failing and stalling.

``CutProxy`` forwards every accepted connection to ``upstream_port``. ``cut()`` aborts every live connection (both
sides, RST); ``cut_after(n)`` lets ``n`` more bytes through towards the client and then cuts (so a cut can land in
the middle of an SSE frame); ``cut_when(pattern, after=n)`` queues a cut made ``n`` bytes past the end of the next
match of ``pattern`` in what goes towards the client (so the point is chosen by the stream itself, not by how far a
possibly slower client has read); ``refuse = True`` makes it accept and abort every new connection at once (the server
"stays down"). It keeps accepting after a cut. ``accepted`` counts accepted connections, ``cuts`` the cuts that hit
live connections, and ``sent`` holds every byte the clients sent upstream.

``MiniHTTP`` answers each request with ``await handler(request)``; requests are kept in ``requests``. Keep-alive and
``Content-Length`` bodies only (what httpx sends); a response body may be bytes or an async iterator of bytes (sent
chunked). ``forward_to(url)`` builds a handler that relays a request upstream with httpx, streaming the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx

HOST = "127.0.0.1"
_WINDOW = 4096  # bytes of a connection's past output kept so that a cut pattern can match across reads


class CutProxy:
    """A TCP proxy whose live connections the test can cut."""

    def __init__(self, upstream_port: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.accepted = 0
        self.cuts = 0
        self.refuse = False
        self._server: asyncio.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._budget: int | None = None
        self._triggers: list[tuple[re.Pattern[bytes], int]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = bytearray()  # every byte clients sent upstream (to check what the requests carried)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def start(self, port: int = 0) -> CutProxy:
        """Listen on ``port`` (0: any free port)."""
        self._server = await asyncio.start_server(self._accept, HOST, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut(count=False)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    def cut(self, *, count: bool = True) -> None:
        """Abort every live connection now (RST to both ends)."""
        if count and self._links:
            self.cuts += 1
        self._budget = None
        self._abort_links()

    def _abort_links(self) -> None:
        for client, upstream in list(self._links):
            client.transport.abort()
            upstream.transport.abort()
        self._links.clear()

    def cut_after(self, nbytes: int) -> None:
        """Let ``nbytes`` more bytes through towards the client, then cut."""
        self._budget = nbytes

    def cut_when(self, pattern: bytes, after: int = 0) -> None:
        """Cut ``after`` bytes past the end of the next match of ``pattern`` towards the client.

        Several calls queue up; each fires once, in order, and the next starts looking after the previous one's
        cut. A match may span reads (the last ``_WINDOW`` bytes of each connection are kept to search across them).
        """
        self._triggers.append((re.compile(pattern, re.DOTALL), after))

    def _arm(self, tail: bytes, data: bytes) -> bytes:
        """Set the budget if the next trigger's pattern ends in ``data``; return the new tail to search with."""
        window = tail + data
        pattern, after = self._triggers[0]
        found = pattern.search(window)
        if found is not None:
            self._triggers.pop(0)
            # A match wholly inside the tail was seen (and fired) on an earlier read, so its end lies in ``data``.
            self._budget = found.end() - len(tail) + after
        return window[-_WINDOW:]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refuse or self.upstream_port is None:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        link = (writer, up_writer)
        self._links.add(link)
        down = asyncio.create_task(self._pump(up_reader, writer, towards_client=True))
        up = asyncio.create_task(self._pump(reader, up_writer, towards_client=False))
        for task in (down, up):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        # One side ended: end the other too (close politely; a cut already aborted both).
        for w in (writer, up_writer):
            with contextlib.suppress(Exception):
                w.close()
        self._links.discard(link)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, towards_client: bool) -> None:
        tail = b""
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    with contextlib.suppress(Exception):
                        writer.write_eof()
                    return
                if not towards_client:
                    self.sent += data
                if towards_client and self._budget is None and self._triggers:
                    tail = self._arm(tail, data)
                if towards_client and self._budget is not None:
                    budget = self._budget
                    if len(data) >= budget:
                        # Consumed now, before the drain can yield: a budget the test arms meanwhile is the next
                        # cut's, not erased by this one.
                        self._budget = None
                        writer.write(data[:budget])
                        with contextlib.suppress(Exception):
                            await writer.drain()
                        # This connection is cut even if its link already left ``_links`` (its other direction
                        # ended first): count it and reset it here, not only through the live links.
                        self.cuts += 1
                        writer.transport.abort()
                        self._abort_links()
                        return
                    self._budget = budget - len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            return


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass
class Response:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | AsyncIterator[bytes] = b""


Handler = Callable[[Request], Awaitable[Response]]

_REASONS = {
    200: "OK",
    304: "Not Modified",
    404: "Not Found",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class MiniHTTP:
    """A tiny HTTP/1.1 server on 127.0.0.1 that hands each request to ``handler`` and records it."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def start(self) -> MiniHTTP:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    raw = await reader.readline()
                    if raw in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = raw.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                request = Request(method, target, headers, body)
                self.requests.append(request)
                response = await self.handler(request)
                await self._respond(writer, response)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, response: Response) -> None:
        head = [f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}"]
        skip = {"content-length", "transfer-encoding", "connection"}
        head += [f"{k}: {v}" for k, v in response.headers if k.lower() not in skip]
        if isinstance(response.body, bytes):
            head.append(f"content-length: {len(response.body)}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
            await writer.drain()
            return
        head.append("transfer-encoding: chunked")
        body = response.body
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            async for chunk in body:
                if chunk:
                    writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            # A body cut short (the client went away) is closed now, so its ``finally`` runs at once, not whenever
            # the garbage collector gets to it.
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()


_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def forward_to(upstream: str, http: httpx.AsyncClient) -> Handler:
    """A handler relaying each request to ``upstream`` (same path), streaming the response back."""

    async def handler(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k not in _HOP}
        upstream_request = http.build_request(
            request.method, upstream.rstrip("/") + request.target, headers=headers, content=request.body
        )
        answer = await http.send(upstream_request, stream=True)
        out_headers = [(k, v) for k, v in answer.headers.items() if k.lower() not in _HOP]

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        return Response(answer.status_code, out_headers, body())

    return handler
