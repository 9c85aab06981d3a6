"""What the hostile-load limits cost (issue 14): ``relaykit serve bench/echo.py`` with the limits on (the default)
and off (``--max-connections 0`` and every ``--quota-*`` 0), alternating (A B B A …), on 127.0.0.1. Per round and
mode: blocking SendMessage at c=1 and c=16 (JSON-RPC, keep-alive), one 1,000-chunk and one 100,000-chunk stream
(SendStreamingMessage, SSE read to the end). Prints medians with [min-max] and the 1-minute load average.

Both modes authenticate the client with an API key (``--api-keys``), so the per-principal quotas run on every
request (an anonymous caller is exempt from them). With the limits on, the request-rate quota is raised to
100,000/s so the benchmark measures what the check costs, not its refusals (the default 200/s would refuse it).

    python bench/limits_bench.py --rounds 3
    python bench/limits_bench.py --cpu --rounds 4   # in process: CPU seconds (other processes' load does not count)

``--cpu``: the same agent and the same authenticated caller through the ASGI app in this process (no sockets),
quotas on vs off, alternating; ``time.process_time`` of 1,000 blocking SendMessage (best of 5) and of one
100,000-chunk SendStreamingMessage read to the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
OFF = ["--max-connections", "0", "--quota-rate", "0", "--quota-executions", "0", "--quota-streams", "0"]
OFF += ["--quota-queued", "0"]
ON = ["--quota-rate", "100000", "--quota-burst", "100000"]
KEY = "bench-key"
HEADERS = {"A2A-Version": "1.0", "X-API-Key": KEY}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def body(text: str) -> dict[str, object]:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def send_rate(url: str, clients: int, total: int) -> float:
    async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as http:
        for _ in range(50):
            await http.post("/", json=body("warm"))
        per = total // clients

        async def one() -> None:
            for _ in range(per):
                r = await http.post("/", json=body("hello"))
                assert "result" in r.json(), r.text

        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(clients)))
        return per * clients / (time.perf_counter() - t)


async def stream_seconds(url: str, chunks: int) -> float:
    payload = body(f"stream {chunks}")
    payload["method"] = "SendStreamingMessage"
    async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=300) as http:
        t = time.perf_counter()
        last = b""
        async with http.stream("POST", "/", json=payload) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    last = line.encode()
        elapsed = time.perf_counter() - t
    assert b"TASK_STATE_COMPLETED" in last, last[:200]
    return elapsed


def serve(extra: list[str], keys: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "relaykit.cli", "serve", "bench/echo.py", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--store", "memory", "--log-level", "warning", "--api-keys", str(keys), *extra]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


async def measure(url: str) -> dict[str, float]:
    return {
        "SendMessage c=1 req/s": await send_rate(url, 1, 1000),
        "SendMessage c=16 req/s": await send_rate(url, 16, 2000),
        "1 stream x1,000: s": await stream_seconds(url, 1000),
        "1 stream x100,000: s": await stream_seconds(url, 100_000),
    }


async def cpu_seconds(quotas: Any) -> dict[str, float]:
    """CPU seconds in this process: 1,000 SendMessage (best of 5) and one 100,000-chunk stream."""
    import importlib.util

    from relaykit.auth import APIKeyAuthenticator, Auth
    from relaykit.http._app import create_app
    from relaykit.testing import StreamingASGITransport

    spec = importlib.util.spec_from_file_location("bench_echo", ROOT / "bench" / "echo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    auth = Auth(APIKeyAuthenticator({"bench": KEY}))
    app = create_app(module.agent, store="memory", auth=auth, quotas=quotas)
    await app.state.relaykit.start()
    try:
        transport = StreamingASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://b", headers=HEADERS, timeout=300) as http:
            for _ in range(50):
                await http.post("/", json=body("warm"))
            best = float("inf")
            for _ in range(5):
                t = time.process_time()
                for _ in range(1000):
                    r = await http.post("/", json=body("hello"))
                    assert b'"result"' in r.content, r.text
                best = min(best, time.process_time() - t)
            payload = body("stream 100000")
            payload["method"] = "SendStreamingMessage"
            t = time.process_time()
            async with http.stream("POST", "/", json=payload) as r:
                async for _ in r.aiter_lines():
                    pass
            stream = time.process_time() - t
    finally:
        await app.state.relaykit.stop()
    return {"1,000 SendMessage: CPU s (best of 5)": best, "1 stream x100,000: CPU s": stream}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="in process, CPU seconds (see the module docstring)")
    options = parser.parse_args()
    rounds = options.rounds
    if options.cpu:
        from relaykit.server._quotas import Quotas

        cpu_modes = [("on", Quotas(rate=100_000, burst=100_000)), ("off", Quotas(0, 0, 0, 0, 0, 0))]
        cpu: dict[str, dict[str, list[float]]] = {"on": {}, "off": {}}
        loads = [os.getloadavg()[0]]
        for i in range(rounds):
            for mode, quotas in cpu_modes if i % 2 == 0 else cpu_modes[::-1]:
                for name, value in asyncio.run(cpu_seconds(quotas)).items():
                    cpu[mode].setdefault(name, []).append(value)
                loads.append(os.getloadavg()[0])
        report(cpu, loads)
        return
    results: dict[str, dict[str, list[float]]] = {"on": {}, "off": {}}
    modes: list[tuple[str, list[str]]] = [("on", ON), ("off", OFF)]
    keys = Path(tempfile.mkdtemp()) / "api-keys"
    keys.write_text(f"bench {KEY}\n")
    loads = [os.getloadavg()[0]]
    for i in range(rounds):
        for mode, extra in modes if i % 2 == 0 else modes[::-1]:  # A B B A …: neither mode always goes first
            proc, url = serve(extra, keys)
            try:
                for name, value in asyncio.run(measure(url)).items():
                    results[mode].setdefault(name, []).append(value)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            loads.append(os.getloadavg()[0])
    report(results, loads)


def report(results: dict[str, dict[str, list[float]]], loads: list[float]) -> None:
    print("| metric | limits on | limits off | on/off |")
    print("|---|---|---|---|")
    for name in results["on"]:
        on, off = results["on"][name], results["off"][name]
        m_on, m_off = statistics.median(on), statistics.median(off)
        shown = [f"{statistics.median(v):.3g} [{min(v):.3g}-{max(v):.3g}]" for v in (on, off)]
        print(f"| {name} | {shown[0]} | {shown[1]} | {m_on / m_off:.2f} |")
    print(f"\n1-minute load average during the run: {min(loads):.1f}-{max(loads):.1f}")
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
