"""What the side-by-side benchmarks share: starting a server process on a free loopback port, waiting until it
answers, and reading its CPU time from /proc (so only the server's own work is counted, not the load generator's).

    proc, url = start_server(lambda port: ["relaykit", "serve", "bench/echo.py", "--port", str(port)])
    before = cpu_seconds(proc.pid)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def relaykit_serve(*extra: str) -> Callable[[int], list[str]]:
    """The command line of ``relaykit serve bench/echo.py`` (memory store, no push) on a given port."""
    base = [sys.executable, "-m", "relaykit.cli", "serve", "bench/echo.py", "--store", "memory", "--no-push"]
    return lambda port: [*base, "--host", HOST, "--port", str(port), "--log-level", "warning", *extra]


def start_server(
    command: Callable[[int], list[str]], env: dict[str, str] | None = None, ready: str = "/readyz"
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``command(port)`` on a free port and wait (30 s at most) until ``GET ready`` answers 200."""
    port = free_port()
    proc = subprocess.Popen(command(port), cwd=ROOT, stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + ready, timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{command(port)} did not become ready")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
