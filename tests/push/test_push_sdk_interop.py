"""Interop with the official a2a-sdk 1.3.0, both ways.

* relaykit → a receiver built on the SDK: it parses each body with the SDK's own types and JSON parser (strict
  ``json_format.Parse`` into ``a2a.types.StreamResponse``) and checks ``X-A2A-Notification-Token`` as the SDK's
  sender sets it (the SDK has no receiver helper of its own).
* the SDK's sender (``BasePushNotificationSender`` over httpx, in an SDK agent process) → relaykit's
  ``WebhookReceiver`` in token-only mode (the SDK does not sign).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from push_helpers import A2A, HERE, Recorder, Server, serving, wait_until

from relaykit import StreamResponse, TaskState
from relaykit.push import WebhookReceiver

pytestmark = pytest.mark.interop

WAIT = 30.0


def test_an_sdk_built_receiver_accepts_relaykits_notifications(tmp_path: Path) -> None:
    receiver = Recorder("--sdk", "--token", "sdk-token")
    server = Server("examples/stream.py", "--push-allow", "127.0.0.1", log_dir=tmp_path)
    try:
        assert server.send("3", push={"url": receiver.url("/sdk"), "token": "sdk-token"}).status_code == 200
        records = receiver.wait_accepted("/sdk", 5)
        # A token the receiver does not expect: it refuses (401), as the SDK's convention has it.
        assert server.send("1", push={"url": receiver.url("/sdk-wrong"), "token": "not-it"}).status_code == 200
        wrong = wait_until(lambda: receiver.records("/sdk-wrong"), what="a refused notification")
    finally:
        server.stop()
        receiver.close()
    assert len(records) == 5
    assert [r["sdk_kind"] for r in records] == [
        "task",
        "artifact_update",
        "artifact_update",
        "artifact_update",
        "status_update",
    ]
    assert all(r["headers"]["content-type"] == "application/a2a+json" for r in records)
    assert {r["status"] for r in wrong} == {401}


@pytest.fixture
def sdk_agent() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "sdk_push_agent.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


async def _send_to_sdk(http: httpx.AsyncClient, agent: str, text: str, push: dict[str, Any]) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]},
            "configuration": {"taskPushNotificationConfig": push},
        },
    }
    reply = await http.post(agent + "/", json=body, headers=A2A)  # the agent listens before it prints its port
    assert "result" in reply.json(), reply.text
    return dict(reply.json()["result"]["task"])


async def test_relaykits_receiver_accepts_the_sdks_notifications(sdk_agent: str) -> None:
    events: list[StreamResponse] = []
    arrived = asyncio.Event()

    def callback(event: StreamResponse) -> None:
        events.append(event)
        arrived.set()

    receiver = WebhookReceiver(callback, token="sdk-token")
    async with serving(receiver) as hook, httpx.AsyncClient(timeout=30) as http:
        task = await _send_to_sdk(http, sdk_agent, "stream 3", {"url": hook + "/from-sdk", "token": "sdk-token"})

        async def until_completed() -> None:
            while not any(e.status_update and e.status_update.status.state is TaskState.COMPLETED for e in events):
                arrived.clear()
                await arrived.wait()

        await asyncio.wait_for(until_completed(), WAIT)
    kinds = [next(iter(e.to_dict())) for e in events]
    assert kinds == ["task", "artifactUpdate", "artifactUpdate", "artifactUpdate", "statusUpdate"]
    assert all((e.task.id if e.task else e.payload.task_id) == task["id"] for e in events)  # type: ignore[union-attr]
    assert [e.artifact_update.artifact.parts[0].text for e in events if e.artifact_update] == [
        "chunk 0",
        "chunk 1",
        "chunk 2",
    ]
    assert receiver.received == 5
    assert receiver.duplicates == 0
