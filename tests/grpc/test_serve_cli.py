"""``relaykit serve --grpc-port``: gRPC next to HTTP on one engine and store, in the card, stopped with the rest.

Each test runs ``relaykit serve tests/grpc/grpc_test_agents.py --port P --grpc-port P2 --store memory`` as a separate
process (real sockets on 127.0.0.1) and talks to it over all three bindings.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import httpx
import pytest
from support.servers import REPO_ROOT, ServerProcess, free_port

from relaykit._enums import TaskState
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit._types import Task, TaskStatusUpdateEvent
from relaykit.client import Client
from relaykit.client._grpc import GrpcTransport
from relaykit.grpc import FIRST_EVENT_ID, SERVICE_NAME

TARGET = "tests/grpc/grpc_test_agents.py"
TIMEOUT = 20.0
STOP_TIMEOUT = 15.0
V1 = {"A2A-Version": "1.0"}


@pytest.fixture
def served(relaykit_serve: Callable[..., ServerProcess]) -> ServerProcess:
    return relaykit_serve(TARGET)


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str | None, Any]]:
    """(id, JSON-RPC envelope) per SSE event."""
    event_id: str | None = None
    async for line in response.aiter_lines():
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            yield event_id, json.loads(line[5:])
            event_id = None


async def test_card_lists_grpc_at_localhost_after_http(served: ServerProcess) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        card = (await http.get(f"{served.url}/.well-known/agent-card.json")).json()
    interfaces = [
        (i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"] if i["protocolVersion"] == "1.0"
    ]
    assert interfaces == [
        ("JSONRPC", f"http://localhost:{served.port}/"),
        ("HTTP+JSON", f"http://localhost:{served.port}"),
        ("GRPC", f"localhost:{served.grpc_port}"),
    ]
    # Negotiation: a client preferring gRPC gets it from the card; the default order keeps JSON-RPC first.
    async with Client(served.url, transports=["GRPC", "JSONRPC"], timeout=TIMEOUT) as client:
        assert isinstance(client.transport, GrpcTransport)
        task = await client.send("over grpc")
        assert isinstance(task, Task)
        assert task.artifacts[0].text_content == "over grpc"
    async with Client(served.url, timeout=TIMEOUT) as client:
        assert client.transport.binding == "JSONRPC"
        assert (await client.get_task(task.id)).model_dump() == task.model_dump()


async def test_one_task_across_grpc_jsonrpc_sse_and_rest(served: ServerProcess) -> None:
    async with (
        asyncio.timeout(TIMEOUT),
        Client(transport=GrpcTransport(served.grpc_address), timeout=TIMEOUT) as grpc_client,
        httpx.AsyncClient(timeout=TIMEOUT) as http,
    ):
        # 1. Created over gRPC.
        created = await grpc_client.send("hold", return_immediately=True)
        assert isinstance(created, Task)
        # 2. Followed over JSON-RPC SSE (SubscribeToTask) and, at the same time, over gRPC.
        body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": created.id}}
        channel = grpc.aio.insecure_channel(served.grpc_address)
        grpc_subscription = channel.unary_stream(
            f"/{SERVICE_NAME}/SubscribeToTask", response_deserializer=pb.StreamResponse.FromString
        )(pb.SubscribeToTaskRequest(id=created.id).SerializeToString(), metadata=(("a2a-version", "1.0"),))
        async with http.stream("POST", f"{served.url}/", json=body, headers=V1) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = sse_events(response)
            snapshot_id, snapshot = await anext(events)
            assert snapshot["result"]["task"]["id"] == created.id
            assert snapshot["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
            grpc_snapshot = await grpc_subscription.read()
            assert dict(await grpc_subscription.initial_metadata())[FIRST_EVENT_ID] == snapshot_id
            assert grpc_snapshot.task.id == created.id
            # 3. Canceled over REST.
            canceled = await http.post(f"{served.url}/tasks/{created.id}:cancel", headers=V1)
            assert canceled.status_code == 200
            assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED"
            rest = [event async for event in events]
        last_id, last = rest[-1]
        assert last["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
        grpc_rest = []
        while (message := await grpc_subscription.read()) is not grpc.aio.EOF:
            grpc_rest.append(message)
        assert len(grpc_rest) == len(rest)  # the same events, with the same ids (first + k)
        assert int(snapshot_id or 0) + len(grpc_rest) == int(last_id or 0)
        assert grpc_rest[-1].status_update.status.state == pb.TASK_STATE_CANCELED
        await channel.close()
        # 4. One task, consistent everywhere.
        over_grpc = await grpc_client.get_task(created.id)
        over_rest = Task.model_validate((await http.get(f"{served.url}/tasks/{created.id}", headers=V1)).json())
        jsonrpc = await http.post(
            f"{served.url}/",
            json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": created.id}},
            headers=V1,
        )
        over_jsonrpc = Task.model_validate(jsonrpc.json()["result"])
    assert over_grpc.status.state is TaskState.CANCELED
    assert over_grpc == over_rest == over_jsonrpc


async def test_sigterm_drains_and_stops_grpc(served: ServerProcess) -> None:
    async with Client(transport=GrpcTransport(served.grpc_address), timeout=TIMEOUT) as client:
        async with asyncio.timeout(TIMEOUT):
            task = await client.send("hold", return_immediately=True)
            assert isinstance(task, Task)
            subscription = client.subscribe(task.id)
            assert isinstance(await anext(subscription), Task)
            # SIGTERM: the running execution gets --grace (1 s), then is marked FAILED; open streams end cleanly.
            stopping = asyncio.get_running_loop().run_in_executor(None, served.stop)
            rest = [event async for event in subscription]
            code = await asyncio.wait_for(stopping, STOP_TIMEOUT)
        assert code == 0, served.log_tail(3000)
        last = rest[-1]
        assert isinstance(last, TaskStatusUpdateEvent)
        assert last.status.state is TaskState.FAILED
    # Nothing listens on the gRPC port any more.
    channel = grpc.aio.insecure_channel(served.grpc_address)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await channel.unary_unary(f"/{SERVICE_NAME}/GetTask")(b"", timeout=5.0, wait_for_ready=False)
        assert gone.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await channel.close()


def test_grpc_port_in_use_is_a_clear_error(served: ServerProcess) -> None:
    http_port = free_port()
    command = [sys.executable, "-m", "relaykit.cli", "serve", TARGET, "--host", "127.0.0.1", "--port", str(http_port)]
    command += ["--grpc-port", str(served.grpc_port), "--store", "memory"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2  # like the HTTP port: a start-up refusal, one line
    assert f"cannot serve gRPC on 127.0.0.1:{served.grpc_port}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
