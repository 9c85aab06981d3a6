"""One switch and one task store for both versions, on real sockets.

* ``--protocol 1.0`` turns 0.3 off: 0.3 JSON-RPC methods, the /v1 REST routes (without A2A-Version) and the 0.3 gRPC
  service get VersionNotSupported / UNIMPLEMENTED, and the card has no 0.3 members;
* a task is a task: one created over 0.3 is read, streamed and cancelled over 1.0, and the other way round, on
  JSON-RPC, HTTP+JSON and gRPC (the 0.3 side spoken by relaykit's own client forced onto the 0.3 interfaces).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from support.pinned import pinned_client
from support.servers import ServerProcess

from relaykit import Task, TaskState
from relaykit.client import Client
from relaykit.client._transport import JSONRPCTransport, RESTTransport
from relaykit.errors import TaskNotFoundError

STEP = 20.0


def _rpc(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _message03(text: str, task_id: str | None = None) -> dict[str, object]:
    message: dict[str, object] = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    if task_id:
        message["taskId"] = task_id
    return message


async def test_protocol_1_0_turns_0_3_off(only10_server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=only10_server.url, timeout=STEP) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0"}
        assert "protocolVersion" not in card
        answer = (await http.post("/", json=_rpc("message/send", {"message": _message03("hi")}))).json()
        assert answer["error"]["code"] == -32009
        rest = await http.post("/v1/message:send", json={"message": {"messageId": "m", "content": [{"text": "x"}]}})
        assert rest.status_code == 400
        assert rest.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    async with grpc.aio.insecure_channel(only10_server.grpc_address) as channel:
        call = channel.unary_unary("/a2a.v1.A2AService/GetTask")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await asyncio.wait_for(call(b""), STEP)
        assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_dual_stack_serves_both_on_jsonrpc(dual_server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=dual_server.url, timeout=STEP) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        assert card["protocolVersion"] == "0.3.0"
        assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0", "0.3"}
        old = (await http.post("/", json=_rpc("message/send", {"message": _message03("hi")}))).json()["result"]
        assert (old["kind"], old["status"]["state"]) == ("task", "completed")
        new = await http.post("/", json=_rpc("GetTask", {"id": old["id"]}), headers={"A2A-Version": "1.0"})
        assert new.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_dual_stack_card_is_plain_1_0_for_a_1_0_client(dual_server: ServerProcess) -> None:
    """A card request without A2A-Version is a 0.3 client's (hybrid card); one stating 1.0 gets the 1.0 card alone,
    which a strict 1.0 schema (no unknown members) accepts; both list every interface, and caches key on the header."""
    async with httpx.AsyncClient(base_url=dual_server.url, timeout=STEP) as http:
        hybrid = await http.get("/.well-known/agent-card.json")
        plain = await http.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
        again = await http.get(
            "/.well-known/agent-card.json", headers={"A2A-Version": "1.0", "If-None-Match": plain.headers["etag"]}
        )
    assert plain.status_code == 200
    card = plain.json()
    for member in ("protocolVersion", "url", "preferredTransport", "additionalInterfaces"):
        assert member not in card
        assert member in hybrid.json()
    assert card["supportedInterfaces"] == hybrid.json()["supportedInterfaces"]
    assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0", "0.3"}
    assert plain.headers["vary"] == hybrid.headers["vary"] == "A2A-Version"
    assert plain.headers["etag"] != hybrid.headers["etag"]
    assert again.status_code == 304


async def _drain(events: AsyncIterator[object]) -> None:
    async for _ in events:
        pass


def _client(server: ServerProcess, binding: str, version: str) -> Client:
    grpc_address = server.grpc_address if binding == "GRPC" else ""
    return pinned_client(server.url, binding, version, grpc_address=grpc_address, timeout=STEP)


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"], ids=["jsonrpc", "rest", "grpc"])
@pytest.mark.parametrize("creator", ["0.3", "1.0"])
async def test_a_task_is_a_task_across_versions(dual_server: ServerProcess, binding: str, creator: str) -> None:
    other = "1.0" if creator == "0.3" else "0.3"
    maker, reader = _client(dual_server, binding, creator), _client(dual_server, binding, other)
    try:
        async with asyncio.timeout(STEP):
            if binding != "GRPC":
                assert isinstance(maker.transport, JSONRPCTransport | RESTTransport)
                assert maker.transport.v03 is (creator == "0.3")
            done = await maker.send("hello across")
            assert isinstance(done, Task)
            seen = await reader.get_task(done.id)
            assert seen.status.state is TaskState.COMPLETED
            assert seen.artifacts[0].text_content == "hello across"
            # streamed by the other version: a running task, subscribed to its end
            running = await maker.send("slow 3", return_immediately=True)
            assert isinstance(running, Task)
            states = [getattr(e, "status", None) for e in [e async for e in reader.subscribe(running.id)]]
            assert states[-1] is not None
            assert states[-1].state is TaskState.COMPLETED
            # cancelled by the other version
            slow = await maker.send("slow 100", return_immediately=True)
            assert isinstance(slow, Task)
            canceled = await reader.cancel(slow.id)
            assert canceled.status.state is TaskState.CANCELED
            assert (await maker.get_task(slow.id)).status.state is TaskState.CANCELED
    finally:
        await maker.aclose()
        await reader.aclose()


async def test_list_tasks_on_the_0_3_rest_route(dual_server: ServerProcess) -> None:
    """``GET /v1/tasks`` (0.3 spec, "tasks/list", REST only): a bare array of 0.3 tasks, filtered by context when
    asked; relaykit's client pinned to the 0.3 REST interface lists through it; over 0.3 JSON-RPC there is none."""
    context = str(uuid.uuid4())
    maker = _client(dual_server, "HTTP+JSON", "0.3")
    try:
        async with asyncio.timeout(STEP):
            made = [await maker.send(f"list {n}", context_id=context) for n in range(2)]
            async with httpx.AsyncClient(base_url=dual_server.url, timeout=STEP) as http:
                answer = await http.get("/v1/tasks", params={"contextId": context})
                assert answer.status_code == 200
                body = answer.json()
                assert isinstance(body, list)
                assert {t["id"] for t in body} == {t.id for t in made if isinstance(t, Task)}
                assert {t["status"]["state"] for t in body} == {"TASK_STATE_COMPLETED"}
                everything = (await http.get("/v1/tasks")).json()
                assert {t["id"] for t in body} <= {t["id"] for t in everything}
                # a query historyLength is a number or refused (422), never silently dropped; 0 is 0.3's "all"
                one = body[0]["id"]
                codes = [
                    (await http.get(f"/v1/tasks/{one}", params={"historyLength": h})).status_code
                    for h in ("-1", "0", "x")
                ]
                assert codes == [422, 200, 422]
                rpc = (await http.post("/", json=_rpc("tasks/list", {}))).json()
                assert rpc["error"]["code"] == -32601
            listed = [t async for t in maker.list_tasks(context_id=context)]
            assert sorted(t.id for t in listed) == sorted(t["id"] for t in body)
            assert all(t.context_id == context for t in listed)
    finally:
        await maker.aclose()


async def test_a_0_3_stream_that_fails_before_its_first_event_says_so_in_sse(dual_server: ServerProcess) -> None:
    """0.3 clients read a streaming method's answer as SSE only (a2a-sdk 0.3 reports anything else as an invalid SSE
    response), and 0.3 servers send such an error as the stream's one event: so does relaykit, on 0.3 JSON-RPC; 1.0
    keeps the plain JSON-RPC error response. relaykit's client, pinned to 0.3, sees TaskNotFoundError either way."""
    async with httpx.AsyncClient(base_url=dual_server.url, timeout=STEP) as http:
        old = await http.post("/", json=_rpc("tasks/resubscribe", {"id": "no-such-task"}))
        new = await http.post("/", json=_rpc("SubscribeToTask", {"id": "no-such-task"}), headers={"A2A-Version": "1.0"})
    assert old.headers["content-type"].startswith("text/event-stream")
    assert old.text.startswith("data: ")
    event = json.loads(old.text.removeprefix("data: "))
    assert (event["id"], event["error"]["code"]) == (1, -32001)
    assert new.headers["content-type"].startswith("application/json")
    assert new.json()["error"]["code"] == -32001
    client = _client(dual_server, "JSONRPC", "0.3")
    try:
        with pytest.raises(TaskNotFoundError):
            await asyncio.wait_for(_drain(client.subscribe("no-such-task")), STEP)
    finally:
        await client.aclose()
