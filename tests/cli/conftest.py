"""Fixtures for the CLI client tests: the ``examples/`` agents served by ``relaykit serve`` subprocesses, and a
runner for ``python -m relaykit.cli …``.

The four example servers start together (in parallel, once per session) on free 127.0.0.1 ports with the memory
store; each is stopped at the end (SIGTERM, a bounded wait, then SIGKILL). Mirrors ``tests/http/conftest.py``,
with its own fixture names.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.servers import HOST, REPO_ROOT, environ, free_port, start_parallel, start_serve, stop_all

CLI_TIMEOUT = 30.0  # seconds any one CLI command may take
# "slow" outlives any test that cancels or watches it even on a loaded machine (each CLI call costs a process
# start); "slow_short" ends by itself soon enough for a test that follows it to COMPLETED.
SLOW_SECONDS = "60"
SHORT_SECONDS = "5"
EXAMPLES = {
    "echo": ("examples/echo.py", {}),
    "stream": ("examples/stream.py", {}),
    "ask": ("examples/ask.py", {}),
    "slow": ("examples/slow.py", {"SLOW_SECONDS": SLOW_SECONDS}),
    "slow_short": ("examples/slow.py", {"SLOW_SECONDS": SHORT_SECONDS}),
}
CLI_ENV: dict[str, str | None] = {"TERM": "dumb", "RELAYKIT_TOKEN": None}  # None: removed


def cli_env() -> dict[str, str]:
    return environ(CLI_ENV)


@pytest.fixture(scope="session")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``{"echo": url, "stream": url, "ask": url, "slow": url, "slow_short": url}``: the example agents, served."""
    logs = tmp_path_factory.mktemp("cli-servers")
    starters = [
        functools.partial(start_serve, target, logs, name=name, env={**CLI_ENV, **extra_env})
        for name, (target, extra_env) in EXAMPLES.items()
    ]
    servers = start_parallel(starters)
    try:
        yield {name: server.url for name, server in zip(EXAMPLES, servers, strict=True)}
    finally:
        stop_all(servers)


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
