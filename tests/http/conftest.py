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
from support.servers import ServerPool, start_serve


@pytest.fixture(scope="session")
def relaykit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """``relaykit_server("examples/echo.py", store="memory", env={"SLOW_SECONDS": "3"})`` ⇒ base URL."""
    with ServerPool(tmp_path_factory.mktemp("relaykit-servers")) as pool:

        def server(
            target: str, *, store: str = "memory", env: dict[str, str] | None = None, args: tuple[str, ...] = ()
        ) -> str:
            key = (target, store, tuple(sorted((env or {}).items())), args)
            return pool.get(key, lambda logs: start_serve(target, logs, store=store, env=env, args=args)).url

        yield server


@pytest.fixture(scope="session")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh SQLite store URL (absolute path) for servers that should persist."""
    return "sqlite:///" + str(tmp_path_factory.mktemp("relaykit-sqlite") / "relaykit.db")
