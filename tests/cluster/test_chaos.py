"""Scale-out chaos (issue #6): a replica dies with SIGKILL while a client streams a task through a round-robin proxy.

Three replicas (``--lease 2 --heartbeat 0.4``) behind ``support.servers.RoundRobinProxy``. A raw resuming client
(``cluster.client.ResumingReader``: SendStreamingMessage, then SubscribeToTask with ``Last-Event-ID`` through the
proxy after every break; no de-duplication, so a repeated event would be visible) streams a paced task. The test finds
the process holding the task's claim (PostgreSQL column ``worker``: ``host:pid:hex``) and kills it, or kills the
replica the client is connected to.

* not idempotent (``paced``): the task ends FAILED with status message "worker lost", within the lease plus a sweep;
* idempotent (``resumable``): another worker runs it again and it ends COMPLETED with every chunk;
* in every case: never left WORKING, the client's SSE ids strictly increase, and no event it already had is sent
  again (a chunk text reappears only as part of a re-run that starts the artifact over, ``append`` false).

To kill "the replica the client is connected to" deterministically, the client is moved there first when the proxy
happened to connect it elsewhere: its connection is cut and it resumes (``Last-Event-ID``) directly on that replica.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from support.servers import RoundRobinProxy, ServerProcess

from cluster.client import (
    ArtifactView,
    ResumingReader,
    artifact_texts,
    assert_no_event_repeated,
    chunks,
    get_task,
    message,
    summary,
    text_of,
    wait_for_state,
)
from cluster.deploy import AGENTS, TAKEOVER, Deploy, Deployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(120)]

TOTAL = 40  # chunks per task
DELAY = 0.1  # seconds between chunks: the task streams for ~4 s
KILL_AFTER = 5  # chunks the client has before the kill
SLACK = 5.0  # seconds on top of the takeover time (a loaded 2-core machine)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        yield client


def front_port(proxy: RoundRobinProxy, ports: list[int]) -> int | None:
    """The backend the client's (only) proxied connection goes to."""
    live = [port for port in ports if proxy.live(port)]
    return live[0] if len(live) == 1 else None


async def move_client_to(reader: ResumingReader, proxy: RoundRobinProxy, server: ServerProcess, front: int) -> None:
    """Make the client's live connection one to ``server``: cut its proxied connection, let it resume there."""
    attached = reader.attached
    reader.resume_url = server.url
    assert proxy.cut(front) == 1
    await reader.wait(lambda r: r.attached > attached, 10.0)
    reader.resume_url = proxy.url


@pytest.mark.parametrize(
    ("agent", "victim"),
    [
        pytest.param("paced", "claimant", id="worker-lost-kill-claimant"),
        pytest.param("paced", "client-claimant", id="worker-lost-kill-clients-replica"),
        pytest.param("resumable", "claimant", id="idempotent-kill-claimant"),
        pytest.param("resumable", "client-claimant", id="idempotent-kill-clients-replica"),
        pytest.param("paced", "client-only", id="kill-clients-replica-not-the-claimant"),
    ],
)
async def test_kill9_mid_stream(deploy: Deploy, http: httpx.AsyncClient, agent: str, victim: str) -> None:
    d = deploy(f"{AGENTS}:{agent}")
    async with RoundRobinProxy(d.ports) as proxy:
        reader = ResumingReader(proxy.url, proxy.url, message(f"{TOTAL} {DELAY}"), deadline=60.0)
        running = asyncio.create_task(reader.run(http))
        try:
            await reader.wait(lambda r: len(r.chunks()) >= KILL_AFTER, 20.0)
            assert reader.task_id is not None
            task_id = reader.task_id
            claimant = await d.wait_claimant(task_id)
            front = front_port(proxy, d.ports)
            assert front is not None, "the client has no proxied connection"
            others = [server for server in d.servers if server is not claimant]
            if victim == "claimant":
                target = claimant
            elif victim == "client-claimant":
                target = claimant
                if front != claimant.port:
                    await move_client_to(reader, proxy, claimant, front)
            else:  # the client's replica, which must not be the claimant
                target = others[0] if front == claimant.port else d.by_port(front)
                if front != target.port:
                    await move_client_to(reader, proxy, target, front)
            seen_before = len(reader.chunks())
            killed_at = time.monotonic()
            target.kill9()
            await asyncio.wait_for(running, 60.0)
            ended_after = time.monotonic() - killed_at
        finally:
            if not running.done():
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
    survivors = d.alive()
    report = (
        f"agent={agent} victim={victim} front={front} claimant={claimant.port} killed={target.port} "
        f"chunks before kill={seen_before} ended {ended_after:.2f} s after the kill; connections={reader.connections}"
    )
    print(report)
    assert reader.ended_by == "terminal", f"{report}\n{d.log_tails()}"
    if victim != "claimant" or front == target.port:
        # The client's own connection died with the process: it resumed elsewhere.
        assert reader.attached >= 2, report
    last = reader.events[-1]
    final = await get_task(http, survivors[0].url, task_id)
    lost = agent == "paced" and target is claimant
    if lost:
        assert last.state == "TASK_STATE_FAILED", report
        assert last.status_text() == "worker lost", report
        assert final["status"]["state"] == "TASK_STATE_FAILED", final["status"]
        assert text_of(final["status"]["message"]["parts"]) == "worker lost"
        assert ended_after <= TAKEOVER + SLACK, report
        assert_no_event_repeated(reader.events, rerun_allowed=False)
        assert len(reader.chunks()) < TOTAL
    else:
        assert last.state == "TASK_STATE_COMPLETED", report
        assert final["status"]["state"] == "TASK_STATE_COMPLETED", final["status"]
        assert artifact_texts(final) == ["".join(chunks(TOTAL))], final.get("artifacts")
        view = ArtifactView()
        for event in reader.events:
            view.apply(event)
        assert view.texts() == ["".join(chunks(TOTAL))], summary(reader.events)
        assert_no_event_repeated(reader.events, rerun_allowed=agent == "resumable")
        bound = TOTAL * DELAY + (TAKEOVER if target is claimant else 0) + SLACK
        assert ended_after <= bound, report
    if agent == "resumable" and target is claimant:
        # Run twice: first by the killed worker, then again by another one.
        runs = d.runs(final["history"][0]["messageId"])
        assert [pid == target.proc.pid for _, _, pid in runs] == [True, False], runs
    # Every surviving replica reads the same final state, and nobody holds the finished task any more.
    for server in survivors:
        assert (await get_task(http, server.url, task_id))["status"] == final["status"]
    await wait_until_released(d, task_id)


async def wait_until_released(d: Deployment, task_id: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while (worker := await d.claimant(task_id)) is not None:
        assert time.monotonic() < deadline, f"task {task_id} is still claimed by {worker}"
        await asyncio.sleep(0.05)


async def test_kill9_of_an_idle_replica_changes_nothing(deploy: Deploy, http: httpx.AsyncClient) -> None:
    # Tasks sent through the proxy while one replica is dead: refused connections are skipped, every task completes.
    d = deploy(AGENTS)
    d.servers[1].kill9()
    async with RoundRobinProxy(d.ports) as proxy:
        replies = await asyncio.gather(*(_send_via(http, proxy.url, i) for i in range(12)))
    for i, reply in enumerate(replies):
        assert reply["status"]["state"] == "TASK_STATE_COMPLETED", reply
        assert artifact_texts(reply) == ["".join(chunks(i % 5 + 1))]
    # The dead worker held nothing: nothing was marked "worker lost".
    for reply in replies:
        task = await wait_for_state(http, d.servers[0].url, reply["id"], {"TASK_STATE_COMPLETED"}, 10.0)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def _send_via(http: httpx.AsyncClient, url: str, i: int) -> dict[str, object]:
    response = await http.post(f"{url}/message:send", json=message(f"{i % 5 + 1}"), headers={"A2A-Version": "1.0"})
    assert response.status_code == 200, response.text
    return response.json()["task"]  # type: ignore[no-any-return]
