"""A2A 0.3 requests go through the same authentication as 1.0 ones, on JSON-RPC, HTTP+JSON (``/v1/``) and gRPC
(``a2a.v1.A2AService``): refused without a credential (401 / UNAUTHENTICATED), served with one, owned by the same
principal whichever version created or reads the task, and the 0.3 extended card only for authenticated callers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import httpx
import pytest
from auth.conftest import Served, T
from auth.whoami_agent import whoami

from relaykit.auth import APIKeyAuthenticator, Auth
from relaykit.types import AgentCard

EXTENDED = AgentCard(name="whoami (extended)", description="more", version="1.0.0")


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}


def _message(text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }


@pytest.fixture
async def served(agent: Callable[..., Any]) -> Served:
    keys = APIKeyAuthenticator({"alice": "alice-key", "bob": "bob-key"})
    return await agent(whoami, auth=Auth(keys), extended_card=EXTENDED)  # type: ignore[no-any-return]


async def test_v03_jsonrpc_and_rest_are_authenticated(served: Served) -> None:
    alice, bob = {"X-API-Key": "alice-key"}, {"X-API-Key": "bob-key"}
    async with httpx.AsyncClient(base_url=served.url, timeout=T) as http:
        refused = await http.post("/", json=_rpc("message/send", {"message": _message("hi")}))
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("APIKey")
        assert refused.json()["id"] == 3

        task = (await http.post("/", json=_rpc("message/send", {"message": _message("hi")}), headers=alice)).json()
        assert task["result"]["kind"] == "task"
        assert task["result"]["artifacts"][0]["parts"][0]["text"] == "api-key:alice|hi"
        task_id = task["result"]["id"]
        # Owned by the principal, whichever version asks.
        theirs = (await http.post("/", json=_rpc("tasks/get", {"id": task_id}), headers=bob)).json()
        assert theirs["error"]["code"] == -32001
        mine = await http.post("/", json=_rpc("GetTask", {"id": task_id}), headers={**alice, "A2A-Version": "1.0"})
        assert mine.json()["result"]["id"] == task_id

        rest = await http.post("/v1/message:send", json={"message": _message("hi")})
        assert rest.status_code == 401
        assert "www-authenticate" in rest.headers
        rest_ok = await http.post("/v1/message:send", json={"message": _message("hi")}, headers=alice)
        assert rest_ok.status_code == 200

        card_anonymous = await http.post("/", json=_rpc("agent/getAuthenticatedExtendedCard", {}))
        assert card_anonymous.status_code == 401
        card = await http.post("/", json=_rpc("agent/getAuthenticatedExtendedCard", {}), headers=alice)
        assert card.json()["result"]["name"] == "whoami (extended)"


async def test_v03_grpc_is_authenticated(served: Served) -> None:
    async with grpc.aio.insecure_channel(served.grpc) as channel:
        call = channel.unary_unary("/a2a.v1.A2AService/GetTask")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await asyncio.wait_for(call(b""), T)
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_v03_extended_card_is_a_whole_0_3_card(served: Served) -> None:
    # The extended card given names no interfaces; a 0.3 reader still needs url / protocolVersion /
    # preferredTransport to call the agent, and a 1.0 reader the supportedInterfaces (REQUIRED): the server fills in
    # what it serves, as it does for the public card.
    alice = {"X-API-Key": "alice-key"}
    async with httpx.AsyncClient(base_url=served.url, timeout=T) as http:
        public = (await http.get("/.well-known/agent-card.json")).json()
        card = (await http.post("/", json=_rpc("agent/getAuthenticatedExtendedCard", {}), headers=alice)).json()
    result = card["result"]
    assert result["name"] == "whoami (extended)"
    for member in ("url", "protocolVersion", "preferredTransport", "additionalInterfaces", "supportedInterfaces"):
        assert result[member] == public[member], member
    assert result["securitySchemes"] == public["securitySchemes"]
    assert result["security"] == public["security"]


async def test_v03_grpc_get_agent_card_is_the_public_card_when_there_is_no_other(agent: Callable[..., Any]) -> None:
    # 0.3's GetAgentCard is how a gRPC-only client reads the card: without an extended card it answers the public
    # one, which needs no credential (CONTRACT: everything but the public card is authenticated).
    from relaykit._grpc_gen import a2a_v0_3_pb2

    keyed: Served = await agent(whoami, auth=Auth(APIKeyAuthenticator({"alice": "alice-key"})))
    async with grpc.aio.insecure_channel(keyed.grpc) as channel:
        raw = await asyncio.wait_for(channel.unary_unary("/a2a.v1.A2AService/GetAgentCard")(b""), T)
    card = a2a_v0_3_pb2.AgentCard.FromString(raw)
    async with httpx.AsyncClient(base_url=keyed.url, timeout=T) as http:
        public = (await http.get("/.well-known/agent-card.json")).json()
    assert card.name == public["name"]
    assert "apiKey" in card.security_schemes


async def test_v03_grpc_extended_card_needs_a_credential(served: Served) -> None:
    async with grpc.aio.insecure_channel(served.grpc) as channel:
        call = channel.unary_unary("/a2a.v1.A2AService/GetAgentCard")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await asyncio.wait_for(call(b""), T)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        raw = await asyncio.wait_for(call(b"", metadata=(("x-api-key", "alice-key"),)), T)
    from relaykit._grpc_gen import a2a_v0_3_pb2

    assert a2a_v0_3_pb2.AgentCard.FromString(raw).name == "whoami (extended)"
