"""Gap 5 (issue 19): a task a killed server left WORKING is failed "server restarted" on start like any other
terminal transition: its webhook gets the FAILED notification, and a subscriber coming back with its Last-Event-ID
gets the FAILED event.

Real processes: ``relaykit serve`` on a SQLite file (SIGKILLed, then started again on the same file) and the webhook
recorder of the push tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.cluster.client import message, open_stream, open_subscribe
from tests.push.push_helpers import Recorder, Server, wait_until
from tests.support.servers import start_serve

AGENT = "tests/cluster/agents.py:agent"
PUSH_ALLOW = ("--push-allow", "127.0.0.1")


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    try:
        yield made
    finally:
        made.close()


async def test_a_task_failed_at_restart_is_pushed_and_published(recorder: Recorder, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'restart.db'}"
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(AGENT, logs, store=store, args=PUSH_ALLOW)
    # 1.5 s between chunks: each chunk is checkpointed (at most 1 s apart), so the id the client saw last is stored.
    body = message("100 1.5")
    body["configuration"] = {"taskPushNotificationConfig": {"url": recorder.url("/hook"), "token": "t"}}
    try:
        async with httpx.AsyncClient() as http, open_stream(http, server.url, body) as stream:
            second = await stream.until(lambda e: e.chunk == "chunk 1")
            task_id = second.task_id
            last_seen = second.id
            server.kill9()
        assert task_id is not None
        assert last_seen is not None
        server = start_serve(AGENT, logs, store=store, args=PUSH_ALLOW)
        async with (
            httpx.AsyncClient() as http,
            open_subscribe(http, server.url, task_id, last_event_id=last_seen) as resumed,
        ):
            events = await resumed.rest()
    finally:
        server.stop()
    assert [(e.id, e.kind, e.state, e.status_text()) for e in events] == [
        (last_seen + 1, "statusUpdate", "TASK_STATE_FAILED", "server restarted")
    ]
    # The webhook got every event before the kill, then the FAILED status from the restarted server.
    pushed = recorder.wait_accepted("/hook", 1)
    deadline = asyncio.get_running_loop().time() + 10
    while pushed[-1]["json"].get("statusUpdate", {}).get("status", {}).get("state") != "TASK_STATE_FAILED":
        assert asyncio.get_running_loop().time() < deadline, [r["json"] for r in pushed]
        pushed = recorder.wait_accepted("/hook", len(pushed) + 1)
    failed = pushed[-1]["json"]["statusUpdate"]
    assert failed["taskId"] == task_id
    assert failed["status"]["message"]["parts"][0]["text"] == "server restarted"


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(90)
def test_a_task_failed_worker_lost_is_pushed(
    recorder: Recorder, postgres_url: str, redis_url: str, cluster_namespace: str, tmp_path: Path
) -> None:
    """Scale-out: the replica running a task dies; another one fails it "worker lost" and its webhook is told."""
    args = (
        *("--bus", redis_url, "--namespace", cluster_namespace, "--lease", "2"),
        *("--push-allow", "127.0.0.1"),
    )
    a = Server(AGENT, *args, store=postgres_url, log_dir=tmp_path)
    b: Server | None = None
    try:
        reply = a.send(
            "200 0.2", push={"id": "hook", "url": recorder.url("/hook"), "token": "t"}, returnImmediately=True
        )
        assert reply.status_code == 200, reply.text
        task_id = reply.json()["task"]["id"]
        recorder.wait_accepted("/hook", 2)  # A runs it: the task and its first chunk were pushed
        b = Server(AGENT, *args, store=postgres_url, log_dir=tmp_path)
        a.kill()

        def failed() -> dict[str, Any] | None:
            for record in recorder.accepted("/hook"):
                update = record["json"].get("statusUpdate", {})
                if update.get("status", {}).get("state") == "TASK_STATE_FAILED":
                    return dict(update)
            return None

        update = wait_until(failed, timeout=30, what="the FAILED notification")
    finally:
        a.kill()
        if b is not None:
            b.stop()
    assert update["taskId"] == task_id
    assert update["status"]["message"]["parts"][0]["text"] == "worker lost"
