"""``create_app`` composes: it mounts under a path of an existing Starlette (or FastAPI) app and works there.

A mounted app gets no lifespan events from its parent, so the engine starts on the first request; the REST routes
and JSON-RPC endpoint resolve under the mount path.

Without ``public_url`` the card names where the app is reached: the request's scheme and host and the mount path
(ASGI ``root_path``), so a client that only knows ``…/agent`` finds every interface through the card: relaykit's
``Client`` and the official a2a-sdk 1.3.0 client, against FastAPI on a real uvicorn. ``public_url`` always wins.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from relaykit import agent
from relaykit.client import Client
from relaykit.http import create_app
from relaykit.http._app import CARD_BASES
from relaykit.testing import ServerThread

HEADERS = {"A2A-Version": "1.0"}
CARD = "/.well-known/agent-card.json"
TIMEOUT = 20.0


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    """Echoes text."""
    return context.text


async def test_mounted_under_a_path_in_a_parent_app() -> None:
    relay = create_app(echo, store="memory", public_url="http://test/a2a")

    async def home(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("parent app")

    parent = Starlette(routes=[Route("/", home), Mount("/a2a", app=relay)])
    transport = httpx.ASGITransport(app=parent)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=10) as http:
        assert (await http.get("/")).text == "parent app"

        card = (await http.get("/a2a/.well-known/agent-card.json")).json()
        assert [i["url"] for i in card["supportedInterfaces"] if i["protocolVersion"] == "1.0"] == [
            "http://test/a2a/",
            "http://test/a2a",
        ]

        body = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "over REST"}]}}
        rest = await http.post("/a2a/message:send", json=body, headers=HEADERS)
        assert rest.status_code == 200, rest.text
        task = rest.json()["task"]
        assert task["artifacts"][0]["parts"] == [{"text": "over REST"}]

        rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}}
        got = await http.post("/a2a/", json=rpc, headers=HEADERS)
        assert got.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"

        # A percent-encoded id is routed on the path as sent (raw_path), below the mount path too.
        configs = f"/a2a/tasks/{task['id']}/pushNotificationConfigs"
        hook = {"id": "a/b:c", "url": "https://hooks.example.com/a2a"}
        assert (await http.post(configs, json=hook, headers=HEADERS)).json()["id"] == "a/b:c"
        fetched = await http.get(f"{configs}/a%2Fb%3Ac", headers=HEADERS)
        assert fetched.status_code == 200, fetched.text
        assert fetched.json()["id"] == "a/b:c"
    await relay.state.relaykit.stop()


def interface_urls(card: dict[str, Any]) -> list[str]:
    # The 1.0 interfaces (the 0.3 ones, at the same URLs, follow them: tests/v03).
    return [i["url"] for i in card["supportedInterfaces"] if i["protocolVersion"] == "1.0"]


async def test_without_public_url_the_card_names_the_mount_and_the_host() -> None:
    relay = create_app(echo, store="memory", grpc_url="grpc.example:50051")
    parent = Starlette(routes=[Mount("/agent", app=relay)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=parent), base_url="http://test", timeout=10) as http:
        card = (await http.get(f"/agent{CARD}")).json()
        # JSON-RPC and HTTP+JSON follow the request; the GRPC interface is its own host:port and stays as given.
        assert interface_urls(card) == ["http://test/agent/", "http://test/agent", "grpc.example:50051"]

        other = await http.get(f"/agent{CARD}", headers={"Host": "agent.example:8443"})
        assert interface_urls(other.json())[:2] == [
            "http://agent.example:8443/agent/",
            "http://agent.example:8443/agent",
        ]
        # One ETag per card body: a cached card for one name is never revalidated as the other's.
        first = await http.get(f"/agent{CARD}")
        assert first.headers["etag"] != other.headers["etag"]
        assert (await http.get(f"/agent{CARD}", headers={"If-None-Match": first.headers["etag"]})).status_code == 304

        # Not a host[:port]: the server's address instead, never the header's text.
        odd = await http.get(f"/agent{CARD}", headers={"Host": "evil.example/x?y"})
        assert interface_urls(odd.json())[:2] == ["http://test/agent/", "http://test/agent"]

        # Forwarded headers are the ASGI server's business (uvicorn --forwarded-allow-ips), not the app's.
        forwarded = await http.get(f"/agent{CARD}", headers={"X-Forwarded-Host": "proxy.example"})
        assert "proxy.example" not in forwarded.text

        # Each name's card is kept encoded, at most CARD_BASES of them.
        for n in range(CARD_BASES + 4):
            assert (await http.get(f"/agent{CARD}", headers={"Host": f"h{n}.example"})).status_code == 200
        endpoint = next(r.endpoint for r in relay.routes if getattr(r, "path", "") == CARD)
        assert len(endpoint._by_base) == CARD_BASES


async def test_public_url_wins_over_the_request() -> None:
    relay = create_app(echo, store="memory", public_url="https://agents.example/echo")
    parent = Starlette(routes=[Mount("/agent", app=relay)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=parent), base_url="http://test", timeout=10) as http:
        card = (await http.get(f"/agent{CARD}", headers={"Host": "elsewhere.example"})).json()
    assert interface_urls(card) == ["https://agents.example/echo/", "https://agents.example/echo"]


@pytest.fixture
def fastapi_url() -> Iterator[str]:
    """A FastAPI app with relaykit mounted at ``/agent`` (no ``public_url``), on a real uvicorn: its base URL."""
    relay = create_app(echo, store="memory", grace=0.5)
    # The mounted app gets no lifespan events: the parent's lifespan drains relaykit on shutdown.
    parent = FastAPI(lifespan=relay.state.relaykit.lifespan)

    @parent.get("/")
    async def home() -> dict[str, str]:
        return {"app": "parent"}

    parent.mount("/agent", relay)
    with ServerThread(parent) as url:
        yield url


async def test_relaykit_client_finds_a_fastapi_mount_through_its_card(fastapi_url: str) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        assert (await http.get(fastapi_url + "/")).json() == {"app": "parent"}
        card = (await http.get(f"{fastapi_url}/agent{CARD}")).json()
    assert interface_urls(card) == [f"{fastapi_url}/agent/", f"{fastapi_url}/agent"]
    for binding in ("JSONRPC", "HTTP+JSON"):
        async with asyncio.timeout(TIMEOUT), Client(fastapi_url + "/agent", transports=(binding,)) as client:
            task = await client.send(f"mounted over {binding}")
            assert task.artifacts[0].text_content == f"mounted over {binding}"
            assert (await client.get_task(task.id)).id == task.id


@pytest.mark.interop
@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a2a_sdk_client_finds_a_fastapi_mount_through_its_card(fastapi_url: str, binding: str) -> None:
    from a2a.client import ClientConfig, ClientFactory
    from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

    seen: list[str] = []

    async def record(request: httpx.Request) -> None:
        seen.append(request.url.path)

    async with httpx.AsyncClient(timeout=TIMEOUT, event_hooks={"request": [record]}) as http:
        # Only the binding is chosen (to cover both); the URLs come from the card alone.
        config = ClientConfig(supported_protocol_bindings=[binding], httpx_client=http)
        async with asyncio.timeout(TIMEOUT):
            client = await ClientFactory(config).create_from_url(fastapi_url + "/agent")
            try:
                text = f"sdk over {binding}"
                message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
                events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            finally:
                await client.close()
    # The SDK's default config streams (SendStreamingMessage): the task, its artifact, COMPLETED.
    assert events[0].WhichOneof("payload") == "task", events
    texts = [p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts]
    texts += [p.text for e in events if e.HasField("task") for a in e.task.artifacts for p in a.parts]
    assert text in texts, events
    last = events[-1]
    state = last.status_update.status.state if last.HasField("status_update") else last.task.status.state
    assert state == TaskState.TASK_STATE_COMPLETED, events
    # Every A2A call went under the mount, as the card said.
    calls = [path for path in seen if path != f"/agent{CARD}"]
    assert calls, seen
    assert all(path.startswith("/agent/") for path in calls), seen
