"""``create_app`` composes: it mounts under a path of an existing Starlette (or FastAPI) app and works there.

A mounted app gets no lifespan events from its parent, so the engine starts on the first request; the REST routes
and JSON-RPC endpoint resolve under the mount path.
"""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from relaykit import agent
from relaykit.http import create_app

HEADERS = {"A2A-Version": "1.0"}


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
        assert [i["url"] for i in card["supportedInterfaces"]] == ["http://test/a2a/", "http://test/a2a"]

        body = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "over REST"}]}}
        rest = await http.post("/a2a/message:send", json=body, headers=HEADERS)
        assert rest.status_code == 200, rest.text
        task = rest.json()["task"]
        assert task["artifacts"][0]["parts"] == [{"text": "over REST"}]

        rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}}
        got = await http.post("/a2a/", json=rpc, headers=HEADERS)
        assert got.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    await relay.state.relaykit.stop()
