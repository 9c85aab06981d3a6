"""The JSON-RPC shortcut of ``create_app``'s app: ``POST /`` reaches the endpoint as the router would send it, and
only while nothing could tell the difference (no user middleware, the JSON-RPC route first)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette._utils import get_route_path
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from relaykit import agent
from relaykit.http import create_app
from relaykit.http._app import _is_root

HEADERS = {"A2A-Version": "1.0"}
SEND = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "SendMessage",
    "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
}


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    """Echoes text."""
    return context.text


@pytest.mark.parametrize("root", ["", "/a2a", "/a2a/", "/", "/x/y"])
@pytest.mark.parametrize("path", ["/", "", "/a2a", "/a2a/", "/a2a//", "/a2ab/", "/x/y/", "/x/y", "/tasks", "//"])
def test_root_check_matches_starlette(root: str, path: str) -> None:
    scope = {"type": "http", "path": path, "root_path": root}
    assert _is_root(scope) == (get_route_path(scope) == "/")


async def _post(app: Any, path: str = "/") -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=10) as http:
        await http.get("/healthz")  # the first request builds the middleware stack (no lifespan here)
        return await http.post(path, json=SEND, headers=HEADERS)


async def test_shortcut_gives_the_endpoint_the_routers_scope() -> None:
    seen: list[dict[str, Any]] = []
    via_router = create_app(echo, store="memory")
    direct = create_app(echo, store="memory")
    for app in (via_router, direct):
        route = app.routes[0]
        assert isinstance(route, Route)
        assert route.path == "/"
        inner = route.app

        async def spy(scope: Scope, receive: Receive, send: Send, inner: ASGIApp = inner) -> None:
            seen.append({k: v for k, v in scope.items() if k != "starlette.exception_handlers"})
            await inner(scope, receive, send)

        route.app = spy
    via_router.rpc_route = None  # type: ignore[attr-defined]  # no shortcut: the ordinary Starlette path
    first = await _post(via_router)
    second = await _post(direct)
    assert direct._direct
    assert not via_router._direct
    assert first.status_code == second.status_code == 200
    assert first.json()["id"] == second.json()["id"] == 7
    assert first.json()["result"]["task"]["artifacts"][0]["parts"] == [{"text": "hi"}]
    assert second.json()["result"]["task"]["artifacts"][0]["parts"] == [{"text": "hi"}]
    assert first.headers.keys() == second.headers.keys()
    a, b = seen
    assert a.keys() == b.keys()
    for key in ("type", "method", "path", "root_path", "path_params"):
        assert a[key] == b[key], key
    assert a["endpoint"] is via_router.routes[0].endpoint
    assert b["endpoint"] is direct.routes[0].endpoint
    assert a["app"] is via_router
    assert b["app"] is direct
    assert a["route"] is via_router.routes[0]
    assert b["route"] is direct.routes[0]
    for app in (via_router, direct):
        await app.state.relaykit.stop()


async def test_user_middleware_still_sees_json_rpc() -> None:
    calls: list[str] = []

    class Count:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                calls.append(scope["path"])
            await self.app(scope, receive, send)

    app = create_app(echo, store="memory")
    app.add_middleware(Count)
    response = await _post(app)
    assert response.status_code == 200
    assert calls == ["/healthz", "/"]
    assert not app._direct  # type: ignore[attr-defined]
    await app.state.relaykit.stop()


async def test_a_route_put_before_json_rpc_takes_the_request() -> None:
    async def other(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("mine")

    app = create_app(echo, store="memory")
    app.router.routes.insert(0, Route("/", other, methods=["POST"]))
    response = await _post(app)
    assert response.text == "mine"
    await app.state.relaykit.stop()
