"""Fixtures for the HTTP tests: relaykit servers started as separate processes on 127.0.0.1.

``relaykit_server(target, store=..., env=...)`` runs ``python -m relaykit.cli serve TARGET --port P --store S`` from the
repository root, waits (bounded) until ``GET /readyz`` answers 200 and returns the server's base URL. Servers are
shared for the whole session (one per distinct target/store/env) and stopped at the end: SIGTERM, a bounded wait,
then SIGKILL.

Why this directory has no ``__init__.py``: with pytest's default ``prepend`` import mode a package named ``http``
makes ``tests/`` the import root, and ``tests/http`` then shadows the standard library's ``http`` package (verified:
``import http.client`` fails and nothing imports). As plain directories, the modules here keep unique basenames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from _servers import ServerFactory


@pytest.fixture(scope="session")
def relaykit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """``relaykit_server("examples/echo.py", store="memory", env={"SLOW_SECONDS": "3"})`` ⇒ base URL."""
    factory = ServerFactory(tmp_path_factory.mktemp("relaykit-servers"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh SQLite store URL (absolute path) for servers that should persist."""
    return "sqlite:///" + str(tmp_path_factory.mktemp("relaykit-sqlite") / "relaykit.db")
