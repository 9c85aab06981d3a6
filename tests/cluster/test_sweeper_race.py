"""The sweeper must never fence off its own process's running execution (found by ``test_load.py``).

Under load, tasks wait in the work queue longer than ``unstarted_after`` (30 s by default: 1,000 tasks at ~25 tasks/s
on two cores), so a sweep lists them as unstarted orphans. Between the sweep's listing (and its ``registry`` check)
and its claim, the same process's queue consumer may claim the task and start it. The sweep's claim then succeeds
anyway (a claim by the worker that already holds the task) and bumps the task's version: the running execution's
next write is refused (``ConflictError``), its caller gets "the server could not record this task", and the task is
left to be failed or restarted by a later sweep.

This test plays that interleaving in one process (one replica in-process on the test PostgreSQL and Redis): a task is
running here, and the sweep step for it (``_claim`` then ``take_over``, exactly what ``Cluster._sweep_loop`` does for a
listed orphan) comes after. The execution must still complete.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cluster.agents import paced
from relaykit._enums import Role, TaskState
from relaykit._requests import SendMessageConfiguration, SendMessageRequest
from relaykit._types import Message, Part, Task
from relaykit.http import create_app
from relaykit.server import CallContext
from relaykit.server._takeover import take_over

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(60)]

WAIT = 8.0  # seconds: the task streams for ~1 s


@pytest.fixture
async def replica(postgres_url: str, redis_url: str, cluster_namespace: str) -> AsyncIterator[Any]:
    """One replica in-process; its own sweeps never run during the test (long lease, long unstarted delay)."""
    app = create_app(
        paced,
        store=postgres_url,
        bus=redis_url,
        namespace=cluster_namespace,
        push=False,
        lease=60.0,
        unstarted_after=3600.0,
        grace=1.0,
    )
    server = app.state.relaykit
    await server.start()
    try:
        yield server
    finally:
        stopping = asyncio.ensure_future(server.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10.0)
        if not done:
            # Should RedisEventBus.close() hang again (tests/backends/test_bus_contract.py): cancel its reader again.
            server.engine.bus._reader.cancel()
        await asyncio.wait_for(stopping, 10.0)


async def test_sweep_of_a_task_this_process_runs_leaves_the_execution_alone(replica: Any) -> None:
    engine = replica.engine
    cluster = engine.cluster
    request = SendMessageRequest(
        message=Message(message_id="m-sweep-race", role=Role.USER, parts=[Part(text="20 0.05")]),
        configuration=SendMessageConfiguration(return_immediately=True),
    )
    first = await asyncio.wait_for(engine.send_raw(request, CallContext()), WAIT)
    task_id = Task.model_validate_json(first).id
    assert task_id in engine.registry  # running here

    # The sweep step for a listed orphan that this process's consumer has meanwhile claimed and started.
    claim = await cluster._claim(task_id, "", "anonymous")
    if claim is not None:
        await take_over(cluster, claim)

    deadline = time.monotonic() + WAIT
    while True:
        record = await engine.store.get(task_id, tenant="", owner="anonymous")
        state = record.task.status.state
        if state not in (TaskState.SUBMITTED, TaskState.WORKING) and task_id not in engine.registry:
            break
        assert time.monotonic() < deadline, f"task {task_id} is still {state.name}"
        await asyncio.sleep(0.05)
    assert state is TaskState.COMPLETED, record.task.status
    parts = record.task.artifacts[0].parts
    assert "".join(part.text or "" for part in parts) == "".join(f"chunk {i}" for i in range(20))
