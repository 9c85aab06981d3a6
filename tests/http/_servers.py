"""Subprocess ``relaykit serve`` helpers shared by the HTTP tests (imported by conftest and by tests that need
their own server processes).
"""


from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
READY_TIMEOUT = 20.0  # seconds for a server process to answer GET /readyz 200
STOP_TIMEOUT = 10.0  # seconds after SIGTERM before SIGKILL
POLL_INTERVAL = 0.05  # waiting on an external process, not on in-process code


def free_port() -> int:
    """A port that was free a moment ago (bind 127.0.0.1:0 and read what the kernel chose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """One running ``relaykit serve``."""

    target: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, size: int = 4000) -> str:
        self.log_file.flush()
        return self.log_path.read_text(errors="replace")[-size:]

    def stop(self) -> None:
        """SIGTERM, a bounded wait, then SIGKILL; always reaps the process and closes the log."""
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


@dataclass
class ServerFactory:
    """Starts servers on demand and remembers them, so each distinct configuration runs once per session."""

    workdir: Path
    servers: dict[tuple[object, ...], ServerProcess] = field(default_factory=dict)

    def __call__(
        self,
        target: str,
        *,
        store: str = "memory",
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> str:
        """The base URL of a ready server for ``target`` (relative to the repository root)."""
        key = (target, store, tuple(sorted((env or {}).items())), args)
        server = self.servers.get(key)
        if server is None or server.proc.poll() is not None:
            server = self.start(target, store=store, env=env or {}, args=args, index=len(self.servers))
            self.servers[key] = server
        return server.base_url

    def start(
        self, target: str, *, store: str, env: dict[str, str], args: tuple[str, ...], index: int
    ) -> ServerProcess:
        last_error = ""
        for attempt in range(3):  # the free port can be taken between probe and bind: retry on a fresh one
            port = free_port()
            log_path = self.workdir / f"server-{index}-{attempt}.log"
            log_file = log_path.open("wb")
            command = [
                sys.executable,
                "-m",
                "relaykit.cli",
                "serve",
                target,
                "--host",
                HOST,
                "--port",
                str(port),
                "--public-url",
                f"http://{HOST}:{port}",
                "--store",
                store,
                "--grace",
                "1",
                "--log-level",
                "warning",
                *args,
            ]
            proc_env = {
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "RELAYKIT_TEST_PUBLIC_URL": f"http://{HOST}:{port}",  # for test apps that build their own card
                **env,
            }
            proc = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=proc_env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            server = ServerProcess(target, port, proc, log_path, log_file)
            if _wait_ready(server):
                return server
            last_error = server.log_tail()
            server.stop()
        raise RuntimeError(f"relaykit serve {target} did not become ready; last log:\n{last_error}")

    def stop_all(self) -> None:
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                server.stop()
        self.servers.clear()


def _wait_ready(server: ServerProcess) -> bool:
    """Poll ``GET /readyz`` until 200, the process exits, or the deadline passes."""
    deadline = time.monotonic() + READY_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{server.base_url}/readyz").status_code == 200:
                    return True
            time.sleep(POLL_INTERVAL)
    return False


