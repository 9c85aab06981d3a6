"""A task is a task across protocol versions in the scale-out mode: two replicas on one PostgreSQL store and one
Redis bus; a task created over 0.3 on one replica is read, streamed (resubscribe) and cancelled over 1.0 on the
other, and the other way round. The 0.3 side is relaykit's own client pinned to the 0.3 interface (``support.pinned``);
each direction uses a different binding pair so both the JSON-RPC and the REST codec cross replicas."""

from __future__ import annotations

import asyncio

import pytest
from support.pinned import pinned_client

from cluster.deploy import Deploy
from relaykit import Task, TaskState

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(90)]

WAIT = 20.0  # seconds: the bound on each direction


async def test_a_task_is_a_task_across_versions_and_replicas(deploy: Deploy) -> None:
    first, second = deploy(count=2).servers
    for creator, maker_binding, reader_binding in (("0.3", "JSONRPC", "HTTP+JSON"), ("1.0", "HTTP+JSON", "JSONRPC")):
        other = "1.0" if creator == "0.3" else "0.3"
        maker = pinned_client(first.url, maker_binding, creator, timeout=WAIT)
        reader = pinned_client(second.url, reader_binding, other, timeout=WAIT)
        try:
            async with asyncio.timeout(WAIT):
                done = await maker.send("2")
                assert isinstance(done, Task)
                seen = await reader.get_task(done.id)
                assert seen.status.state is TaskState.COMPLETED, (creator, seen.status)
                assert seen.artifacts[0].text_content == "chunk 0chunk 1"
                # a running task, resubscribed to its end through the other replica and the other version
                running = await maker.send("6 0.1", return_immediately=True)
                assert isinstance(running, Task)
                events = [e async for e in reader.subscribe(running.id)]
                final = getattr(events[-1], "status", None)
                assert final is not None
                assert final.state is TaskState.COMPLETED, (creator, events[-1])
                chunks = "".join(
                    p.text for e in events if getattr(e, "artifact", None) is not None for p in e.artifact.parts
                )
                assert chunks.endswith("chunk 5")
                # cancelled through the other replica and version; both see it
                slow = await maker.send("200 0.1", return_immediately=True)
                assert isinstance(slow, Task)
                canceled = await reader.cancel(slow.id)
                assert canceled.status.state is TaskState.CANCELED
                assert (await maker.get_task(slow.id)).status.state is TaskState.CANCELED
        finally:
            await maker.aclose()
            await reader.aclose()
