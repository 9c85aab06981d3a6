"""The inspector sends the headers its user typed to the agent they named, also over plain HTTP to a host that is not
loopback (the client refuses that to programs unless they opt in; the inspector opts in, as curl would send them).

No network: the inspector's HTTP client is given a transport that answers as the agent would and records what it
received."""

from __future__ import annotations

import json

import httpx
import pytest

from relaykit.errors import TaskNotFoundError
from relaykit.inspector._session import CardCache, Session, open_client

AGENT = "http://agent.example:8000"  # plain HTTP, not loopback


def _card() -> dict[str, object]:
    return {
        "name": "remote",
        "description": "a remote agent",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": AGENT + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }


async def test_the_typed_credential_reaches_a_plaintext_remote_agent() -> None:
    seen: list[tuple[str, str | None]] = []

    def agent(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        if request.url.path == "/.well-known/agent-card.json":
            return httpx.Response(200, json=_card())
        rpc = json.loads(request.content)
        error = {"code": -32001, "message": "Task not found"}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": rpc["id"], "error": error})

    session = Session(url=AGENT, headers={"Authorization": "Bearer typed"})
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(agent)) as http,
        open_client(session, http, CardCache()) as client,
    ):
        with pytest.raises(TaskNotFoundError):
            await client.get_task("t-1")
    assert seen == [("/.well-known/agent-card.json", "Bearer typed"), ("/", "Bearer typed")]
