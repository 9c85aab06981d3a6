"""The access line (CONTRACT "Engine defaults"): one per request with the operation, task id, outcome and duration,
never message or artifact content; off unless asked for."""

from __future__ import annotations

import logging

import httpx
import pytest

from relaykit import agent
from relaykit.http import create_app

HEADERS = {"A2A-Version": "1.0"}
SECRET = "secret-payload-7c1e"


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    """Echoes text."""
    return context.text


async def _exercise(app: object) -> str:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=10) as http:
        body = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": SECRET}]}}
        task = (await http.post("/message:send", json=body, headers=HEADERS)).json()["task"]
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}}
        await http.post("/", json=rpc, headers=HEADERS)
        return str(task["id"])


async def test_one_line_per_request_without_content(caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(echo, store="memory", access_log=True)
    with caplog.at_level(logging.INFO, logger="relaykit.access"):
        task_id = await _exercise(app)
    lines = [r.getMessage() for r in caplog.records if r.name == "relaykit.access"]
    await app.state.relaykit.stop()
    assert len(lines) == 2
    send, get = lines
    assert "SendMessage" in send
    assert f"task={task_id}" in send
    assert "outcome=ok" in send
    assert send.endswith("ms")
    assert "GetTask" in get
    assert "task=no-such-task" in get
    assert "outcome=error -32001" in get
    assert all(SECRET not in line for line in lines)


async def test_off_by_default(caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(echo, store="memory")
    with caplog.at_level(logging.INFO, logger="relaykit.access"):
        await _exercise(app)
    await app.state.relaykit.stop()
    assert not [r for r in caplog.records if r.name == "relaykit.access"]
