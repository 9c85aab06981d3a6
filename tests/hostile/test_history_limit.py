"""A task's history is bounded (``max_history_bytes``): follow-ups cannot grow a task, and so the cost of every later
message to it, without end.

Each follow-up costs time in proportion to the whole task (it is read, decoded, encoded and rewritten), and the
history is what a caller grows with follow-ups: measured with 2 MB messages to an agent that always asks for more,
the 24th follow-up took 2-3 s and a 1-byte follow-up to the resulting 50 MB task 5 s. Past the limit a follow-up is
refused with InvalidParams naming it, on both HTTP bindings and every store, before anything is stored: the task
stays as it was, readable, cancelable, and open to a message that fits.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from relaykit import agent
from relaykit.http._app import create_app
from relaykit.testing import StreamingASGITransport

BASE = "http://relaykit.test"
V1 = {"A2A-Version": "1.0"}
LIMIT = 64 * 1024
CHUNK = 20_000  # characters of one follow-up: three fit under the limit, a fourth does not


@agent
async def asks(context: Any) -> None:
    context.requires_input("more?")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def client(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[httpx.AsyncClient]:
    options: dict[str, Any] = {"max_history_bytes": LIMIT}
    if request.param == "memory":
        store = "memory"
    elif request.param == "sqlite":
        store = "sqlite:///" + str(tmp_path / "history.db")
    else:
        store = request.getfixturevalue("postgres_url")
        options["namespace"] = request.getfixturevalue("pg_namespace")
    app = create_app(asks, store=store, **options)
    await app.state.relaykit.start()
    try:
        transport = StreamingASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=V1, timeout=10.0) as c:
            yield c
    finally:
        await app.state.relaykit.stop()


def message(text: str, task_id: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        out["taskId"] = task_id
    return out


async def send(c: httpx.AsyncClient, text: str, task_id: str = "") -> dict[str, Any]:
    r = await c.post("/message:send", json={"message": message(text, task_id)})
    assert r.status_code == 200, r.text[:500]
    task: dict[str, Any] = r.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


async def test_a_follow_up_past_the_history_limit_is_refused(client: httpx.AsyncClient) -> None:
    task = await send(client, "a" * CHUNK)
    task_id = task["id"]
    await send(client, "b" * CHUNK, task_id)
    task = await send(client, "c" * CHUNK, task_id)
    before = (await client.get(f"/tasks/{task_id}")).json()
    assert before == task

    r = await client.post("/message:send", json={"message": message("d" * CHUNK, task_id)})
    assert r.status_code == 400, r.text[:500]
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert f"limit of {LIMIT} bytes (max_history_bytes)" in error["message"]
    assert "ddd" not in r.text  # the error names the limit, never the content
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("e" * CHUNK, task_id)}}
    body = (await client.post("/", json=rpc)).json()
    assert body["error"]["code"] == -32602, str(body)[:500]
    assert f"limit of {LIMIT} bytes" in body["error"]["message"]

    # Nothing was stored: the task is exactly as it was, and goes on.
    assert (await client.get(f"/tasks/{task_id}")).json() == before
    task = await send(client, "a short answer", task_id)
    assert len(task["history"]) == len(before["history"]) + 2  # the answer and the agent's next question
    r = await client.post(f"/tasks/{task_id}:cancel")
    assert r.status_code == 200, r.text[:500]
    assert r.json()["status"]["state"] == "TASK_STATE_CANCELED"
