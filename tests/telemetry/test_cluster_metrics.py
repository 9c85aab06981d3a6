"""The scale-out counters after a worker dies: the surviving replica's ``/metrics`` counts one lease takeover and one
task FAILED "worker lost" (two ``relaykit serve --metrics`` replicas on PostgreSQL + Redis, one SIGKILLed); and a
``relaykit worker`` serves its own metrics on ``--metrics-port``."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import httpx
import pytest
from cluster.deploy import AGENTS, start_deployment
from prometheus_client.parser import text_string_to_metric_families
from support.servers import ServerProcess, start_process, start_serve, stop_all

WITHIN = 20.0  # seconds: the lease (2 s) plus a sweep, with room for a loaded machine


def _counters(text: str) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("a2a_queue_")
    }


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_lost_worker_is_counted(
    cluster_namespace: str, postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    deployment = start_deployment(
        cluster_namespace, postgres_url, redis_url, tmp_path, target=AGENTS, count=2, args=["--metrics"], env=None
    )
    try:
        async with httpx.AsyncClient(timeout=10, headers={"A2A-Version": "1.0"}) as http:
            entry = deployment.servers[0]
            params = {
                "message": {"role": "ROLE_USER", "messageId": "m-lost", "parts": [{"text": "40 0.5"}]},
                "configuration": {"returnImmediately": True},
            }
            reply = await http.post(
                entry.url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
            )
            task_id = reply.json()["result"]["task"]["id"]
            runner = await deployment.wait_claimant(task_id)
            survivor = next(s for s in deployment.servers if s is not runner)
            runner.kill9()
            deadline = time.monotonic() + WITHIN
            while True:  # another process: polling is the way (bounded)
                got = await http.post(
                    survivor.url + "/", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
                )
                state = got.json()["result"]["status"]["state"]
                if state == "TASK_STATE_FAILED":
                    break
                assert time.monotonic() < deadline, f"still {state}\n{deployment.log_tails()}"
                await asyncio.sleep(0.1)
            counters = _counters((await http.get(survivor.url + "/metrics")).text)
    finally:
        stop_all(deployment.servers)
    assert counters["a2a_queue_lease_takeovers_total"] == 1
    assert counters["a2a_queue_worker_lost_total"] == 1
    assert counters["a2a_queue_depth"] == 0


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_worker_serves_its_own_metrics(
    cluster_namespace: str, postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    """``relaykit worker --metrics-port``: a worker has no HTTP binding, yet its executions are scraped (the
    accepting replica runs none: ``--no-worker``)."""
    common = ["--namespace", cluster_namespace]
    front = start_serve(
        "examples/echo.py", tmp_path, store=postgres_url, bus=redis_url, args=[*common, "--no-worker"], name="front"
    )
    worker: ServerProcess | None = None
    try:
        worker = start_process(
            lambda port: [
                *(sys.executable, "-m", "relaykit.cli", "worker", "examples/echo.py", "--log-level", "warning"),
                *("--store", postgres_url, "--bus", redis_url, *common, "--metrics-port", str(port)),
            ],
            tmp_path,
            name="worker",
            ready_path="/metrics",
        )
        async with httpx.AsyncClient(timeout=10, headers={"A2A-Version": "1.0"}) as http:
            params = {"message": {"role": "ROLE_USER", "messageId": "m-w", "parts": [{"text": "hello"}]}}
            reply = await http.post(
                front.url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
            )
            assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply.text
            scrape = await http.get(worker.url + "/metrics")
    finally:
        stop_all([front, *([worker] if worker else [])])
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
    }
    completed = frozenset({("state", "COMPLETED")})
    assert samples[("a2a_server_executions_total", completed)] == 1
    assert samples[("a2a_server_tasks", completed)] == 1
    assert samples[("a2a_queue_depth", frozenset())] == 0
