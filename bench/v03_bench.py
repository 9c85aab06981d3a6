"""Server CPU per request over A2A 0.3 against 1.0 on the same server, side by side in one run: relaykit's dual stack
(``relaykit serve bench/echo.py --store memory --no-push``: 0.3 through the codec in ``relaykit._v03``) and, when
its peer script is at hand, a2a-sdk 1.3.0 serving 0.3 with its compat layer (the shared harness's
``peers/a2a_sdk/echo_agent.py`` with ``A2A_SDK_V03_COMPAT=1``).

Two workloads over JSON-RPC, each as 1.0 (``SendMessage`` / ``SendStreamingMessage`` with ``A2A-Version: 1.0``) and
as 0.3 (``message/send`` / ``message/stream``, no version header): blocking sends by ``--concurrency`` clients for
``--duration`` seconds, and ``--streams`` sequential streams of 1,000 chunks. Phases alternate (relaykit 1.0, relaykit
0.3, sdk 1.0, sdk 0.3, …); server CPU is read from ``/proc/PID/stat`` around each phase. Medians over the rounds.

    python bench/v03_bench.py --sdk-peer ../shared/bench/peers/a2a_sdk/echo_agent.py
    python bench/v03_bench.py --rounds 5 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from _procs import ROOT, cpu_seconds, relaykit_serve, start_server

CHUNKS = 1000


def _request(version: str, text: str, stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    message_id = str(uuid.uuid4())
    if version == "1.0":
        message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
        method = "SendStreamingMessage" if stream else "SendMessage"
        headers = {"A2A-Version": "1.0"}
    else:
        message = {
            "kind": "message",
            "messageId": message_id,
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
        method = "message/stream" if stream else "message/send"
        headers = {}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}, headers


async def _sends(url: str, version: str, concurrency: int, duration: float) -> int:
    done = 0
    stop = time.monotonic() + duration

    async def client() -> None:
        nonlocal done
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            while time.monotonic() < stop:
                body, headers = _request(version, "hi", stream=False)
                answer = await http.post("/", json=body, headers=headers)
                if answer.status_code != 200 or "error" in answer.json():
                    raise RuntimeError(f"{version} send failed: {answer.status_code} {answer.text[:300]}")
                done += 1

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return done


async def _streams(url: str, version: str, count: int) -> tuple[int, float]:
    events = 0
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for _ in range(count):
            body, headers = _request(version, f"stream {CHUNKS}", stream=True)
            async with http.stream(
                "POST", "/", json=body, headers={**headers, "Accept": "text/event-stream"}
            ) as answer:
                async for line in answer.aiter_lines():
                    if line.startswith("data:"):
                        if '"error"' in line[:40]:
                            raise RuntimeError(f"{version} stream failed: {line[:300]}")
                        events += 1
    if events < count * CHUNKS:
        raise RuntimeError(f"{version} streams carried {events} events, expected at least {count * CHUNKS}")
    return events, time.monotonic() - started


def _phase(proc: subprocess.Popen[bytes], url: str, version: str, args: argparse.Namespace) -> dict[str, float]:
    asyncio.run(_sends(url, version, args.concurrency, args.warmup))
    before = cpu_seconds(proc.pid)
    count = asyncio.run(_sends(url, version, args.concurrency, args.duration))
    send_cpu = (cpu_seconds(proc.pid) - before) / count * 1e6
    before = cpu_seconds(proc.pid)
    events, wall = asyncio.run(_streams(url, version, args.streams))
    stream_cpu = (cpu_seconds(proc.pid) - before) / args.streams * 1e3
    return {"send_us": send_cpu, "send_rps": count / args.duration, "stream_ms": stream_cpu, "events_s": events / wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=4.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--streams", type=int, default=10, help="sequential 1,000-chunk streams per phase")
    p.add_argument(
        "--sdk-peer", type=Path, default=ROOT.parent / "shared" / "bench" / "peers" / "a2a_sdk" / "echo_agent.py"
    )
    p.add_argument("--sdk-python", default=sys.executable, help="a python with a2a-sdk 1.3.0[http-server] and uvicorn")
    args = p.parse_args()
    servers: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    servers["relaykit"] = start_server(relaykit_serve())
    if args.sdk_peer.is_file():
        servers["a2a-sdk"] = start_server(
            lambda port: [args.sdk_python, str(args.sdk_peer), str(port)],
            {"A2A_SDK_V03_COMPAT": "1"},
            "/.well-known/agent-card.json",
        )
    else:
        print(f"no a2a-sdk peer at {args.sdk_peer}: relaykit only", flush=True)
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for n in range(args.rounds):
            for name, (proc, url) in servers.items():
                for version in ("1.0", "0.3"):
                    got = _phase(proc, url, version, args)
                    results.setdefault((name, version), []).append(got)
                    print(f"round {n + 1} {name} {version}: " + ", ".join(f"{k} {v:.1f}" for k, v in got.items()))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)
    rows = [
        (f"SendMessage server CPU us/req (c={args.concurrency})", "send_us", "%.0f"),
        (f"SendMessage req/s (c={args.concurrency})", "send_rps", "%.0f"),
        ("1 stream x1000: server CPU ms/stream", "stream_ms", "%.1f"),
        ("1 stream x1000: events/s", "events_s", "%.0f"),
    ]
    names = list(servers)
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
    header = "| metric | " + " | ".join(f"{n} 1.0 | {n} 0.3 | {n} 0.3/1.0" for n in names) + " |"
    print(header)
    print("|---|" + "---|---|---|" * len(names))
    for label, key, fmt in rows:
        cells = []
        for name in names:
            new = statistics.median(r[key] for r in results[(name, "1.0")])
            old = statistics.median(r[key] for r in results[(name, "0.3")])
            cells += [fmt % new, fmt % old, f"{old / new:.2f}x"]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
