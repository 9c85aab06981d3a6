"""The test helpers' round-robin proxy (``support.servers.RoundRobinProxy``) and ``start_replicas``.

Backends are tiny HTTP servers (``http.server`` in threads) that answer with their own name; every request is a new
connection (``Connection: close``), so the proxy routes each one afresh.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from support.servers import HOST, RoundRobinProxy, free_port, start_replicas, stop_all

TIMEOUT = 5.0


class _Named(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.name.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Backend:
    """An HTTP server on 127.0.0.1 answering every GET with ``name``."""

    def __init__(self, name: str) -> None:
        self.httpd = ThreadingHTTPServer((HOST, 0), _Named)
        self.httpd.name = name  # type: ignore[attr-defined]
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.closed = False

    def close(self) -> None:
        """Stop listening: connections to the port are refused from now on."""
        if not self.closed:
            self.closed = True
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(TIMEOUT)


@pytest.fixture
def backends() -> Iterator[tuple[Backend, Backend]]:
    pair = (Backend("a"), Backend("b"))
    try:
        yield pair
    finally:
        for backend in pair:
            backend.close()


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=TIMEOUT, headers={"Connection": "close"}) as client:
        yield client


def _get(http: httpx.Client, proxy: RoundRobinProxy) -> str:
    return http.get(f"{proxy.url}/").text


def _live_soon(proxy: RoundRobinProxy, port: int | None, count: int) -> None:
    """Bounded poll: the proxy's thread routes an accepted connection a moment after the kernel accepted it."""
    deadline = time.monotonic() + TIMEOUT
    while proxy.live(port) != count:
        assert time.monotonic() < deadline, f"{proxy.live(port)} live connections to {port}, not {count}"
        time.sleep(0.01)


def test_connections_alternate_and_a_dead_backend_is_skipped(
    backends: tuple[Backend, Backend], http: httpx.Client
) -> None:
    a, b = backends
    with RoundRobinProxy([a.port, b.port]) as proxy:
        assert [_get(http, proxy) for _ in range(4)] == ["a", "b", "a", "b"]
        assert proxy.routes == [a.port, b.port, a.port, b.port]
        assert proxy.refused == []

        b.close()
        assert [_get(http, proxy) for _ in range(3)] == ["a", "a", "a"]
        assert proxy.routes[4:] == [a.port] * 3
        assert b.port in proxy.refused


def test_removed_backend_gets_no_more_connections_and_its_live_ones_are_cut(
    backends: tuple[Backend, Backend], http: httpx.Client
) -> None:
    a, b = backends
    with RoundRobinProxy([a.port, b.port]) as proxy:
        held = socket.create_connection((HOST, proxy.port), timeout=TIMEOUT)  # to a; sends nothing yet
        try:
            _live_soon(proxy, a.port, 1)
            assert _get(http, proxy) == "b"
            proxy.remove_backend(a.port)  # cut=True: the held connection is aborted
            assert held.recv(1) == b""  # aborted (or reset) from the proxy's side
        except ConnectionResetError:
            pass
        finally:
            held.close()
        assert proxy.backends == [b.port]
        assert [_get(http, proxy) for _ in range(2)] == ["b", "b"]
        _live_soon(proxy, None, 0)


def test_no_backend_left_closes_the_client_connection(http: httpx.Client) -> None:
    with RoundRobinProxy([free_port()]) as proxy, pytest.raises(httpx.TransportError):
        _get(http, proxy)
    assert proxy.routes == [None]


def test_close_is_bounded_with_live_connections(backends: tuple[Backend, Backend]) -> None:
    a, _ = backends
    proxy = RoundRobinProxy([a.port]).start()
    held = socket.create_connection((HOST, proxy.port), timeout=TIMEOUT)
    try:
        _live_soon(proxy, a.port, 1)
        proxy.close()
        proxy.close()  # idempotent
    finally:
        held.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, proxy.port), timeout=TIMEOUT).close()


async def test_async_use(backends: tuple[Backend, Backend]) -> None:
    a, b = backends
    async with RoundRobinProxy([a.port, b.port]) as proxy, httpx.AsyncClient(timeout=TIMEOUT) as http:
        got = [(await http.get(f"{proxy.url}/", headers={"Connection": "close"})).text for _ in range(2)]
    assert got == ["a", "b"]


def test_replicas_behind_the_proxy(tmp_path: Path, http: httpx.Client) -> None:
    """Two ``relaykit serve`` replicas (memory store and bus: this checks the plumbing, not shared state)."""
    replicas = start_replicas("examples/echo.py", 2, tmp_path, store="memory", bus="memory")
    try:
        first, second = replicas
        assert first.port != second.port
        with RoundRobinProxy([r.port for r in replicas]) as proxy:
            for _ in range(2):
                assert http.get(f"{proxy.url}/readyz").is_success
            assert proxy.routes == [first.port, second.port]
            assert first.kill9() == -9
            for _ in range(2):
                assert http.get(f"{proxy.url}/readyz").is_success
            assert proxy.routes[2:] == [second.port, second.port]
            first.restart()  # the same port again: back in the rotation
            assert http.get(f"{proxy.url}/readyz").is_success
            assert proxy.routes[4] == first.port
        assert isinstance(first.log_tail(), str)
    finally:
        stop_all(replicas)
    assert second.proc.returncode == 0, second.log_tail()
