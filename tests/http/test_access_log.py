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


def _tag_by_getattr(operation: str, request: object) -> str:
    """The task id the access line names, by plain getattr (as first written), to check the fast lookup against."""
    by_id = operation in {"GetTask", "CancelTask", "SubscribeToTask"}
    task_id = getattr(request, "id", "") if by_id else getattr(request, "task_id", "")
    if not task_id:
        message = getattr(request, "message", None)
        task_id = getattr(message, "task_id", "") if message is not None else ""
    return str(task_id)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}),
        (
            "SendMessage",
            {"message": {"messageId": "m", "taskId": "t-1", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
        ),
        (
            "SendStreamingMessage",
            {"message": {"messageId": "m", "taskId": "t-2", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
        ),
        ("GetTask", {"id": "t-3"}),
        ("CancelTask", {"id": "t-4"}),
        ("SubscribeToTask", {"id": "t-5"}),
        ("ListTasks", {}),
        ("GetTaskPushNotificationConfig", {"taskId": "t-6", "id": "c"}),
        ("CreateTaskPushNotificationConfig", {"taskId": "t-7", "url": "https://example.com/hook"}),
        ("DeleteTaskPushNotificationConfig", {"taskId": "t-8", "id": "c"}),
        ("GetExtendedAgentCard", {}),
    ],
)
def test_tagged_task_id(method: str, params: dict[str, object]) -> None:
    from relaykit._methods import OPERATIONS_BY_NAME
    from relaykit.http._asgi import tag_request

    request = OPERATIONS_BY_NAME[method].request.model_validate(params)
    scope: dict[str, object] = {}
    tag_request(scope, method, request)
    assert scope["relaykit.op"] == method
    assert scope["relaykit.task"] == _tag_by_getattr(method, request)
