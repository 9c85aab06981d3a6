"""A scale-out deployment for the cluster tests: ``relaykit serve`` replicas on one PostgreSQL store and one Redis
bus, sharing a namespace, started with ``--lease 2 --heartbeat 0.4``.

``Deployment`` knows its processes and answers which of them holds a task's claim (the ``worker`` column of
``{NS}_tasks``: ``host:pid:hex``) and which executions the test agents recorded (``CLUSTER_RUN_LOG``).
The fixtures that start and stop deployments are in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from support.servers import Env, ServerProcess, start_replicas

AGENTS = "tests/cluster/agents.py"
LEASE = 2.0  # seconds: --lease of every replica
HEARTBEAT = 0.4  # seconds: --heartbeat
# A lost worker's task is taken over once its lease lapsed and some sweeper ran: sweeps come every 0.5-1.5 leases.
TAKEOVER = LEASE + 1.5 * LEASE + HEARTBEAT


@dataclass
class Deployment:
    """Replicas sharing one namespace."""

    namespace: str
    store: str
    bus: str
    servers: list[ServerProcess]
    log_dir: Path
    run_log: Path
    extra: list[ServerProcess] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    def alive(self) -> list[ServerProcess]:
        return [server for server in self.servers if server.alive]

    def args(self) -> list[str]:
        return ["--namespace", self.namespace, "--lease", f"{LEASE:g}", "--heartbeat", f"{HEARTBEAT:g}"]

    def by_pid(self, pid: int) -> ServerProcess | None:
        for server in [*self.servers, *self.extra]:
            if server.proc.pid == pid:
                return server
        return None

    def by_port(self, port: int) -> ServerProcess:
        return next(server for server in self.servers if server.port == port)

    async def claimant(self, task_id: str) -> str | None:
        """The worker id holding the task's claim (the store's ``worker`` column), or None."""
        import asyncpg

        conn = await asyncpg.connect(self.store, timeout=5)
        try:
            value = await conn.fetchval(f"SELECT worker FROM {self.namespace}_tasks WHERE id = $1", task_id)
        finally:
            await conn.close()
        return str(value) if value is not None else None

    async def wait_claimant(self, task_id: str, within: float = 10.0) -> ServerProcess:
        """The replica process whose worker holds the task's claim (polled until there is one, bounded)."""
        deadline = time.monotonic() + within
        while True:
            worker = await self.claimant(task_id)
            if worker is not None:
                server = self.by_pid(pid_of(worker))
                assert server is not None, f"worker {worker} is none of the deployment's processes"
                return server
            if time.monotonic() > deadline:
                raise AssertionError(f"nobody claimed task {task_id} within {within:g} s\n{self.log_tails()}")
            await asyncio.sleep(0.02)

    def runs(self, message_id: str | None = None) -> list[tuple[str, str, int]]:
        """Executions the agents recorded (``CLUSTER_RUN_LOG``): ``(task_id, message_id, pid)``."""
        if not self.run_log.exists():
            return []
        found = []
        for line in self.run_log.read_text().splitlines():
            task_id, mid, pid = line.split()
            if message_id is None or mid == message_id:
                found.append((task_id, mid, int(pid)))
        return found

    def log_tails(self, size: int = 3000) -> str:
        return "\n".join(
            f"--- {server.name} (port {server.port}, pid {server.proc.pid}, alive {server.alive}) ---\n"
            f"{server.log_tail(size)}"
            for server in [*self.servers, *self.extra]
        )


def pid_of(worker: str) -> int:
    """The pid in a worker id ``host:pid:hex``."""
    return int(worker.rsplit(":", 2)[1])


def start_deployment(
    namespace: str,
    store: str,
    bus: str,
    log_dir: Path,
    *,
    target: str,
    count: int,
    args: Sequence[str],
    env: Env | None,
) -> Deployment:
    log_dir.mkdir(parents=True, exist_ok=True)
    run_log = log_dir / "runs.log"
    deployment = Deployment(namespace, store, bus, [], log_dir, run_log)
    full_env: dict[str, str | None] = {"CLUSTER_RUN_LOG": str(run_log), **(env or {})}
    deployment.servers = start_replicas(
        target, count, log_dir, store=store, bus=bus, args=[*deployment.args(), *args], env=full_env
    )
    return deployment


Deploy = Callable[..., Deployment]
