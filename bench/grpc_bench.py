"""gRPC load generator: relaykit's gRPC binding vs a2a-sdk's gRPC server, side by side.

    python3 bench/grpc_bench.py [--rounds 3] [--seconds 5] [--json out.json]

Starts both servers as subprocesses on 127.0.0.1 (nothing else needed):

* relaykit: ``relaykit serve bench/echo.py --store memory --grpc-port P`` (the shared harness's bench agent);
* a2a-sdk: ``bench/grpc_sdk_peer.py --port P`` (DefaultRequestHandler + GrpcHandler, in-memory store; same echo and
  ``stream N`` behaviour).

Workloads, each measured on one server at a time, servers alternating, ``--rounds`` times; medians reported:

* SendMessage (blocking echo, a fresh messageId per call) at concurrency 1, 16 and 64 for ``--seconds`` each:
  requests/s, p50 and p99 latency;
* one SendStreamingMessage of ``stream 1000``: events/s from call start to the last event;
* 100 concurrent SendStreamingMessage of ``stream 100``: total events/s.

The client is raw ``grpc.aio`` with requests serialized from relaykit's generated messages and responses only
counted (not decoded), so it costs both servers the same. Every call sends ``a2a-version: 1.0`` (a2a-sdk ignores it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import selectors
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from relaykit._grpc_gen import a2a_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]

SERVICE = "/lf.a2a.v1.A2AService/"
METADATA = (("a2a-version", "1.0"),)
CONCURRENCY = (1, 16, 64)


def request(text: str) -> bytes:
    message = pb.Message(message_id=str(uuid.uuid4()), role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    data: bytes = pb.SendMessageRequest(message=message).SerializeToString()
    return data


# --- servers -------------------------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, name: str, command: list[str], address: str, ready: Callable[[subprocess.Popen[bytes]], bool]):
        self.name = name
        self.address = address
        self.proc = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        if not ready(self.proc):
            self.stop()
            raise RuntimeError(f"{name} did not start: {' '.join(command)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _wait_for_line(prefix: str, timeout: float = 30.0) -> Callable[[subprocess.Popen[bytes]], bool]:
    def ready(proc: subprocess.Popen[bytes]) -> bool:
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        buffer = b""
        try:
            while time.monotonic() < deadline:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    break
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    return False
                buffer += chunk
                if any(line.startswith(prefix.encode()) for line in buffer.splitlines()):
                    return True
        finally:
            selector.close()
        return False

    return ready


def start_relaykit() -> Server:
    port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "relaykit.cli", "serve", "bench/echo.py", "--store", "memory"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--grpc-port", str(grpc_port), "--log-level", "warning"]
    return Server("relaykit", command, f"127.0.0.1:{grpc_port}", _wait_for_line("relaykit: gRPC"))


def start_sdk() -> Server:
    port = free_port()
    command = [sys.executable, "bench/grpc_sdk_peer.py", "--port", str(port)]
    return Server("a2a-sdk", command, f"127.0.0.1:{port}", _wait_for_line("ready "))


# --- workloads -----------------------------------------------------------------------------------------------


async def send_throughput(channel: grpc.aio.Channel, concurrency: int, seconds: float) -> dict[str, float]:
    call = channel.unary_unary(SERVICE + "SendMessage")
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await call(request("hello benchmark"), metadata=METADATA, timeout=60)
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "requests": float(len(latencies)),
    }


async def stream_events(channel: grpc.aio.Channel, streams: int, chunks: int) -> dict[str, float]:
    call = channel.unary_stream(SERVICE + "SendStreamingMessage")
    counts: list[int] = []

    async def one() -> None:
        received = 0
        async for _ in call(request(f"stream {chunks}"), metadata=METADATA, timeout=300):
            received += 1
        counts.append(received)

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(streams)))
    elapsed = time.perf_counter() - began
    total = sum(counts)
    expected = streams * (chunks + 2)  # Task, N chunks, COMPLETED
    if total != expected:
        raise RuntimeError(f"expected {expected} events, got {total}")
    return {"events_per_s": total / elapsed, "seconds": elapsed, "events": float(total)}


async def measure(address: str, seconds: float) -> dict[str, dict[str, float]]:
    options = (("grpc.max_receive_message_length", 64 * 1024 * 1024),)
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        # Warm up: connections, code paths, caches.
        await send_throughput(channel, 4, min(1.0, seconds))
        await stream_events(channel, 2, 50)
        out: dict[str, dict[str, float]] = {}
        for concurrency in CONCURRENCY:
            out[f"send_c{concurrency}"] = await send_throughput(channel, concurrency, seconds)
        out["stream_1x1000"] = await stream_events(channel, 1, 1000)
        out["stream_100x100"] = await stream_events(channel, 100, 100)
    return out


def run(rounds: int, seconds: float) -> dict[str, Any]:
    servers = [start_relaykit(), start_sdk()]
    results: dict[str, list[dict[str, dict[str, float]]]] = {s.name: [] for s in servers}
    try:
        for index in range(rounds):
            order = servers if index % 2 == 0 else list(reversed(servers))
            for server in order:
                print(f"round {index + 1}/{rounds}: {server.name} ...", file=sys.stderr, flush=True)
                results[server.name].append(asyncio.run(measure(server.address, seconds)))
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop()
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for name, runs in results.items():
        medians[name] = {
            workload: {metric: statistics.median(r[workload][metric] for r in runs) for metric in runs[0][workload]}
            for workload in runs[0]
        }
    return {
        "rounds": rounds,
        "seconds_per_send_level": seconds,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "grpcio": grpc.__version__},
        "medians": medians,
        "runs": results,
    }


def table(report: dict[str, Any]) -> str:
    med = report["medians"]
    rk, sdk = med["relaykit"], med["a2a-sdk"]
    lines = [
        "| workload | relaykit | a2a-sdk | relaykit / sdk |",
        "|---|---:|---:|---:|",
    ]
    for concurrency in CONCURRENCY:
        key = f"send_c{concurrency}"
        lines.append(
            f"| SendMessage c={concurrency} (req/s; p50 / p99 ms) | {rk[key]['rps']:.0f} "
            f"({rk[key]['p50_ms']:.1f} / {rk[key]['p99_ms']:.1f}) | {sdk[key]['rps']:.0f} "
            f"({sdk[key]['p50_ms']:.1f} / {sdk[key]['p99_ms']:.1f}) | {rk[key]['rps'] / sdk[key]['rps']:.2f}x |"
        )
    for key, label in (("stream_1x1000", "1 stream x 1,000 chunks"), ("stream_100x100", "100 streams x 100 chunks")):
        lines.append(
            f"| {label} (events/s) | {rk[key]['events_per_s']:.0f} | {sdk[key]['events_per_s']:.0f} "
            f"| {rk[key]['events_per_s'] / sdk[key]['events_per_s']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each SendMessage level")
    parser.add_argument("--json", type=Path, default=None, help="write the full report here")
    args = parser.parse_args()
    report = run(args.rounds, args.seconds)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
