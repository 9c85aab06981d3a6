"""Fixtures for the gRPC tests: real sockets on 127.0.0.1, no mocks.

* ``grpc_agent(executor, **create_app_options)``: an in-process relaykit app (``create_app``) with its ``GrpcServer``
  on a kernel-chosen port, in the test's event loop; returns the ``(app, "127.0.0.1:port")``. Stopped at teardown.
* ``sdk_peer``: ``bench/grpc_sdk_peer.py`` (an a2a-sdk 1.3.0 gRPC server) as a subprocess for the session; its
  ``host:port``. Readiness is its ``ready <port>`` line, read with a deadline.
* ``relaykit_serve(target, *args)``: ``relaykit serve TARGET --port P --grpc-port P2`` as a subprocess, ready when
  ``GET /readyz`` answers 200 (the CLI starts gRPC before it listens for HTTP); a ``ServeProcess``.

This directory has no ``__init__.py`` (like tests/http): module basenames here are unique.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from relaykit.grpc import GrpcServer
from relaykit.http import create_app

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
READY_TIMEOUT = 20.0  # seconds for a subprocess to be ready
STOP_TIMEOUT = 10.0  # seconds after SIGTERM before SIGKILL
POLL_INTERVAL = 0.05  # waiting on an external process only


def free_port() -> int:
    """A port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any]) -> int | None:
    """SIGTERM, a bounded wait, then SIGKILL; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
    return proc.returncode


@pytest.fixture
async def grpc_agent() -> AsyncIterator[Callable[..., Any]]:
    """Start relaykit apps with a gRPC server in this test's loop: ``app, address = await grpc_agent(executor)``."""
    started: list[tuple[Any, GrpcServer]] = []

    async def start(executor: Any, **options: Any) -> tuple[Any, str]:
        options.setdefault("store", "memory")
        error: Exception | None = None
        for _ in range(3):  # the card names the port, so probe one first; retry if it is taken meanwhile
            address = f"{HOST}:{free_port()}"
            app = create_app(executor, grpc_url=address, **options)
            server = GrpcServer(app, host=HOST, port=int(address.rsplit(":", 1)[1]))
            try:
                await server.start()
            except (OSError, RuntimeError) as exc:
                error = exc
                await app.state.relaykit.stop()
                continue
            started.append((app, server))
            app.state.grpc_server = server  # for tests that drive the server itself (drain, stop)
            return app, address
        raise RuntimeError(f"no gRPC port could be bound: {error}")

    try:
        yield start
    finally:
        for app, server in reversed(started):
            await server.stop(0.5)
            await app.state.relaykit.stop()


@pytest.fixture(scope="session")
def sdk_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of an a2a-sdk gRPC server (bench/grpc_sdk_peer.py) running for the whole session."""
    log_path = tmp_path_factory.mktemp("sdk-peer") / "peer.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "bench" / "grpc_sdk_peer.py"), "--host", HOST, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            cwd=REPO_ROOT,
        )
        try:
            assert proc.stdout is not None
            line = _read_line(proc.stdout, READY_TIMEOUT)
            if not line.startswith("ready "):
                stop_process(proc)
                raise RuntimeError(f"the a2a-sdk peer did not start: {line!r}; log: {log_path.read_text()[-2000:]}")
            yield f"{HOST}:{int(line.split()[1])}"
        finally:
            stop_process(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def _read_line(stream: IO[bytes], timeout: float) -> str:
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buffer = b""
    try:
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                break
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            buffer += chunk
    finally:
        selector.close()
    return buffer.decode(errors="replace").split("\n", 1)[0]


@dataclass
class ServeProcess:
    """One ``relaykit serve`` with gRPC."""

    proc: subprocess.Popen[bytes]
    port: int
    grpc_port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int | None:
        return stop_process(self.proc)


@pytest.fixture
def relaykit_serve(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    """Start ``relaykit serve TARGET --grpc-port …`` subprocesses; all stopped at teardown."""
    running: list[ServeProcess] = []

    def start(target: str, *args: str, env: dict[str, str] | None = None) -> ServeProcess:
        last = ""
        for attempt in range(3):  # a probed free port can be taken before the server binds it: retry
            port, grpc_port = free_port(), free_port()
            log_path = tmp_path / f"serve-{len(running)}-{attempt}.log"
            with log_path.open("wb") as log:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "relaykit.cli",
                        "serve",
                        target,
                        "--host",
                        HOST,
                        "--port",
                        str(port),
                        "--grpc-port",
                        str(grpc_port),
                        "--store",
                        "memory",
                        "--grace",
                        "1",
                        "--log-level",
                        "warning",
                        *args,
                    ],
                    cwd=REPO_ROOT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            server = ServeProcess(proc, port, grpc_port, log_path)
            if _wait_ready(server):
                running.append(server)
                return server
            last = server.log()
            server.stop()
        raise RuntimeError(f"relaykit serve {target} did not become ready; log:\n{last[-3000:]}")

    try:
        yield start
    finally:
        for server in running:
            with contextlib.suppress(Exception):
                server.stop()


def _wait_ready(server: ServeProcess) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{server.base_url}/readyz").status_code == 200:
                    return True
            time.sleep(POLL_INTERVAL)
    return False
