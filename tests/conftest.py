"""Fixtures for tests that need the external test services (CONTRACT "Test services").

``postgres_url``: the PostgreSQL server named by ``RELAYKIT_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``), checked once per session with a bounded connect. When it cannot be
reached the test is skipped with the reason, except under ``CI=true``, where an unreachable service is a failure
(CI is supposed to have it running: ``scripts/services``).

``pg_namespace``: a fresh namespace (``rk_<random hex>``) on that server, its tables dropped at teardown, so reruns on
a server that keeps state from earlier runs stay correct. ``pg_namespaces()`` makes more when a test needs several.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
PG_CONNECT_TIMEOUT = 3.0  # seconds: a reachable local server answers in milliseconds

_T = TypeVar("_T")


def in_ci() -> bool:
    """Whether this run is CI (``CI=true``), where a missing test service fails instead of skipping."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def run_isolated(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine on a private event loop in a helper thread.

    For sync fixtures: they may be set up or torn down while pytest-asyncio's loop is current (or even running, for
    a sync fixture requested from an async one), where ``asyncio.run`` would fail or disturb that loop.
    """
    result: list[_T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(factory()))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="relaykit-test-service")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def _service_down(what: str, variable: str, url: str, reason: str) -> None:
    message = f"{what} test server {url} is unreachable ({reason}); start it (scripts/services) or set {variable}"
    if in_ci():
        pytest.fail(f"CI=true: {message}", pytrace=False)
    pytest.skip(message)


_pg_status: dict[str, str | None] = {}


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The reachable test PostgreSQL URL (skips, or under CI fails, when the server is down)."""
    url = os.environ.get("RELAYKIT_TEST_PG") or PG_DEFAULT
    if url not in _pg_status:
        _pg_status[url] = _probe_postgres(url)
    reason = _pg_status[url]
    if reason is not None:
        _service_down("PostgreSQL", "RELAYKIT_TEST_PG", url, reason)
    return url


def _probe_postgres(url: str) -> str | None:
    try:
        import asyncpg
    except ImportError:
        return "asyncpg is not installed (pip install 'relaykit[postgres]')"

    async def probe() -> None:
        conn = await asyncpg.connect(url, timeout=PG_CONNECT_TIMEOUT)
        try:
            await conn.fetchval("SELECT 1")
        finally:
            await conn.close()

    try:
        run_isolated(probe)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def new_namespace() -> str:
    """A namespace no earlier run used: ``rk_`` and 12 random hex digits."""
    return f"rk_{secrets.token_hex(6)}"


def drop_pg_namespace(url: str, namespace: str) -> None:
    """Drop every table of ``namespace`` on ``url``."""
    from relaykit.backends._postgres import drop_namespace

    run_isolated(lambda: drop_namespace(url, namespace))


@pytest.fixture
def pg_namespaces(postgres_url: str) -> Iterator[Callable[[], str]]:
    """A factory of fresh namespaces on the test server; all of them are dropped at teardown."""
    made: list[str] = []

    def make() -> str:
        namespace = new_namespace()
        made.append(namespace)
        return namespace

    yield make
    for namespace in made:
        drop_pg_namespace(postgres_url, namespace)


@pytest.fixture
def pg_namespace(pg_namespaces: Callable[[], str]) -> str:
    """One fresh namespace on the test server, dropped at teardown."""
    return pg_namespaces()
