"""Fixtures for the inspector tests: the example agents served with ``--inspector``, a ``relaykit inspect``
process, an a2a-sdk 1.3.0 agent, an a2a-sdk 0.3.26 agent (``sdk03_inspect``), and one headless Chromium per module
(Playwright pointed at Debian's chromium).

Browser: ``RELAYKIT_CHROMIUM`` or ``chromium`` on PATH (``apt-get install chromium``; never ``playwright install``).
When it or the ``playwright`` package is missing the browser tests are skipped with the reason; under ``CI=true``
they fail instead (``.ci/run`` installs chromium).

Screenshots of every page the tests visit go to ``$RELAYKIT_SCREENSHOTS`` or, by default,
``<temp dir>/relaykit-inspector-screenshots`` (the same place every run, overwritten); the path is printed in the
test summary.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client._procs import start_sdk
from support.sdk03 import SdkUnavailable, in_ci, sdk03_python
from support.servers import ServerProcess, free_port, start_parallel, start_process, start_serve, stop_all

from inspector._browser import (
    CHROMIUM_ARGS,
    LAUNCH_TIMEOUT_MS,
    PAGE_TIMEOUT_MS,
    SHOTS,
    SLOW_SECONDS,
    STREAM_DELAY,
    chromium_path,
    missing,
    screenshot_dir,
)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SHOTS:
        terminalreporter.write_line(f"inspector screenshots ({len(SHOTS)}): {screenshot_dir()}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module's tests."""
    executable = chromium_path()
    if executable is None:
        missing("Chromium is not installed (apt-get install chromium, or set RELAYKIT_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package is not installed (pip install playwright; no browser download needed)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, timeout=LAUNCH_TIMEOUT_MS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (own context) with bounded waits; page errors fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    new = context.new_page()
    errors: list[str] = []
    new.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield new
    finally:
        context.close()
    assert not errors, f"errors in the page: {errors}"


def start_inspect(target: str, log_dir: Path, *args: str) -> ServerProcess:
    """``relaykit inspect TARGET --port P``, ready when its page answers."""

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "relaykit.cli", "inspect", target, "--port", str(port), *args]

    return start_process(command, log_dir, name="inspect", ready_path="/config.json")


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    """The example agents with ``--inspector`` and an a2a-sdk agent, started in parallel (once per module)."""
    logs = tmp_path_factory.mktemp("inspector-servers")
    serve = functools.partial(start_serve, log_dir=logs, args=["--inspector"])
    starters = {
        "echo": functools.partial(serve, "examples/echo.py", name="echo"),
        "stream": functools.partial(serve, "examples/stream.py", name="stream", env={"STREAM_DELAY": STREAM_DELAY}),
        "ask": functools.partial(serve, "examples/ask.py", name="ask"),
        "slow": functools.partial(
            serve,
            "examples/slow.py",
            name="slow",
            env={"SLOW_SECONDS": SLOW_SECONDS},
            args=["--inspector", "--push-allow", "127.0.0.1"],  # push configs to a local webhook
        ),
        "sdk": functools.partial(start_sdk, logs),
    }
    servers = start_parallel(list(starters.values()))
    running = dict(zip(starters, servers, strict=True))
    try:
        running["inspect"] = start_inspect(running["sdk"].url, logs)
        yield running
    finally:
        stop_all(running.values())


SDK03_SERVER = Path(__file__).resolve().parents[1] / "v03" / "sdk03_server.py"


@pytest.fixture(scope="module")
def sdk03_inspect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    """An a2a-sdk 0.3.26 agent (``tests/v03/sdk03_server.py`` in the SDK's cached environment, ``support.sdk03``) and
    ``relaykit inspect`` pointed at it. Skipped with the reason when that environment cannot be made, failed under
    ``CI=true`` (as in tests/v03)."""
    try:
        python = sdk03_python()
    except SdkUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true: the a2a-sdk 0.3.26 environment must be made: {exc}")
        pytest.skip(f"a2a-sdk 0.3.26 environment unavailable (PyPI unreachable?): {exc}")
    logs = tmp_path_factory.mktemp("inspector-sdk03")
    grpc_port = free_port()

    def command(port: int) -> list[str]:
        return [str(python), str(SDK03_SERVER), "--port", str(port), "--grpc-port", str(grpc_port)]

    running: dict[str, ServerProcess] = {}
    try:
        running["sdk03"] = start_process(command, logs, name="sdk03-agent", ready_path="/.well-known/agent-card.json")
        running["inspect"] = start_inspect(running["sdk03"].url, logs)
        yield running
    finally:
        stop_all(running.values())
