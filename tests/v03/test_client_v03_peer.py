"""relaykit's client against 0.3 agents written here for what the official SDKs' test agents do not show:

* ``null`` members of the answers read as absent, on JSON-RPC and HTTP+JSON. The official 0.3 SDK leaves absent
  members out, but other 0.3 agents write them as ``null`` (``"contextId": null``, ``"artifacts": null``,
  ``"history": null``, ``"metadata": null``), which a2a-sdk 0.3 reads as absent and relaykit's client used to refuse
  as an invalid agent response. A ``null`` inside metadata is content and reaches the caller;
* the extensions a caller activates go out in 0.3's ``X-A2A-Extensions`` header (gRPC: ``x-a2a-extensions``), which
  0.3 agents read, as well as in 1.0's.

The HTTP agent is an ASGI app served in-process, the gRPC one a generic handler on 127.0.0.1; both note what they
receive.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import httpx
import pytest

from relaykit import Task, TaskState
from relaykit._card import AgentCard, AgentInterface
from relaykit._grpc_gen import a2a_v0_3_pb2 as pb03
from relaykit.client import Client

STEP = 20.0
PEER = "http://peer.test"
TASK_ID = "t-1"
EXTENSION = "urn:relaykit-test:ext/v1"
# What the HTTP agent received: one dict of request headers per request.
RECEIVED: list[dict[str, str]] = []


def _task(state: str) -> dict[str, Any]:
    return {
        "kind": "task",
        "id": TASK_ID,
        "contextId": None,
        "status": {"state": state, "message": None, "timestamp": None},
        "artifacts": None,
        "history": None,
        "metadata": {"note": None},
    }


def _pj_task(state: str) -> dict[str, Any]:
    return {
        "id": TASK_ID,
        "contextId": None,
        "status": {"state": state, "update": None, "timestamp": None},
        "artifacts": None,
        "history": None,
        "metadata": {"note": None},
    }


CARD = {
    "protocolVersion": "0.3.0",
    "name": "null-writing 0.3 agent",
    "description": "writes null for absent members",
    "version": "1.0.0",
    "url": PEER + "/",
    "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": PEER + "/", "transport": "JSONRPC"}, {"url": PEER, "transport": "HTTP+JSON"}],
    "capabilities": {"streaming": True},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [],
    "documentationUrl": None,
}


def _rpc_result(rid: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result, "error": None}).encode()


async def _agent(scope: Any, receive: Any, send: Any) -> None:
    """The 0.3 agent: its card, JSON-RPC at ``/`` and the HTTP+JSON routes it needs, every answer null-laden."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    RECEIVED.append({k.decode(): v.decode() for k, v in scope["headers"]})
    path, kind = scope["path"], b"application/json"
    if path == "/.well-known/agent-card.json":
        data = json.dumps(CARD).encode()
    elif path == "/":
        request = json.loads(body)
        method, rid = request["method"], request["id"]
        if method == "message/stream":
            update = {
                "kind": "status-update",
                "taskId": TASK_ID,
                "contextId": "c-1",  # required in an event: a null here stays an error (as in a2a-sdk 0.3)
                "status": {"state": "completed", "message": None},
                "final": True,
                "metadata": None,
            }
            events = [_task("working"), update]
            data = b"".join(b"data: " + _rpc_result(rid, e) + b"\n\n" for e in events)
            kind = b"text/event-stream"
        else:  # message/send and tasks/get
            data = _rpc_result(rid, _task("completed"))
    elif path == "/v1/message:send":
        data = json.dumps({"task": _pj_task("TASK_STATE_COMPLETED"), "msg": None}).encode()
    elif path == f"/v1/tasks/{TASK_ID}":
        data = json.dumps(_pj_task("TASK_STATE_COMPLETED")).encode()
    elif path == "/v1/message:stream":
        status = {"state": "TASK_STATE_COMPLETED", "update": None, "timestamp": None}
        update = {"taskId": TASK_ID, "contextId": "c-1", "status": status, "final": True, "metadata": None}
        events = [{"task": _pj_task("TASK_STATE_WORKING")}, {"statusUpdate": update, "task": None}]
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        kind = b"text/event-stream"
    else:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": data})


def _check(task: Any) -> None:
    assert isinstance(task, Task)
    assert (task.id, task.context_id, task.artifacts, task.history) == (TASK_ID, "", [], [])
    assert task.status.state is TaskState.COMPLETED
    assert task.metadata == {"note": None}


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_null_members_of_0_3_answers_read_as_absent(binding: str) -> None:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=_agent), timeout=STEP)
    async with Client(PEER, http=http, transports=[binding], timeout=STEP) as client, asyncio.timeout(STEP):
        assert client.interface is not None
        assert (client.interface.protocol_binding, client.interface.protocol_version) == (binding, "0.3.0")
        _check(await client.send("hi"))
        _check(await client.get_task(TASK_ID))
        events = [event async for event in client.stream("hi")]
        assert [type(e).__name__ for e in events] == ["Task", "TaskStatusUpdateEvent"]
        assert events[-1].status.state is TaskState.COMPLETED  # type: ignore[union-attr]
        assert events[-1].metadata is None  # type: ignore[union-attr]
    await http.aclose()


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_extensions_go_out_in_0_3s_header_too(binding: str) -> None:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=_agent), timeout=STEP)
    RECEIVED.clear()
    async with Client(PEER, http=http, transports=[binding], extensions=[EXTENSION], timeout=STEP) as client:
        await asyncio.wait_for(client.get_task(TASK_ID), STEP)
    await http.aclose()
    sent = RECEIVED[-1]
    assert (sent["x-a2a-extensions"], sent["a2a-extensions"]) == (EXTENSION, EXTENSION)
    assert "a2a-version" not in sent


async def test_extensions_go_out_in_0_3s_grpc_key_too() -> None:
    seen: list[dict[str, str]] = []

    async def get_task(data: bytes, context: Any) -> bytes:
        seen.append({k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
        status = pb03.TaskStatus(state=pb03.TASK_STATE_COMPLETED)
        return pb03.Task(
            id=pb03.GetTaskRequest.FromString(data).name.removeprefix("tasks/"), status=status
        ).SerializeToString()

    handler = grpc.method_handlers_generic_handler(
        "a2a.v1.A2AService", {"GetTask": grpc.unary_unary_rpc_method_handler(get_task)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        interface = AgentInterface(url=f"127.0.0.1:{port}", protocol_binding="GRPC", protocol_version="0.3.0")
        card = AgentCard(
            name="0.3 gRPC agent", description="notes its metadata", version="1", supported_interfaces=[interface]
        )
        async with Client(card=card, extensions=[EXTENSION], timeout=STEP) as client:
            task = await asyncio.wait_for(client.get_task(TASK_ID), STEP)
    finally:
        await server.stop(None)
    assert task.status.state is TaskState.COMPLETED
    assert (seen[-1]["x-a2a-extensions"], seen[-1]["a2a-extensions"]) == (EXTENSION, EXTENSION)
