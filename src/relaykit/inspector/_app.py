"""The inspector's ASGI app: its page (static files shipped in the package) and a small JSON API for that page.

API (``POST`` under the app's root, JSON in; answers JSON or NDJSON):

    api/card    {session}                          the card as fetched, parsed, and findings about it
    api/call    {session, op, params}              one unary A2A operation (result or error, time taken)
    api/stream  {session, op, params, lastEventId} a streaming operation, NDJSON: one line per event with its SSE id
    api/raw     {session, request}                 a hand-written JSON-RPC or REST request, the answer as NDJSON
    api/openapi {session}                          the agent's /openapi.json, or the generated description of 1.0

Invariants:

* every API request carries ``X-Relaykit-Inspector: 1`` and a JSON body: a page on another origin cannot send that
  without a CORS preflight, which this app never grants, so other sites cannot drive it;
* an unlocked inspector (``relaykit inspect``, loopback only) answers API requests and ``config.json`` (which holds
  the ``--header`` values, credentials included) only when their ``Host`` is a loopback name, so a DNS-rebinding page
  cannot reach either;
* the page's assets are sent with a Content-Security-Policy that allows scripts, styles and connections to this
  origin only; agent data is rendered as text, never as markup.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route

from relaykit._errors import A2AError
from relaykit._openapi import openapi_document
from relaykit.inspector import _calls
from relaykit.inspector._card_check import check_card
from relaykit.inspector._session import (
    CLIENT_VERSIONS,
    CardCache,
    Session,
    SessionError,
    Target,
    error_json,
    local_interfaces,
    new_http,
    open_client,
)
from relaykit.inspector._wire import InspectorHTTP

__all__ = ["MOUNT_PATH", "create_inspector", "inspector_routes"]

MOUNT_PATH = "/inspector"

MAX_API_BODY = 32 * 1024 * 1024  # a chat message may carry files (base64)
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob: data:; "
    "media-src 'self' blob: data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_SECURITY = {
    "content-security-policy": _CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _assets() -> dict[str, tuple[bytes, str]]:
    """Every page file shipped in ``static/``: name -> (bytes, content type), read once."""
    out: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files("relaykit.inspector").joinpath("static").iterdir():
        kind = _TYPES.get("." + entry.name.rsplit(".", 1)[-1])
        if kind is not None and entry.is_file():
            out[entry.name] = (entry.read_bytes(), kind)
    return out


def local_base(request: Request) -> str:
    """The agent's base URL as this server sees it: the socket the request arrived on, plus the mount path without
    the inspector's own segment (a mounted inspector's agent is its parent app)."""
    scope = request.scope
    server = scope.get("server")
    if server and server[0] is not None:
        host, port = str(server[0]), server[1]
        host = f"[{host}]" if ":" in host else host
        origin = f"{scope.get('scheme', 'http')}://{host}" + (f":{port}" if port else "")
    else:
        origin = f"{scope.get('scheme', 'http')}://{request.headers.get('host', 'localhost')}"
    root: str = scope.get("root_path", "")
    # Starlette's Mount leaves the parent's prefix plus "/inspector" in root_path.
    parent = root.rsplit("/", 1)[0] if root else ""
    return origin + parent


class _Inspector:
    """The endpoints of one inspector app (one per ``create_inspector`` call)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.cards = CardCache()
        self.assets = _assets()

    # --- page ----------------------------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        if not request.url.path.endswith("/"):
            # The page's relative URLs (assets, API) need the trailing slash.
            return RedirectResponse(request.url.path + "/", status_code=307)
        return self._asset("index.html")

    async def asset(self, request: Request) -> Response:
        return self._asset(request.path_params["name"])

    def _asset(self, name: str) -> Response:
        found = self.assets.get(name)
        if found is None:
            return Response(b"not found", 404, media_type="text/plain")
        return Response(found[0], media_type=found[1], headers=_SECURITY)

    async def config(self, request: Request) -> Response:
        from relaykit.client._card import DEFAULT_TRANSPORTS

        try:
            self._check_host(request)
        except SessionError as exc:
            return _problem(exc)
        try:
            from importlib.metadata import version

            relaykit_version = version("relaykit")
        except Exception:  # pragma: no cover - running from a source tree without metadata
            relaykit_version = "dev"
        return JSONResponse(
            {
                "target": local_base(request) if self.target.locked else self.target.default_url,
                "locked": self.target.locked,
                "headers": [list(h) for h in self.target.headers],
                "transports": list(DEFAULT_TRANSPORTS),
                "clientVersions": list(CLIENT_VERSIONS),
                "relaykit": relaykit_version,
            },
            headers=_SECURITY,
        )

    # --- API -----------------------------------------------------------------------------------------------

    def _check_host(self, request: Request) -> None:
        if not self.target.locked:
            host = urlsplit("//" + request.headers.get("host", "")).hostname or ""
            if host not in _LOOPBACK:
                raise SessionError(f"this inspector answers on loopback names only, not {host!r}")

    async def _body(self, request: Request) -> tuple[dict[str, Any], Session]:
        if request.headers.get("x-relaykit-inspector") != "1":
            raise SessionError("missing X-Relaykit-Inspector header")
        self._check_host(request)
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_API_BODY:
            raise SessionError("request too large")
        try:
            data = json.loads(await request.body())
        except ValueError:
            raise SessionError("the body is not JSON") from None
        if not isinstance(data, dict):
            raise SessionError("the body is not a JSON object")
        return data, Session.parse(data.get("session"), self.target, local_base(request))

    async def card(self, request: Request) -> Response:
        try:
            _, session = await self._body(request)
        except SessionError as exc:
            return _problem(exc)
        async with new_http() as http:
            report, card = await check_card(session, http)
        if card is not None:
            self.cards.put(session, card)
        return JSONResponse(report)

    async def call(self, request: Request) -> Response:
        try:
            data, session = await self._body(request)
            op = _calls.operation(data.get("op"), streaming=False)
        except SessionError as exc:
            return _problem(exc)
        async with new_http() as http:
            try:
                async with open_client(session, http, self.cards) as client:
                    answer = await _calls.call(client, op, data.get("params"), http.wire)
            except A2AError as exc:
                answer = {"error": error_json(exc)}
        return JSONResponse(answer)

    async def stream(self, request: Request) -> Response:
        try:
            data, session = await self._body(request)
            op = _calls.operation(data.get("op"), streaming=True)
        except SessionError as exc:
            return _problem(exc)
        last = data.get("lastEventId")
        last_event_id = str(last) if last not in (None, "") else None

        async def events(http: InspectorHTTP) -> AsyncIterator[dict[str, Any]]:
            async with open_client(session, http, self.cards) as client:
                async for item in _calls.stream(client, op, data.get("params"), last_event_id, http.wire):
                    yield item

        return _ndjson(events)

    async def raw(self, request: Request) -> Response:
        try:
            data, session = await self._body(request)
        except SessionError as exc:
            return _problem(exc)

        async def answer(http: httpx.AsyncClient) -> AsyncIterator[dict[str, Any]]:
            async with open_client(session, http, self.cards) as client:
                async for item in _calls.raw_request(client, http, data.get("request")):
                    yield item

        return _ndjson(answer)

    async def openapi(self, request: Request) -> Response:
        """The agent's own OpenAPI description if it serves one, else the generated description of A2A 1.0."""
        try:
            _, session = await self._body(request)
        except SessionError as exc:
            return _problem(exc)
        async with new_http() as http:
            try:
                card = await self.cards.get(session, http)
            except A2AError as exc:
                return JSONResponse({"error": error_json(exc)})
            if session.locked:
                card = local_interfaces(card, session.url)
            rest = next((i.url for i in card.supported_interfaces if i.protocol_binding.upper() == "HTTP+JSON"), None)
            if rest is not None:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    response = await http.get(rest.rstrip("/") + "/openapi.json", headers=session.headers)
                    doc = response.json() if response.status_code == 200 else None
                    if isinstance(doc, dict) and str(doc.get("openapi", "")).startswith("3."):
                        return JSONResponse({"source": "agent", "doc": doc})
            doc = openapi_document(
                server_url=rest or session.url,
                title=card.name,
                security_schemes=card.security_schemes,
                security_requirements=card.security_requirements,
            )
        return JSONResponse({"source": "generated", "doc": doc})


def _problem(exc: A2AError) -> Response:
    return JSONResponse({"error": error_json(exc)}, status_code=400)


def _ndjson(produce: Any) -> Response:
    """Stream ``produce(http)``'s items as NDJSON, on an HTTP client that lives exactly as long as the stream."""

    async def body() -> AsyncIterator[bytes]:
        async with new_http() as http:
            async for line in _calls.ndjson(produce(http)):
                yield line

    return StreamingResponse(
        body(), media_type="application/x-ndjson", headers={"cache-control": "no-store", "x-accel-buffering": "no"}
    )


def create_inspector(target: str = "", *, headers: tuple[tuple[str, str], ...] = (), locked: bool = False) -> Starlette:
    """The inspector as an ASGI app: for the agent at ``target`` (``relaykit inspect``), or, ``locked``, for the
    agent it is mounted in (``relaykit serve --inspector`` mounts it at ``/inspector/``).

    ``headers`` are the session's starting headers (the page shows them and sends them with each call; the server
    keeps no session state).

    >>> app = create_inspector("http://localhost:8000")   # uvicorn, or mount it anywhere
    """
    inspector = _Inspector(Target(default_url=target, locked=locked, headers=tuple(headers)))
    routes = [
        Route("/", inspector.index, methods=["GET", "HEAD"]),
        Route("/config.json", inspector.config, methods=["GET"]),
        Route("/api/card", inspector.card, methods=["POST"]),
        Route("/api/call", inspector.call, methods=["POST"]),
        Route("/api/stream", inspector.stream, methods=["POST"]),
        Route("/api/raw", inspector.raw, methods=["POST"]),
        Route("/api/openapi", inspector.openapi, methods=["POST"]),
        Route("/{name:str}", inspector.asset, methods=["GET", "HEAD"]),
    ]
    return Starlette(routes=routes)


def inspector_routes(**options: Any) -> list[BaseRoute]:
    """The routes that mount a locked inspector at ``/inspector/`` in an agent's app (``create_app(inspector=True)``).

    ``/inspector`` redirects to ``/inspector/``: the agent app's catch-all REST mount would otherwise answer it.
    """

    async def redirect(request: Request) -> Response:
        return RedirectResponse(request.url.path + "/", status_code=307)

    return [
        Route(MOUNT_PATH, redirect, methods=["GET", "HEAD"]),
        Mount(MOUNT_PATH, app=create_inspector(locked=True, **options)),
    ]
