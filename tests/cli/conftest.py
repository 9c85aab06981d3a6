"""Fixtures for the CLI client tests: the ``examples/`` agents served by ``relaykit serve`` subprocesses, and a
runner for ``python -m relaykit.cli …``.

The four example servers start together (in parallel, once per session) on free 127.0.0.1 ports with the memory
store; each is stopped at the end (SIGTERM, a bounded wait, then SIGKILL). Mirrors ``tests/http/conftest.py``,
with its own fixture names.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
READY_TIMEOUT = 20.0  # seconds for a server to answer GET /readyz 200
STOP_TIMEOUT = 10.0  # seconds after SIGTERM before SIGKILL
CLI_TIMEOUT = 30.0  # seconds any one CLI command may take
POLL_INTERVAL = 0.05  # waiting on an external process
SLOW_SECONDS = "2"
EXAMPLES = {
    "echo": ("examples/echo.py", {}),
    "stream": ("examples/stream.py", {}),
    "ask": ("examples/ask.py", {}),
    "slow": ("examples/slow.py", {"SLOW_SECONDS": SLOW_SECONDS}),
}


def free_port() -> int:
    """A port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def cli_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TERM": "dumb"}
    env.pop("RELAYKIT_TOKEN", None)
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)


def _ready(url: str, proc: subprocess.Popen[bytes], client: httpx.Client, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(httpx.HTTPError):
            if client.get(f"{url}/readyz").status_code == 200:
                return True
        time.sleep(POLL_INTERVAL)
    return False


@pytest.fixture(scope="session")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``{"echo": url, "stream": url, "ask": url, "slow": url}``: the example agents, served."""
    logs = tmp_path_factory.mktemp("cli-servers")
    procs: dict[str, tuple[subprocess.Popen[bytes], str, Path]] = {}
    try:
        for name, (target, extra_env) in EXAMPLES.items():
            port = free_port()
            log_path = logs / f"{name}.log"
            with log_path.open("wb") as log:
                proc = subprocess.Popen(
                    [
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
                        "memory",
                        "--grace",
                        "1",
                        "--log-level",
                        "warning",
                    ],
                    cwd=REPO_ROOT,
                    env={**cli_env(), **extra_env},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            procs[name] = (proc, f"http://{HOST}:{port}", log_path)
        deadline = time.monotonic() + READY_TIMEOUT
        with httpx.Client(timeout=2.0) as client:
            for name, (proc, url, log_path) in procs.items():
                if not _ready(url, proc, client, deadline):
                    raise RuntimeError(f"relaykit serve {name} did not become ready:\n{log_path.read_text()[-3000:]}")
        yield {name: url for name, (_proc, url, _log) in procs.items()}
    finally:
        for proc, _url, _log in procs.values():  # signal all first: they shut down in parallel
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _url, _log in procs.values():
            with contextlib.suppress(Exception):
                _stop(proc)


def run_cli(*args: str, stdin: str | None = None, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``python -m relaykit.cli ARGS`` to completion (bounded), stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "relaykit.cli", *args],
        cwd=REPO_ROOT,
        env=cli_env(),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli("send", url, "hi")`` ⇒ the finished process (``returncode``, ``stdout``, ``stderr``)."""
    return run_cli


def start_cli(*args: str, **popen: Any) -> subprocess.Popen[Any]:
    """``python -m relaykit.cli ARGS`` started in the background (the caller waits for it, bounded, and stops it)."""
    return subprocess.Popen([sys.executable, "-m", "relaykit.cli", *args], cwd=REPO_ROOT, env=cli_env(), **popen)


@pytest.fixture(scope="session")
def cli_process() -> Callable[..., subprocess.Popen[Any]]:
    """``cli_process("chat", url, stdin=…, stdout=…)`` ⇒ the started process (test modules don't import conftest:
    with several non-package conftest files the module named ``conftest`` is whichever was imported last)."""
    return start_cli


@pytest.fixture(scope="session")
def unused_url() -> str:
    """A URL nothing listens on (connection refused)."""
    return f"http://{HOST}:{free_port()}"
