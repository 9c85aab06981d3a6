"""API replicas and separate workers (issue #6): ``relaykit serve --no-worker`` only accepts and relays,
``relaykit worker TARGET`` only runs queued work (no HTTP), and a message accepted by the one is run by the other.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from support.servers import REPO_ROOT, environ, stop_process

from cluster.client import artifact_texts, chunks, message, open_stream, send, wait_for_state
from cluster.deploy import AGENTS, HEARTBEAT, LEASE, Deploy, Deployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(90)]

WAIT = 20.0  # seconds: the bound on any one wait


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


async def test_an_api_replica_queues_and_a_worker_process_runs(deploy: Deploy, http: httpx.AsyncClient) -> None:
    d = deploy(AGENTS, 1, args=["--no-worker"])
    api = d.urls[0]
    # Accepted and stored SUBMITTED, and nobody runs it: the API replica takes no work (its caller waits).
    sending = asyncio.ensure_future(send(http, api, message("3 0.01")))
    row = await _only_task(d.store, d.namespace)
    assert row["state"] == "TASK_STATE_SUBMITTED"
    assert row["worker"] is None
    assert not sending.done()
    worker = _start_worker(d)
    try:
        sent = await asyncio.wait_for(sending, WAIT)
        task_id = sent["task"]["id"]
        assert task_id == row["id"]
        task = await wait_for_state(http, api, task_id, {"TASK_STATE_COMPLETED"}, WAIT)
        assert artifact_texts(task) == ["".join(chunks(3))]
        # The agent ran in the worker process, not in the API replica.
        assert [pid for ran, _, pid in d.runs() if ran == task_id] == [worker.pid]
        # Streaming through the API replica relays the worker's events live.
        async with open_stream(http, api, message("5 0.01")) as streaming:
            events = await streaming.rest(WAIT)
        assert [e.chunk for e in events if e.chunk is not None] == chunks(5)
        assert events[-1].state == "TASK_STATE_COMPLETED"
        assert {pid for _, _, pid in d.runs()} == {worker.pid}
        # A worker stops cleanly on SIGTERM.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=WAIT) == 0
    finally:
        output = b""
        if worker.poll() is None:
            stop_process(worker)
        if worker.stdout is not None:
            output = worker.stdout.read()
            worker.stdout.close()
        print(output.decode(errors="replace")[-3000:])


async def _only_task(store: str, namespace: str) -> dict[str, Any]:
    """The namespace's one task row, once there is one (polled, bounded)."""
    import asyncpg

    deadline = time.monotonic() + WAIT
    conn = await asyncpg.connect(store, timeout=5)
    try:
        while True:
            rows = await conn.fetch(f"SELECT id, state, worker FROM {namespace}_tasks")
            if rows:
                assert len(rows) == 1, rows
                return dict(rows[0])
            assert time.monotonic() < deadline, "the API replica stored no task"
            await asyncio.sleep(0.02)
    finally:
        await conn.close()


def _start_worker(d: Deployment) -> subprocess.Popen[bytes]:
    """``relaykit worker`` on the deployment's store, bus and namespace (the caller stops it)."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "relaykit.cli", "worker", AGENTS, "--store", d.store, "--bus", d.bus),
            *("--namespace", d.namespace, "--lease", f"{LEASE:g}", "--heartbeat", f"{HEARTBEAT:g}"),
        ],
        cwd=REPO_ROOT,
        env=environ({"CLUSTER_RUN_LOG": str(d.run_log)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
