"""Start N relaykit replicas on PostgreSQL + Redis behind a round-robin TCP proxy listening on PORT (bench only).

    python bench/cluster.py PORT --replicas 3 [--store postgresql://…] [--bus redis://…] [--target bench/echo.py]
    python bench/cluster.py PORT --replicas 1 --no-proxy     # the one replica listens on PORT itself

Each run uses a fresh namespace, dropped (tables and Redis keys) when the launcher gets SIGTERM/SIGINT. The proxy
hands each new connection to the next replica, as a plain L4 load balancer would (no stickiness). Used by
bench/run_cluster.sh; the harness then sees one server at PORT. Its CPU figures are the launcher's (the proxy's)
only, not the replicas': read the throughput and latency rows. With ``--no-proxy`` (one replica) the harness finds
the replica listening on PORT and reads that replica's CPU (bench/run_sdk_cluster.sh). ``proxy`` and ``wait_ready``
are shared with bench/sdk_cluster/cluster.py, the a2a-sdk cluster-mode counterpart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request

HOST = "127.0.0.1"


def wait_ready(port: int, proc: subprocess.Popen[bytes], deadline: float, path: str = "/readyz") -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"replica on {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=1.0) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"replica on {port} not ready in time")


class _Relay(asyncio.Protocol):
    """One direction's receiving end: what arrives is written to the other side's transport at once.

    Transports and protocols rather than streams: no coroutine resumes per segment, so the proxy's CPU per request
    stays small beside the replicas' (a production L4 balancer costs them almost nothing). Back-pressure: when the
    other side's buffer fills, this side stops reading until it drains."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Relay | None = None
        self._held: list[bytes] = []  # what arrived before the other side was connected
        self._closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def link(self, peer: _Relay) -> None:
        self.peer = peer
        if self._held and peer.transport is not None:
            peer.transport.write(b"".join(self._held))
            self._held.clear()
        if self._closing:
            peer.close()

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self._held.append(data)
        else:
            peer.transport.write(data)

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self.peer is not None:
            self.peer.close()
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def proxy(port: int, backends: list[int], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    turn = itertools.cycle(backends)
    connecting: set[asyncio.Task[None]] = set()

    async def connect(down: _Relay, backend: int) -> None:
        try:
            _, up = await asyncio.wait_for(loop.create_connection(_Relay, HOST, backend), 5.0)
        except (OSError, TimeoutError):
            down.close()
            return
        up.link(down)
        down.link(up)

    def accepted() -> _Relay:
        down = _Relay()
        task = loop.create_task(connect(down, next(turn)))
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return down

    server = await loop.create_server(accepted, HOST, port, backlog=1024)
    async with server:
        await stop.wait()


async def _drop(store: str, bus: str, namespace: str) -> None:
    from relaykit.backends.postgres import drop_namespace
    from relaykit.backends.redis import connect_redis

    with contextlib.suppress(Exception):
        await drop_namespace(store, namespace)
    client = connect_redis(bus)
    with contextlib.suppress(Exception):
        keys = [key async for key in client.scan_iter(match=f"{namespace}:*", count=1000)]
        for start in range(0, len(keys), 500):
            await client.delete(*keys[start : start + 500])
    await client.aclose()


async def _until_exit(proc: subprocess.Popen[bytes], stop: asyncio.Event) -> None:
    # The replica was not started by this loop, so no child watcher: look at it twice a second.
    while proc.poll() is None and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


def front(port: int, backends: list[int], procs: list[subprocess.Popen[bytes]], *, direct: bool) -> None:
    """Until SIGTERM/SIGINT: proxy PORT round-robin to the backends, or (``direct``: one replica listening on PORT
    itself) only wait, also returning when that replica exits."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.run_until_complete(_until_exit(procs[0], stop) if direct else proxy(port, backends, stop))
    loop.close()


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every replica, then wait for each (15 s, then SIGKILL)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--no-proxy", action="store_true", help="one replica, listening on PORT itself")
    p.add_argument("--store", default=os.environ.get("RELAYKIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    p.add_argument("--bus", default=os.environ.get("RELAYKIT_TEST_REDIS", "redis://127.0.0.1:6379/0"))
    p.add_argument("--target", default="bench/echo.py")
    args = p.parse_args()
    if args.no_proxy and args.replicas != 1:
        p.error("--no-proxy needs --replicas 1")
    namespace = "bench_" + secrets.token_hex(4)
    ports = [args.port] if args.no_proxy else [args.port + 100 + i for i in range(args.replicas)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            procs.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-m", "relaykit.cli", "serve", args.target, "--port", str(port)),
                        *("--store", args.store, "--bus", args.bus, "--namespace", namespace),
                        # serve's defaults otherwise (push on), as the embedded peer runs.
                        *("--log-level", "warning"),
                    ],
                )
            )
        deadline = time.monotonic() + 60
        for port, proc in zip(ports, procs, strict=True):
            wait_ready(port, proc, deadline)
        print(f"cluster: {args.replicas} replica(s) {ports} behind {HOST}:{args.port} ({namespace})", flush=True)
        front(args.port, ports, procs, direct=args.no_proxy)
    finally:
        stop_all(procs)
        asyncio.run(_drop(args.store, args.bus, namespace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
