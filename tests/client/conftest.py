"""Fixtures for the client tests: server processes (session-scoped, started on first use, stopped at the end) and
small helpers shared by the test modules.

Servers (each a separate process on 127.0.0.1, see ``support.servers`` and ``_procs.py``):

* ``kitchen_server``: ``relaykit serve tests/client/_agents.py:kitchen_app`` (push on, extended card configured, the
  out-of-band grant route of its in-task authorization);
* ``sdk_server``: ``python tests/client/_sdk_server.py`` (a2a-sdk 1.3.0, the same behaviour);
* ``nopush_server``: the kitchen executor served with ``--no-push``;
* ``strict_server``: ``strict_app`` (a required extension; an extended card advertised but not configured);
* ``raising_server``: ``raising_app`` (its handler raises any error of the table on demand);
* ``timeout_server``: ``timeout_app`` (a blocking SendMessage answers after 0.1 s, the task WORKING if it still is).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.servers import ServerPool, ServerProcess, start_serve

from client._procs import start_sdk

AGENTS = "tests/client/_agents.py"


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    with ServerPool(tmp_path_factory.mktemp("client-servers")) as pool:
        yield pool


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("client-logs")


@pytest.fixture(scope="session")
def kitchen_server(servers: ServerPool) -> ServerProcess:
    return servers.get("kitchen", lambda d: start_serve(f"{AGENTS}:kitchen_app", d))


@pytest.fixture(scope="session")
def sdk_server(servers: ServerPool) -> ServerProcess:
    return servers.get("sdk", lambda d: start_sdk(d))


@pytest.fixture(scope="session")
def nopush_server(servers: ServerPool) -> ServerProcess:
    return servers.get("nopush", lambda d: start_serve(f"{AGENTS}:kitchen", d, args=["--no-push"]))


@pytest.fixture(scope="session")
def strict_server(servers: ServerPool) -> ServerProcess:
    return servers.get("strict", lambda d: start_serve(f"{AGENTS}:strict_app", d))


@pytest.fixture(scope="session")
def raising_server(servers: ServerPool) -> ServerProcess:
    return servers.get("raising", lambda d: start_serve(f"{AGENTS}:raising_app", d))


@pytest.fixture(scope="session")
def timeout_server(servers: ServerPool) -> ServerProcess:
    return servers.get("timeout", lambda d: start_serve(f"{AGENTS}:timeout_app", d))


BINDINGS = [pytest.param("JSONRPC", id="jsonrpc"), pytest.param("HTTP+JSON", id="rest")]


@pytest.fixture(params=BINDINGS)
def binding(request: pytest.FixtureRequest) -> str:
    """The transport a test forces with ``Client(url, transports=[binding])``."""
    return str(request.param)
