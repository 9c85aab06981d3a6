"""Server processes for the client tests: ``relaykit serve`` and the a2a-sdk server script, on 127.0.0.1.

``start_relaykit(target, …)`` and ``start_sdk(…)`` start a process on a free port, wait (bounded poll of an HTTP URL:
an external process, not in-process code) until it answers 200, and return a ``ServerProcess``; ``stop()`` sends
SIGTERM, waits (bounded), then SIGKILLs, and always reaps the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
READY_TIMEOUT = 20.0  # seconds for a process to answer its ready URL
STOP_TIMEOUT = 10.0  # seconds after SIGTERM before SIGKILL
POLL_INTERVAL = 0.05  # polling an external process


def free_port() -> int:
    """A port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """One running server process."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, size: int = 4000) -> str:
        with contextlib.suppress(ValueError):
            self.log_file.flush()
        return self.log_path.read_text(errors="replace")[-size:]

    def stop(self) -> None:
        """SIGTERM, a bounded wait, then SIGKILL; reaps the process and closes the log."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=STOP_TIMEOUT)
        finally:
            self.log_file.close()


def _wait_ready(proc: subprocess.Popen[bytes], url: str) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return True
            time.sleep(POLL_INTERVAL)
    return False


Launch = Callable[[int], tuple[list[str], dict[str, str]]]


def _start(name: str, launch: Launch, ready_path: str, log_dir: Path, port: int | None) -> ServerProcess:
    last = ""
    for attempt in range(3):  # a free port can be taken between probe and bind: retry on a fresh one
        chosen = port if port is not None else free_port()
        command, env = launch(chosen)
        log_path = log_dir / f"{name}-{chosen}-{attempt}.log"
        log_file = log_path.open("wb")
        proc = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        server = ServerProcess(name, chosen, proc, log_path, log_file)
        if _wait_ready(proc, f"http://{HOST}:{chosen}{ready_path}"):
            return server
        last = server.log_tail()
        server.stop()
        if port is not None:
            break
    raise RuntimeError(f"{name} did not become ready; last log:\n{last}")


def start_relaykit(
    target: str,
    log_dir: Path,
    *,
    args: Sequence[str] = (),
    public_url: str | None = None,
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> ServerProcess:
    """``relaykit serve TARGET`` (memory store) on a free port; ``public_url`` defaults to the server's own URL.

    Apps built with ``create_app`` in ``_agents.py`` read their public URL from ``RELAYKIT_TEST_PUBLIC_URL``.
    """

    def launch(p: int) -> tuple[list[str], dict[str, str]]:
        public = public_url or f"http://{HOST}:{p}"
        command = [
            sys.executable,
            "-m",
            "relaykit.cli",
            "serve",
            target,
            "--host",
            HOST,
            "--port",
            str(p),
            "--public-url",
            public,
            "--store",
            "memory",
            "--grace",
            "1",
            "--log-level",
            "warning",
            *args,
        ]
        return command, {"RELAYKIT_TEST_PUBLIC_URL": public, **(env or {})}

    name = target.replace("/", "_").replace(":", "-")
    return _start(name, launch, "/readyz", log_dir, port)


def start_sdk(log_dir: Path, *, public_url: str | None = None, port: int | None = None) -> ServerProcess:
    """The a2a-sdk 1.3.0 server script ``_sdk_server.py`` (JSON-RPC at ``/``, REST at the root)."""

    def launch(p: int) -> tuple[list[str], dict[str, str]]:
        command = [sys.executable, str(HERE / "_sdk_server.py"), "--port", str(p)]
        if public_url:
            command += ["--public-url", public_url]
        return command, {}

    return _start("sdk-server", launch, "/.well-known/agent-card.json", log_dir, port)
