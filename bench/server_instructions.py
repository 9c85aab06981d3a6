"""User-space CPU instructions per blocking SendMessage of a whole HTTP server process, counted by valgrind.

``bench/instructions.py`` counts the ASGI app alone. This counts everything the server process executes for one
request over a real loopback socket: the HTTP server (uvicorn, httptools), the event loop, the app. The kernel's
work (system calls, loopback TCP) is not counted; ``--cpu`` adds what the kernel reports instead (user and system
CPU per request from ``/proc/PID/stat``, at 16 concurrent clients, no valgrind: a timing, so machine- and
load-dependent, read as a ratio between servers measured in the same run).

    python bench/server_instructions.py                     # relaykit serve bench/echo.py --store memory
    python bench/server_instructions.py --cmd \
        "$HOME/.cache/a2a-bench/venv-bench/bin/python ../shared/bench/peers/baseline/starlette_echo.py {port}"
    python bench/server_instructions.py --cpu               # + user/system CPU per request, no valgrind

The server is started under ``valgrind --tool=callgrind``; after a warm-up the counters are zeroed
(``callgrind_control -z``), one keep-alive connection sends the requests one after another (the same request the
shared harness sends: ``Host``, ``Accept``, ``A2A-Version``, ``Content-Type``, ``Content-Length``), and the counters
are dumped (``-d``). The server's idle ticks in that time (uvicorn wakes every 0.1 s) are measured alone over the same
number of seconds and subtracted. Repeatable to about 1%; ``PYTHONHASHSEED`` is fixed.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _procs import ROOT, free_port

_TOTALS = re.compile(r"^(?:summary|totals): (\d+)", re.M)
_LENGTH = re.compile(rb"content-length: *(\d+)", re.I)


def _request(port: int, n: int) -> bytes:
    message = {"messageId": f"m-{n}-{time.time_ns()}", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}).encode()
    return (
        f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\nA2A-Version: 1.0\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _client(port: int, count: int, start: int, timeout: float) -> None:
    """``count`` requests, one after another, on one keep-alive connection; each answer read whole and checked."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count):
            sock.sendall(_request(port, start + i))
            buf = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                buf += chunk
                end = buf.find(b"\r\n\r\n")
                found = _LENGTH.search(buf, 0, end) if end >= 0 else None
                if found is not None and len(buf) >= end + 4 + int(found.group(1)):
                    break
            if b"TASK_STATE_COMPLETED" not in buf:
                raise RuntimeError(f"unexpected answer: {buf[:300]!r}")


def _wait_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds:.0f} s")


def _stop(server: subprocess.Popen[bytes]) -> None:
    """Stop the server by its PID: SIGTERM, then SIGKILL after a minute (valgrind makes a shutdown slow)."""
    server.terminate()
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(10)


def _argv(cmd: str, port: int) -> list[str]:
    return shlex.split(cmd.replace("{port}", str(port)))


def _dumped(pid: int, out: str) -> int:
    """Dump the counters of the running process; the instructions counted since they were last zeroed."""
    before = set(glob.glob(out + ".*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True, timeout=120)
    for _ in range(600):
        new = sorted(set(glob.glob(out + ".*")) - before)
        if new:
            text = Path(new[-1]).read_text(errors="replace")
            found = _TOTALS.search(text)
            if found is not None:
                return int(found.group(1))
        time.sleep(0.1)
    raise TimeoutError("callgrind wrote no dump")


def instructions(cmd: str, requests: int, warmup: int) -> float:
    """User-space instructions per request of the server ``cmd`` starts (``{port}`` in it is replaced)."""
    port = free_port()
    out = os.path.join(tempfile.mkdtemp(), "callgrind.out")
    env = dict(os.environ, PYTHONHASHSEED="0")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *_argv(cmd, port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, 300)
        _client(port, warmup, 0, 60)
        subprocess.run(["callgrind_control", "-z", str(server.pid)], capture_output=True, check=True, timeout=120)
        started = time.monotonic()
        _client(port, requests, 1_000_000, 60)
        elapsed = time.monotonic() - started
        busy = _dumped(server.pid, out)
        # The same number of seconds with nothing to do: the server's own ticks, subtracted.
        idle_started = time.monotonic()
        time.sleep(elapsed)
        idle = _dumped(server.pid, out) * elapsed / (time.monotonic() - idle_started)
    finally:
        _stop(server)
    return (busy - idle) / requests


async def _async_load(port: int, clients: int, seconds: float) -> int:
    """``clients`` keep-alive connections sending requests one after another for ``seconds``; requests answered."""
    deadline = time.monotonic() + seconds
    done = [0]

    async def one(k: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            n = 0
            while time.monotonic() < deadline:  # bounded by the deadline, each answer by a timeout
                writer.write(_request(port, 1_000_000 * (k + 1) + n))
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                found = _LENGTH.search(head)
                assert found is not None, head
                body = await asyncio.wait_for(reader.readexactly(int(found.group(1))), 30)
                if b"TASK_STATE_COMPLETED" not in body:
                    raise RuntimeError(f"unexpected answer: {body[:300]!r}")
                n += 1
            done[0] += n
        finally:
            writer.close()

    await asyncio.gather(*(one(k) for k in range(clients)))
    return done[0]


def cpu(cmd: str, seconds: float, clients: int) -> tuple[float, float, int]:
    """(user µs, system µs, requests) per request of the server ``cmd`` starts, at ``clients`` concurrent clients."""
    port = free_port()
    server = subprocess.Popen(_argv(cmd, port), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tick = os.sysconf("SC_CLK_TCK")

    def times() -> tuple[int, int]:
        fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])  # utime, stime (fields 14 and 15 of stat)

    try:
        _wait_port(port, 60)
        asyncio.run(_async_load(port, clients, 1.0))  # warm-up
        user0, system0 = times()
        count = asyncio.run(_async_load(port, clients, seconds))
        user1, system1 = times()
    finally:
        _stop(server)
    scale = 1e6 / tick / count
    return (user1 - user0) * scale, (system1 - system0) * scale, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    relaykit = (
        f"{sys.executable} -m relaykit.cli serve bench/echo.py --port {{port}} --store memory --log-level warning"
    )
    parser.add_argument("--cmd", default=relaykit, help="the server's command line; {port} is replaced")
    parser.add_argument("--requests", type=int, default=300, help="requests counted (default 300)")
    parser.add_argument("--warmup", type=int, default=300, help="requests before counting (default 300)")
    parser.add_argument("--cpu", action="store_true", help="also user/system CPU per request, no valgrind")
    parser.add_argument("--seconds", type=float, default=8.0, help="--cpu: seconds of load (default 8)")
    parser.add_argument("--clients", type=int, default=16, help="--cpu: concurrent clients (default 16)")
    args = parser.parse_args()
    per_request = instructions(args.cmd, args.requests, args.warmup)
    print(f"send: {per_request:,.0f} user-space instructions per request (whole server, one client)", flush=True)
    if args.cpu:
        user, system, count = cpu(args.cmd, args.seconds, args.clients)
        print(f"send: {user:.1f} µs user + {system:.1f} µs system CPU per request ({count} requests, c={args.clients})")


if __name__ == "__main__":
    main()
