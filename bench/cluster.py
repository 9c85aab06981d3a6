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


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def proxy(port: int, backends: list[int], stop: asyncio.Event) -> None:
    turn = itertools.cycle(backends)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(HOST, next(turn)), 5.0)
        except (OSError, TimeoutError):
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, HOST, port, backlog=1024)
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
