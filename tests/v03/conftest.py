"""Fixtures for the A2A 0.3 tests: the a2a-sdk 0.3.26 environment (``support.sdk03``) and relaykit servers.

* ``sdk03``: the 0.3.26 interpreter; skipped with the reason when it cannot be made, except under ``CI=true``,
  where that fails the run (the interop proof must not silently vanish);
* ``js_sdk03``: the directory holding @a2a-js/sdk 0.3.14 for node (``support.jssdk``), skipped and failed alike;
* ``dual_server``: ``relaykit serve tests/client/_agents.py:kitchen`` with gRPC, webhooks to 127.0.0.1 allowed,
  speaking 1.0 and 0.3 (the default);
* ``only10_server``: the same with ``--protocol 1.0``;
* ``strict_server``: ``tests/client/_agents.py:strict_app`` (the kitchen requiring ``REQUIRED_EXTENSION``) with gRPC.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.jssdk import JsSdkUnavailable, js_sdk_dir
from support.sdk03 import SdkUnavailable, in_ci, sdk03_python
from support.servers import ServerPool, ServerProcess, start_serve

KITCHEN = "tests/client/_agents.py:kitchen"
STRICT = "tests/client/_agents.py:strict_app"
DRIVER = Path(__file__).with_name("sdk03_driver.py")
EDGES_DRIVER = Path(__file__).with_name("sdk03_edges.py")
JS_SDK03 = "0.3.14"  # the newest of @a2a-js/sdk's 0.3 line
DRIVER_TIMEOUT = 240.0  # seconds for one whole driver run (every step inside is bounded by 20 s)


@pytest.fixture(scope="session")
def sdk03() -> Path:
    try:
        return sdk03_python()
    except SdkUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true: the a2a-sdk 0.3.26 environment must be made: {exc}")
        pytest.skip(f"a2a-sdk 0.3.26 environment unavailable (PyPI unreachable?): {exc}")


@pytest.fixture(scope="session")
def js_sdk03() -> Path:
    """The @a2a-js/sdk 0.3.14 directory (``support.jssdk``); skipped with the reason locally, failed under CI."""
    try:
        return js_sdk_dir(JS_SDK03)
    except JsSdkUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true: @a2a-js/sdk {JS_SDK03} is needed: {exc}")
        pytest.skip(f"@a2a-js/sdk {JS_SDK03} unavailable (node, npm or the registry missing): {exc}")


@pytest.fixture(scope="session")
def v03_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    with ServerPool(tmp_path_factory.mktemp("v03-servers")) as pool:
        yield pool


@pytest.fixture(scope="session")
def dual_server(v03_servers: ServerPool) -> ServerProcess:
    return v03_servers.get("dual", lambda d: start_serve(KITCHEN, d, grpc=True, args=["--push-allow", "127.0.0.1"]))


@pytest.fixture(scope="session")
def only10_server(v03_servers: ServerPool) -> ServerProcess:
    return v03_servers.get("only10", lambda d: start_serve(KITCHEN, d, grpc=True, args=["--protocol", "1.0"]))


@pytest.fixture(scope="session")
def strict_server(v03_servers: ServerPool) -> ServerProcess:
    """The kitchen requiring ``REQUIRED_EXTENSION`` (and advertising an extended card it has not got), with gRPC."""
    return v03_servers.get("strict", lambda d: start_serve(STRICT, d, grpc=True))


def run_driver(python: Path, script: Path, *args: str, timeout: float = DRIVER_TIMEOUT) -> Any:
    """Run a driver script under the 0.3.26 interpreter; its last stdout line is its JSON report."""
    done = subprocess.run(
        [str(python), str(script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"driver failed ({done.returncode}): {done.stderr[-3000:]}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"driver printed nothing: {done.stderr[-3000:]}"
    return json.loads(lines[-1])
