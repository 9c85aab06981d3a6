"""Gap 7 (issue 19): PostgreSQL restarted while three replicas stream. Every task a client had been acknowledged
(its first event) ends terminal in the store (COMPLETED, or cleanly FAILED), none left SUBMITTED or WORKING.

A PRIVATE PostgreSQL (``initdb`` + ``postgres`` from ``/usr/lib/postgresql/*/bin`` on a free port, in a temp
directory; the machine's shared server is never touched; under root the binaries run as the ``postgres`` user),
three replicas on it and on the test Redis. It is stopped with ``-m immediate`` (a crash: no checkpoint) while the
tasks stream, and started again on the same port and data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from support.servers import HOST, environ, free_port, stop_all

from cluster.client import TERMINAL, ResumingReader, get_task, message
from cluster.deploy import AGENTS, Deployment, start_deployment
from cluster.test_outage import READY_WAIT, wait_readyz

pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]

TASKS = 6
TOTAL = 30  # chunks per task
DELAY = 0.2  # seconds between chunks: ~6 s per task, so every task spans the outage
OUTAGE = 1.0  # seconds PostgreSQL stays down
SETTLE = 60.0  # seconds for every task to reach a terminal state after PostgreSQL is back


class PrivatePostgres:
    """``initdb`` a data directory, run ``postgres`` on it; ``crash()`` (immediate stop) and ``start()`` again."""

    def __init__(self, bindir: str, port: int) -> None:
        self.bindir = bindir
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="relaykit-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            # initdb and postgres refuse to run as root: run them as the postgres user, owning the directory.
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.root.chmod(0o755)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = [*self.prefix, os.path.join(self.bindir, tool), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=environ())
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stdout}\n{result.stderr}")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses={HOST} -k {self.root} -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "30", "start")

    def crash(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    bindir = _bindir()
    if bindir is None or (os.geteuid() == 0 and shutil.which("runuser") is None):
        pytest.skip("no PostgreSQL binaries in /usr/lib/postgresql/*/bin (this test runs its own server)")
    server = PrivatePostgres(bindir, free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        server.remove()


@pytest.fixture
def deployment(
    private_postgres: PrivatePostgres, redis_url: str, redis_namespace: str, tmp_path: Path
) -> Iterator[Deployment]:
    d = start_deployment(
        redis_namespace,
        private_postgres.url,
        redis_url,
        tmp_path / "replicas",
        target=AGENTS,
        count=3,
        args=(),
        env=None,
    )
    try:
        yield d
    finally:
        stop_all([*d.servers, *d.extra])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        yield client


async def test_postgres_restart_while_three_replicas_stream(
    deployment: Deployment, private_postgres: PrivatePostgres, http: httpx.AsyncClient
) -> None:
    d = deployment
    assert await wait_readyz(http, d, 200) < READY_WAIT
    readers = [
        ResumingReader(d.urls[i % 3], d.urls[(i + 1) % 3], message(f"{TOTAL} {DELAY}"), deadline=90.0)
        for i in range(TASKS)
    ]
    running = [asyncio.create_task(reader.run(http)) for reader in readers]
    try:
        # Acknowledged: every client has its task's first event and a couple of chunks.
        for reader in readers:
            await reader.wait(lambda r: len(r.chunks()) >= 2, 20.0)
        private_postgres.crash()
        went_down = await wait_readyz(http, d, 503)
        await asyncio.sleep(OUTAGE)  # the outage itself: how long PostgreSQL stays away
        private_postgres.start()
        came_back = await wait_readyz(http, d, 200)
        await asyncio.gather(*running, return_exceptions=True)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    # Every acknowledged task settles: terminal in the store (read through every replica), within SETTLE seconds.
    deadline = time.monotonic() + SETTLE
    states: dict[str, str] = {}
    for reader in readers:
        assert reader.task_id is not None
        while True:
            states[reader.task_id] = (await get_task(http, d.urls[0], reader.task_id))["status"]["state"]
            if states[reader.task_id] in TERMINAL or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    print(
        f"\nreadyz 503 {went_down:.2f} s after the crash, 200 {came_back:.2f} s after the restart; "
        f"final states: {sorted(states.values())}; clients ended by: {[r.ended_by for r in readers]}"
    )
    assert all(state in TERMINAL for state in states.values()), (states, d.log_tails())
    for reader in readers:
        assert reader.task_id is not None
        for url in d.urls:
            assert (await get_task(http, url, reader.task_id))["status"]["state"] == states[reader.task_id]
