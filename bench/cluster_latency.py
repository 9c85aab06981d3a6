"""Cross-replica event latency in scale-out: how long an event takes from the replica that runs a task to a client
subscribed on another replica (bench only).

    python bench/cluster_latency.py [--port 9871] [--events 300] [--gap 0.005] [--rounds 3]

Starts two replicas of ``bench/cluster_latency.py`` (this file is also the agent) on PostgreSQL + Redis with
``bench/cluster.py`` (fresh namespace, dropped at the end). Each round streams a task on replica A (it runs where it
is accepted) whose chunks carry the wall-clock time they were published, subscribes to it on replica B, and records
``received - published`` for every chunk B's client reads (and A's, for reference). One machine, one clock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from relaykit import AgentExecutor, RequestContext, TaskUpdater
from relaykit.server import EventQueue

HOST = "127.0.0.1"
HEADERS = {"A2A-Version": "1.0"}
_SPEC = re.compile(r"^stamps (\d+) ([0-9.]+)")


class Stamps(AgentExecutor):
    """``stamps N GAP``: N chunks, GAP seconds apart, each carrying the time it was handed to the engine. (Not an
    ``@agent`` generator: that holds each chunk back until the next, to mark the last one.)"""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        found = _SPEC.match(context.text)
        count, gap = (int(found.group(1)), float(found.group(2))) if found else (10, 0.01)
        artifact_id = None
        for i in range(count):
            if i:
                await asyncio.sleep(gap)
            artifact_id = await updater.artifact(
                f"{time.time():.6f}", artifact_id=artifact_id, append=i > 0, last_chunk=i == count - 1
            )
        await updater.complete()


agent = Stamps()


async def _lines(response: Any) -> Any:
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and data:
            yield json.loads("\n".join(data))
            data = []


def _stamp(event: dict[str, Any]) -> float | None:
    update = event.get("artifactUpdate")
    if update is None:
        return None
    return float(update["artifact"]["parts"][0]["text"])


async def _round(base_a: str, base_b: str, count: int, gap: float) -> tuple[list[float], list[float]]:
    import httpx

    local: list[float] = []
    remote: list[float] = []
    body = {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": f"stamps {count} {gap}"}],
        }
    }
    subscribed = asyncio.Event()
    task_id: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    async with httpx.AsyncClient(timeout=60) as http:

        async def on_a() -> None:
            async with http.stream("POST", f"{base_a}/message:stream", json=body, headers=HEADERS) as response:
                async for event in _lines(response):
                    if not task_id.done():
                        task_id.set_result(event.get("task", {}).get("id", ""))
                    stamp = _stamp(event)
                    if stamp is not None and subscribed.is_set():
                        local.append(time.time() - stamp)

        async def on_b() -> None:
            tid = await task_id
            async with http.stream("GET", f"{base_b}/tasks/{tid}:subscribe", headers=HEADERS) as response:
                async for event in _lines(response):
                    subscribed.set()
                    stamp = _stamp(event)
                    if stamp is not None:
                        remote.append(time.time() - stamp)

        await asyncio.wait_for(asyncio.gather(on_a(), on_b()), 120)
    return local, remote


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _wait_ready(ports: list[int], launcher: subprocess.Popen[bytes]) -> None:
    import urllib.request

    deadline = time.monotonic() + 90
    for port in ports:
        while True:
            if launcher.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the replicas did not start")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/readyz", timeout=1.0) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.2)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=9871)
    p.add_argument("--events", type=int, default=300)
    p.add_argument("--gap", type=float, default=0.005)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(here, "cluster.py"), str(args.port), "--replicas", "2", "--target", __file__],
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_ready([args.port + 100, args.port + 101], launcher)
        base_a, base_b = (f"http://{HOST}:{args.port + 100 + i}" for i in range(2))
        with open("/proc/loadavg") as f:
            print(f"load average at start: {f.read().split()[0]}")
        for number in range(args.rounds):
            local, remote = asyncio.run(_round(base_a, base_b, args.events, args.gap))
            print(
                f"round {number + 1}: cross-replica p50 {_ms(remote, 0.5):.2f} ms, p90 {_ms(remote, 0.9):.2f} ms, "
                f"p99 {_ms(remote, 0.99):.2f} ms ({len(remote)} events); same replica p50 {_ms(local, 0.5):.2f} ms, "
                f"mean {1000 * statistics.fmean(local):.2f} ms"
            )
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
