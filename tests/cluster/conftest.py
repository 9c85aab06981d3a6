"""Fixtures of the cluster tests: scale-out deployments (``cluster.deploy.Deployment``) on fresh namespaces.

``deploy(target=AGENTS, count=3, …)`` (per test) and ``shared_deployment`` (three replicas of
``tests/cluster/agents.py`` per module) start ``relaykit serve`` replicas on one PostgreSQL store and one Redis bus
with a fresh namespace (``cluster_namespace``: tables and keys removed at teardown), and stop them all at teardown.

Services: skipped when PostgreSQL or Redis is down, failed under ``CI=true`` (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from support.servers import Env, stop_all

from cluster.deploy import AGENTS, Deploy, Deployment, start_deployment


@pytest.fixture
def deploy(cluster_namespace: str, postgres_url: str, redis_url: str, tmp_path: Path) -> Iterator[Deploy]:
    """``deploy(target=AGENTS, count=3, args=(), env=None, bus=None)``: replicas on the test's fresh namespace,
    stopped at teardown (``bus`` overrides the Redis URL, e.g. a private redis-server)."""
    made: list[Deployment] = []

    def make(
        target: str = AGENTS,
        count: int = 3,
        *,
        args: Sequence[str] = (),
        env: Env | None = None,
        bus: str | None = None,
    ) -> Deployment:
        deployment = start_deployment(
            cluster_namespace,
            postgres_url,
            bus or redis_url,
            tmp_path / f"deployment{len(made)}",
            target=target,
            count=count,
            args=args,
            env=env,
        )
        made.append(deployment)
        return deployment

    yield make
    for deployment in made:
        stop_all([*deployment.servers, *deployment.extra])


@pytest.fixture(scope="module")
def shared_deployment(
    module_cluster_namespace: str, postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """Three replicas of ``tests/cluster/agents.py`` shared by the tests of a module (tests that kill nothing)."""
    deployment = start_deployment(
        module_cluster_namespace,
        postgres_url,
        redis_url,
        tmp_path_factory.mktemp("cluster"),
        target=AGENTS,
        count=3,
        args=(),
        env=None,
    )
    yield deployment
    stop_all(deployment.servers)
