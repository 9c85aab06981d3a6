"""Every task the HTTP bindings accept reads back over gRPC: a message whose metadata nests as deep as a request body
may (``MAX_JSON_DEPTH``) is stored over JSON-RPC and fetched by relaykit's gRPC client. The protobuf reader stops
near 33 levels of JSON in a Struct; with a limit of 64 such a task was stored and every gRPC GetTask of it failed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from grpc_test_agents import Interop

from relaykit._input import MAX_JSON_DEPTH
from relaykit.client import Client


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


async def test_the_deepest_accepted_metadata_reads_back_over_grpc(grpc_agent: Callable[..., Any]) -> None:
    app, _address = await grpc_agent(Interop(), grace=0.5)
    # body (1) > params (2) > message (3) > metadata (4): the metadata's own levels fill the rest of the limit.
    metadata = nested(MAX_JSON_DEPTH - 3)
    message = {"role": "ROLE_USER", "messageId": "deep-1", "parts": [{"text": "hi"}], "metadata": metadata}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    transport = httpx.ASGITransport(app=app)
    async with asyncio.timeout(20), httpx.AsyncClient(transport=transport, base_url="http://agent.test") as http:
        answer = (await http.post("/", json=body, headers={"A2A-Version": "1.0"})).json()
        assert "result" in answer, str(answer)[:300]
        task_id = answer["result"]["task"]["id"]
        async with Client("http://agent.test", http=http, transports=["GRPC"]) as c:
            task = await c.get_task(task_id)
    assert task.history[0].metadata == metadata
