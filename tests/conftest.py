"""Fixtures for tests that need the external test services (CONTRACT "Test services").

``postgres_url``: the PostgreSQL server named by ``RELAYKIT_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``), checked once per session with a bounded connect. When it cannot be
reached the test is skipped with the reason, except under ``CI=true``, where an unreachable service is a failure
(CI is supposed to have it running: ``scripts/services``).

``pg_namespace``: a fresh namespace (``rk_<random hex>``) on that server, its tables dropped at teardown, so reruns on
a server that keeps state from earlier runs stay correct. ``pg_namespaces()`` makes more when a test needs several.

``redis_url``: the Redis server named by ``RELAYKIT_TEST_REDIS`` (default ``redis://127.0.0.1:6379/0``), probed the
same way (bounded, once per session; skip when down, fail under ``CI=true``). ``redis_namespace`` /
``redis_namespaces()``: fresh namespaces whose Redis keys (``SCAN MATCH <namespace>:*``) are deleted at teardown.

``cluster_namespace``: one fresh namespace for a scale-out deployment (PostgreSQL store and Redis bus share it); at
teardown its Redis keys are deleted and its PostgreSQL tables dropped. ``module_cluster_namespace``: the same, shared
by the tests of a module.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
PG_CONNECT_TIMEOUT = 3.0  # seconds: a reachable local server answers in milliseconds
REDIS_DEFAULT = "redis://127.0.0.1:6379/0"
REDIS_TIMEOUT = 3.0  # seconds: connect and each command of the probe and the cleanup

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
    from relaykit.backends.postgres import drop_namespace

    run_isolated(lambda: drop_namespace(url, namespace))


def namespace_factory(drop: Callable[[str], object]) -> Iterator[Callable[[], str]]:
    """For a fixture: yields a maker of fresh namespaces, then ``drop``s each one made."""
    made: list[str] = []

    def make() -> str:
        namespace = new_namespace()
        made.append(namespace)
        return namespace

    yield make
    for namespace in made:
        drop(namespace)


@pytest.fixture
def pg_namespaces(postgres_url: str) -> Iterator[Callable[[], str]]:
    """A factory of fresh namespaces on the test server; all of them are dropped at teardown."""
    yield from namespace_factory(lambda namespace: drop_pg_namespace(postgres_url, namespace))


@pytest.fixture
def pg_namespace(pg_namespaces: Callable[[], str]) -> str:
    """One fresh namespace on the test server, dropped at teardown."""
    return pg_namespaces()


_redis_status: dict[str, str | None] = {}


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The reachable test Redis URL (skips, or under CI fails, when the server is down)."""
    url = os.environ.get("RELAYKIT_TEST_REDIS") or REDIS_DEFAULT
    if url not in _redis_status:
        _redis_status[url] = _probe_redis(url)
    reason = _redis_status[url]
    if reason is not None:
        _service_down("Redis", "RELAYKIT_TEST_REDIS", url, reason)
    return url


def _redis_client(url: str) -> Any:
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT)


def _probe_redis(url: str) -> str | None:
    try:
        from redis import exceptions
    except ImportError:
        return "redis-py is not installed (pip install 'relaykit[redis]')"

    async def probe() -> None:
        client = _redis_client(url)
        try:
            await client.ping()
        finally:
            await client.aclose()

    try:
        run_isolated(probe)
    except (OSError, exceptions.RedisError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def drop_redis_namespace(url: str, namespace: str) -> int:
    """Delete every Redis key of ``namespace`` (``<namespace>:*``) on ``url``; returns how many were deleted."""

    async def drop() -> int:
        client = _redis_client(url)
        deleted = 0
        try:
            batch: list[bytes] = []
            async for key in client.scan_iter(match=f"{namespace}:*", count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    deleted += await client.delete(*batch)
                    batch.clear()
            if batch:
                deleted += await client.delete(*batch)
        finally:
            await client.aclose()
        return deleted

    return run_isolated(drop)


@pytest.fixture
def redis_namespaces(redis_url: str) -> Iterator[Callable[[], str]]:
    """A factory of fresh namespaces on the test Redis; their keys are deleted at teardown."""
    yield from namespace_factory(lambda namespace: drop_redis_namespace(redis_url, namespace))


@pytest.fixture
def redis_namespace(redis_namespaces: Callable[[], str]) -> str:
    """One fresh namespace on the test Redis, its keys deleted at teardown."""
    return redis_namespaces()


@contextlib.contextmanager
def fresh_cluster_namespace(postgres_url: str, redis_url: str) -> Iterator[str]:
    """A new namespace; on exit its Redis keys are deleted and its PostgreSQL tables dropped."""
    namespace = new_namespace()
    try:
        yield namespace
    finally:
        try:
            drop_redis_namespace(redis_url, namespace)
        finally:
            drop_pg_namespace(postgres_url, namespace)


@pytest.fixture
def cluster_namespace(postgres_url: str, redis_url: str) -> Iterator[str]:
    """One fresh namespace for a scale-out deployment (PostgreSQL store + Redis bus): its Redis keys are deleted and
    its PostgreSQL tables dropped at teardown (after the fixtures that use it, e.g. the replicas, are stopped)."""
    with fresh_cluster_namespace(postgres_url, redis_url) as namespace:
        yield namespace


@pytest.fixture(scope="module")
def module_cluster_namespace(postgres_url: str, redis_url: str) -> Iterator[str]:
    """``cluster_namespace`` shared by the tests of one module (e.g. one deployment of replicas for all of them)."""
    with fresh_cluster_namespace(postgres_url, redis_url) as namespace:
        yield namespace
