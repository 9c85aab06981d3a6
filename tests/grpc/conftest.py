"""Fixtures for the gRPC tests: real sockets on 127.0.0.1, no mocks.

* ``grpc_agent(executor, **create_app_options)``: an in-process relaykit app (``create_app``) with its ``GrpcServer``
  on a kernel-chosen port, in the test's event loop; returns the ``(app, "127.0.0.1:port")``. Stopped at teardown.
* ``sdk_peer``: ``bench/grpc_sdk_peer.py`` (an a2a-sdk 1.3.0 gRPC server) as a subprocess for the session; its
  ``host:port``. Readiness is its ``ready <port>`` line, read with a deadline.
* ``relaykit_serve(target, *args)``: ``relaykit serve TARGET --port P --grpc-port P2`` as a subprocess, ready when
  ``GET /readyz`` answers 200 (the CLI starts gRPC before it listens for HTTP); a ``support.servers.ServerProcess``.

This directory has no ``__init__.py`` (like tests/http): module basenames here are unique.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from support.servers import (
    HOST,
    READY_TIMEOUT,
    REPO_ROOT,
    ServerProcess,
    free_port,
    start_serve,
    stop_all,
    stop_process,
)

from relaykit.grpc import GrpcServer
from relaykit.http import create_app


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
            except OSError as exc:
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


@pytest.fixture
def relaykit_serve(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start ``relaykit serve TARGET --grpc-port …`` subprocesses; all stopped at teardown."""
    running: list[ServerProcess] = []

    def start(target: str, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
        running.append(start_serve(target, tmp_path, args=args, env=env, grpc=True, public_url=None))
        return running[-1]

    try:
        yield start
    finally:
        stop_all(running)
