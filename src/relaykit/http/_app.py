"""``create_app``: an ASGI app serving an executor over JSON-RPC and HTTP+JSON, with its agent card and health.

The app is Starlette composition (a route list), so it runs alone or mounts into an existing Starlette/FastAPI app.
What it serves is an ``A2AServer`` from ``relaykit.assembly.assemble`` (engine, stores, bus, push): this module adds
only the HTTP parts (routes, the card endpoint, health and readiness, the access log, lifespan glue).

Its lifespan starts the engine (store open, orphan recovery) and drains it on shutdown. Mounted apps don't get
lifespan events from their parent, so the first request starts the engine too; add
``relaykit_app.state.relaykit.lifespan`` to the parent's lifespan to also drain on shutdown.

The card's JSON-RPC and HTTP+JSON URLs: ``public_url`` when given (``relaykit serve`` always gives one). Without it,
the address the request reached the app at: the ASGI scope's scheme, the ``Host`` header (or the server address) and
``root_path``, which holds the mount path (``/agent`` under ``Mount("/agent", app)``), as a framework's ``url_for``
builds URLs. ``X-Forwarded-*`` headers are not read here: a proxy's address reaches the scope only through the ASGI
server's own proxy-headers handling (uvicorn ``--forwarded-allow-ips``), or set ``public_url``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from email.utils import formatdate
from typing import Any

import pydantic_core
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from relaykit._card import HTTP_JSON, JSONRPC, AgentCard, AgentInterface
from relaykit._openapi import OPENAPI_PATH, openapi_json
from relaykit._v03 import VERSION as V03
from relaykit._v03 import card_merged
from relaykit.assembly._assemble import PROTOCOLS, assemble, build_card, http_interfaces
from relaykit.assembly._server import A2AServer
from relaykit.auth._gate import Auth
from relaykit.backends._base import PushConfigStore, PushOutbox, TaskStore
from relaykit.backends._bus import EventBus
from relaykit.http._asgi import Receive, Scope, Send, header, send_bytes
from relaykit.http._conditional import evaluate
from relaykit.http._jsonrpc import JSONRPCBinding
from relaykit.http._push import JWKS_PATH, STATUS_PATH, JWKSEndpoint, PushStatusEndpoint
from relaykit.http._rest import RESTBinding
from relaykit.push._sender import DeliveryPolicy, PushEvents
from relaykit.server._executor import AgentExecutor
from relaykit.server._handler import ExtendedCardProvider
from relaykit.server._quotas import Quotas
from relaykit.telemetry import Telemetry

__all__ = ["A2AServer", "build_card", "create_app", "http_app"]

CARD_PATH = "/.well-known/agent-card.json"
CARD_BASES = 8  # request base URLs whose encoded card is kept (a mount is reached by one or two names)
_HOST = re.compile(r"(?:[A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def request_base(scope: Scope) -> str:
    """The URL the app is reached at for this request: scheme, host (and port), and the mount path (``root_path``)."""
    scheme = str(scope.get("scheme") or "http")
    raw = header(scope, b"host")
    host = raw.decode("latin-1") if raw is not None else ""
    if not _HOST.fullmatch(host):
        # No Host header (HTTP/1.0), or not a host[:port]: the address the server accepted the connection on.
        server = scope.get("server")
        if server:
            name, port = str(server[0]), server[1]
            name = f"[{name}]" if ":" in name else name
            host = name if port is None or _DEFAULT_PORTS.get(scheme) == port else f"{name}:{port}"
        else:
            host = "localhost"
    return f"{scheme}://{host}{scope.get('root_path', '')}".rstrip("/")


class _RenderedCard:
    """One card, encoded once, with its validators: ``body`` as served to a 0.3 client (or one that does not say),
    ``v10`` as served to a request that carries ``A2A-Version: 1.x``."""

    __slots__ = ("body", "etag", "headers", "modified", "v10")

    def __init__(
        self,
        card: AgentCard,
        max_age: int,
        body: bytes | None = None,
        sign_json: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        # The 1.0 card, with the 0.3 members merged in when it lists a 0.3 interface (relaykit._v03._card). A
        # request without A2A-Version is a 0.3 client's (spec §3.6.2), which needs them; a 1.0 client, which
        # sends its version, gets the plain 1.0 card (a strict 1.0 schema rejects the 0.3 members).
        rendered_here = body is None
        if body is None:
            merged = card_merged(card)
            if merged is not None and sign_json is not None:
                # The card's signatures cover its 1.0 form; a verifier that canonicalises the JSON it received
                # (no model in between) needs one over the merged form too (``sign_served_json``).
                merged = sign_json(merged)
            body = card.to_json() if merged is None else pydantic_core.to_json(merged)
        self.body = body
        self.etag = b'"' + hashlib.sha256(self.body).hexdigest()[:32].encode() + b'"'
        # Whole seconds, as Last-Modified says it: If-Modified-Since with that very value is "not modified".
        self.modified = int(time.time())
        self.headers = [
            (b"etag", self.etag),
            (b"cache-control", b"public, max-age=%d" % max_age),
            (b"last-modified", formatdate(self.modified, usegmt=True).encode()),
            (b"access-control-allow-origin", b"*"),
        ]
        plain = card.to_json() if rendered_here else self.body
        self.v10 = self
        if plain != self.body:
            self.headers.append((b"vary", b"A2A-Version"))
            self.v10 = _RenderedCard(card, max_age, plain)
            self.v10.headers.append((b"vary", b"A2A-Version"))


def _speaks_v1(scope: Scope) -> bool:
    """Whether the request states an A2A version of 1.0 or later."""
    major = (header(scope, b"a2a-version") or b"").split(b".", 1)[0].strip()
    return major.isdigit() and int(major) >= 1


class _CardEndpoint:
    """``GET /.well-known/agent-card.json`` with ETag, Cache-Control and Last-Modified; no A2A-Version needed.

    ``follow_request``: the JSON-RPC and HTTP+JSON URLs name where this request reached the app (``request_base``);
    each base's card is encoded once and the last ``CARD_BASES`` are kept. Otherwise the card is served as built.
    """

    def __init__(
        self,
        card: AgentCard,
        *,
        follow_request: bool = False,
        max_age: int = 300,
        signer: Callable[[AgentCard], AgentCard] | None = None,
        sign_json: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.card = card
        self.max_age = max_age
        self.sign_json = sign_json
        # A signed card is served exactly as signed: its URLs cannot follow the request unless we sign each variant.
        self.signer = signer
        follow = follow_request and (signer is not None or not card.signatures)
        self.fixed = None if follow else _RenderedCard(card, max_age, sign_json=sign_json)
        self._by_base: dict[str, _RenderedCard] = {}

    def _for_base(self, base: str) -> _RenderedCard:
        rendered = self._by_base.get(base)
        if rendered is None:
            # The GRPC interfaces (a host:port of their own) stay as built; only the HTTP ones follow the request,
            # for every protocol version the card lists, in its order.
            interfaces: list[AgentInterface] = []
            for interface in self.card.supported_interfaces:
                if interface.protocol_binding == JSONRPC:
                    interfaces.extend(http_interfaces(base, interface.protocol_version))
                elif interface.protocol_binding != HTTP_JSON:
                    interfaces.append(interface)
            update: dict[str, Any] = {"supported_interfaces": interfaces}
            if self.signer is not None:
                update["signatures"] = []
            card = self.card.model_copy(update=update)
            if self.signer is not None:
                card = self.signer(card)
            rendered = _RenderedCard(card, self.max_age, sign_json=self.sign_json)
            if len(self._by_base) >= CARD_BASES:
                del self._by_base[next(iter(self._by_base))]  # the oldest: a bound, not a policy
            self._by_base[base] = rendered
        return rendered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rendered = self.fixed if self.fixed is not None else self._for_base(request_base(scope))
        if _speaks_v1(scope):
            rendered = rendered.v10
        status = evaluate(scope, rendered.etag, rendered.modified)  # RFC 9110 §13.2.2 (relaykit.http._conditional)
        if status == 304:
            await send({"type": "http.response.start", "status": 304, "headers": rendered.headers})
            await send({"type": "http.response.body", "body": b""})
            return
        if status == 412:
            # No Cache-Control here: a cache may store any status that carries explicit freshness (RFC 9111 §3).
            await send_bytes(send, 412, b"", b"text/plain", [(b"etag", rendered.etag)])
            return
        await send_bytes(send, 200, rendered.body, b"application/json", rendered.headers)


# Endpoints are instances, not functions: Starlette routes treat functions and methods as request/response endpoints.


class _Health:
    """``GET /healthz``: the process is alive."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 200, b'{"status":"ok"}', b"application/json")


class _Ready:
    """``GET /readyz``: 200 when serving, not draining, and the store and bus reachable; 503 with the reason."""

    __slots__ = ("server",)

    def __init__(self, server: A2AServer) -> None:
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reason = await self.server.unready_reason()
        if reason is None:
            await send_bytes(send, 200, b'{"status":"ready"}', b"application/json")
            return
        body = b'{"status":"not ready","reason":"' + reason.encode() + b'"}'
        await send_bytes(send, 503, body, b"application/json")


class _Guarded:
    # A class, not a closure: Starlette routes treat plain functions as request/response endpoints.
    __slots__ = ("app", "binding", "server")

    def __init__(self, server: A2AServer, app: Any, binding: str = "http") -> None:
        self.server = server
        self.app = app
        self.binding = binding  # the telemetry's name for it: jsonrpc, rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = self.server
        if not server.started:
            await server.start()
        if server.telemetry is not None:
            # The request's span and metrics around the binding (and the access line, when on).
            app = self.app if not server.access_log else functools.partial(_logged, self.app)
            await server.telemetry.serve_http(self.binding, app, scope, receive, send)
            return
        if not server.access_log:
            await self.app(scope, receive, send)
            return
        await _logged(self.app, scope, receive, send)


class _Metrics:
    """``GET /metrics``: the Prometheus text exposition (``relaykit serve --metrics``)."""

    __slots__ = ("server",)

    def __init__(self, server: A2AServer) -> None:
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        telemetry = self.server.telemetry
        body = await telemetry.metrics.render() if telemetry is not None and telemetry.metrics is not None else b""
        await send_bytes(send, 200, body, b"text/plain; version=0.0.4; charset=utf-8")


_ACCESS = logging.getLogger("relaykit.access")
_NEW_TASK_ID = re.compile(rb'^\{"task":\{"id":"([^"]{1,200})"')
_RPC_ERROR = re.compile(rb'"error":\{"code":(-?\d+)')


async def _logged(app: Any, scope: Scope, receive: Receive, send: Send) -> None:
    """Run ``app`` and log one line: operation, task id, outcome, duration (CONTRACT: never message content)."""
    started = time.perf_counter()
    seen: dict[str, Any] = {"status": 0, "head": b""}

    async def watching(message: Any) -> None:
        if message["type"] == "http.response.start":
            seen["status"] = message["status"]
        elif message["type"] == "http.response.body" and not seen["head"]:
            seen["head"] = bytes(message.get("body", b""))[:300]
        await send(message)

    try:
        await app(scope, receive, watching)
    finally:
        head: bytes = seen["head"]
        task = scope.get("relaykit.task", "")
        if not task:
            found = _NEW_TASK_ID.match(head) or re.search(rb'"result":\{"task":\{"id":"([^"]{1,200})"', head)
            task = found.group(1).decode() if found else "-"
        error = _RPC_ERROR.search(head)
        outcome = f"error {error.group(1).decode()}" if error else ("ok" if seen["status"] < 400 else "error")
        _ACCESS.info(
            "%s %s task=%s status=%s outcome=%s %.1fms",
            scope.get("method", "-"),
            scope.get("relaykit.op", scope.get("path", "-")),
            task,
            seen["status"],
            outcome,
            (time.perf_counter() - started) * 1000,
            extra={"task_id": task} if task != "-" else None,
        )


def _is_root(scope: Scope) -> bool:
    """Whether Starlette's route path of this request (``starlette._utils.get_route_path``) is ``/``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path == "/"
    return path == root + "/"


class _App(Starlette):
    """The Starlette app ``create_app`` returns, with a shortcut for its hottest request.

    ``POST /`` (JSON-RPC) goes straight to its route's endpoint, as the router would send it, when the middleware
    stack is Starlette's own (no user middleware, no body limit): those two layers act only on exceptions, and the
    JSON-RPC endpoint answers every ``Exception`` itself. It saves the per-request cost of the middleware layers,
    the route scan and their ``send`` wrappers (about a tenth of a blocking SendMessage). Any other request, or any
    app with middleware added, takes the ordinary path.
    """

    rpc_route: Route | None = None
    _direct = False

    def build_middleware_stack(self) -> Any:
        stack = super().build_middleware_stack()
        router = self.router
        self._direct = (
            self.rpc_route is not None
            and not self.user_middleware
            and getattr(self, "max_body_size", None) is None
            and router.middleware_stack == router.app
        )
        return stack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._direct and scope["type"] == "http" and scope["method"] == "POST":
            route = self.rpc_route
            routes = self.router.routes
            if routes and routes[0] is route and route is not None and _is_root(scope):
                # The scope keys the router would set (the endpoint reads none of the middleware's).
                scope["app"] = self
                if "router" not in scope:
                    scope["router"] = self.router
                scope["route"] = route
                scope["endpoint"] = route.endpoint
                scope["path_params"] = dict(scope.get("path_params", {}))
                await route.app(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _openapi_endpoint(card: AgentCard, public_url: str | None) -> Any:
    """``GET /openapi.json`` (relaykit._openapi), built on first use: most apps are never asked for it."""
    body: list[bytes] = []
    # Without a public URL the server entry is relative ("."), which OpenAPI resolves against the document's own
    # location, so a mounted app's description points at its mount path.
    server_url = public_url or "."

    async def endpoint(request: Request) -> Response:
        if not body:
            body.append(
                openapi_json(
                    server_url=server_url,
                    title=card.name,
                    description=card.description,
                    security_schemes=card.security_schemes,
                    security_requirements=card.security_requirements,
                )
            )
        return Response(body[0], media_type="application/json", headers={"access-control-allow-origin": "*"})

    return endpoint


def http_app(
    server: A2AServer, *, max_body: int = 10 * 1024 * 1024, keepalive: float = 15.0, inspector: bool = False
) -> Starlette:
    """The ASGI app serving ``server`` (``relaykit.assembly.assemble``) over JSON-RPC and HTTP+JSON, with its card,
    health, readiness, push endpoints and ``GET /openapi.json``; ``inspector=True`` mounts the web inspector at
    ``/inspector/``. ``app.state.relaykit`` is ``server``. ``create_app`` is assemble + this."""
    handler = server.handler
    v03 = V03 in server.protocols
    jsonrpc = _Guarded(server, JSONRPCBinding(handler, max_body=max_body, keepalive=keepalive, v03=v03), "jsonrpc")
    rest = _Guarded(server, RESTBinding(handler, max_body=max_body, keepalive=keepalive, v03=v03), "rest")
    # JSON-RPC first: no other route matches POST / (the REST mount takes it only as a fallback), and _App calls
    # the first route directly for that request.
    rpc_route = Route("/", jsonrpc, methods=["POST"])
    card_signer = server.card_signer
    card = _CardEndpoint(
        handler.card,
        follow_request=server.public_url is None,
        signer=card_signer.sign if card_signer is not None else None,
        sign_json=card_signer.sign_json if card_signer is not None else None,
    )
    routes: list[BaseRoute] = [
        rpc_route,
        Route(CARD_PATH, card, methods=["GET", "HEAD"]),
        Route("/healthz", _Health(), methods=["GET", "HEAD"]),
        Route("/readyz", _Ready(server), methods=["GET", "HEAD"]),
    ]
    jwks = server.jwks()
    if jwks is not None:
        routes.append(Route(JWKS_PATH, JWKSEndpoint(jwks), methods=["GET", "HEAD"]))
    if server.push_sender is not None:
        status = PushStatusEndpoint(server.push_sender, server.engine, handler.auth)
        routes.append(Route(STATUS_PATH, _Guarded(server, status), methods=["GET"]))
    if server.metrics_endpoint:
        routes.append(Route("/metrics", _Metrics(server), methods=["GET", "HEAD"]))
    routes.append(Route(OPENAPI_PATH, _openapi_endpoint(handler.card, server.public_url), methods=["GET", "HEAD"]))
    if inspector:
        from relaykit.inspector import inspector_routes

        routes.extend(inspector_routes())
    routes.append(Mount("", app=rest))
    app = _App(routes=routes, lifespan=server.lifespan)
    app.rpc_route = rpc_route
    app.state.relaykit = server
    return app


def create_app(
    executor: AgentExecutor | object,
    *,
    card: AgentCard | None = None,
    store: TaskStore | str = "memory",
    push_store: PushConfigStore | None = None,
    bus: EventBus | str | None = None,
    public_url: str | None = None,
    grpc_url: str | None = None,
    push: bool = True,
    streaming: bool = True,
    extended_card: ExtendedCardProvider | None = None,
    executor_timeout: float | None = None,
    cancel_grace: float = 0.0,
    max_body: int = 10 * 1024 * 1024,
    keepalive: float = 15.0,
    grace: float = 5.0,
    max_concurrent: int = 1000,
    max_queued: int = 16,
    max_subscribers: int = 64,
    max_artifact_bytes: int = 64 * 1024 * 1024,
    max_history_bytes: int = 16 * 1024 * 1024,
    replay: int = 1000,
    retention: float | None = None,
    retention_interrupted: float | None = None,
    access_log: bool = False,
    namespace: str = "relaykit",
    push_allow: tuple[str, ...] = (),
    push_events: PushEvents = "all",
    push_policy: DeliveryPolicy | None = None,
    push_signing_key: Any = None,
    push_key_id: str | Sequence[str | None] | None = None,
    push_outbox: PushOutbox | None = None,
    worker: bool = True,
    lease: float = 10.0,
    heartbeat: float | None = None,
    unstarted_after: float | None = None,
    idempotency_window: float = 600.0,
    protocols: str | Sequence[str] = PROTOCOLS,
    telemetry: Telemetry | bool | None = None,
    metrics: bool = False,
    auth: Auth | None = None,
    card_signing_key: Any = None,
    card_key_id: str | None = None,
    push_secrets_key: str | bytes | Sequence[str | bytes] | None = None,
    quotas: Quotas | None = None,
    inspector: bool = False,
) -> Starlette:
    """Serve ``executor`` as an A2A 1.0 agent over JSON-RPC (``POST /``) and HTTP+JSON (routes at the root), and
    as an A2A 0.3 agent on the same endpoints (0.3 method names, ``/v1/…`` routes) unless ``protocols="1.0"``.

    The engine, stores, bus and push delivery are ``relaykit.assembly.assemble(executor, **options)``; this adds
    the HTTP app over it (``max_body``: request bodies over it get 413; ``keepalive``: SSE keep-alive seconds;
    ``inspector=True``: the web inspector, ``relaykit.inspector``, at ``/inspector/``). ``GET /openapi.json``
    describes the HTTP+JSON binding (OpenAPI 3.1).

    >>> from relaykit import agent
    >>> from relaykit.http import create_app
    >>> @agent
    ... async def echo(context):
    ...     return context.text
    >>> app = create_app(echo)   # uvicorn module:app, or mount it in FastAPI

    Store: ``store="memory"`` by default, so nothing survives a restart; pass ``store="sqlite:///relaykit.db"`` (what
    ``relaykit serve`` uses by default), a PostgreSQL URL, or a ``TaskStore``.

    Card: ``public_url`` is the base URL of its JSON-RPC and HTTP+JSON interfaces (and the push JWT issuer). Left
    out, the card names the address each request reached the app at (scheme, ``Host``, mount path), so an app
    mounted at ``/agent`` advertises ``…/agent``; set it when clients reach the agent by another name (a proxy).
    ``grpc_url`` (``host:port``) adds the GRPC interface; serve it with ``relaykit.grpc.GrpcServer(app)``.

    Push notifications (``push=True``, the default): every task event (``push_events="all"``) or only state
    changes (``"state"``) is queued in the outbox (``push_outbox``; default: in the SQLite file of ``store``, or
    memory) and delivered to each of the task's push configs by ``relaykit.push.PushSender`` under
    ``push_policy``. Webhook URLs pass the SSRF guard unless ``push_allow`` names their host or network.
    ``push_signing_key`` (an EC/RSA private key PEM or object, or several, oldest first) signs each delivery
    (``X-A2A-Signature``) and publishes ``/.well-known/jwks.json``; ``push_key_id`` names the key(s).
    ``GET /relaykit/push/status/{taskId}`` reports delivery health (``relaykit push status``).

    Scale-out: ``bus="redis://…"`` (with a PostgreSQL ``store``) makes this app one replica of many: messages go
    through the Redis work queue, events through per-task Redis Streams, and this process also runs queued work
    unless ``worker=False``. A worker's claim on a task lapses ``lease`` seconds after its last heartbeat (every
    ``heartbeat`` seconds, default a fifth of the lease); a repeated messageId within ``idempotency_window``
    seconds gets the original result.

    Observability (``relaykit.telemetry``): spans when an OpenTelemetry SDK is set up (``telemetry=None``, the
    default), ``telemetry=False`` for none; ``metrics=True`` serves Prometheus text at ``GET /metrics``.

    Security: ``auth`` (``relaykit.auth.Auth``) authenticates every operation on every binding (401 +
    ``WWW-Authenticate`` when refused) and generates the card's ``securitySchemes`` / ``securityRequirements``; the
    extended card is served to authenticated callers only. ``card_signing_key`` signs the served card (RFC 8785 +
    JWS; ``card_key_id`` names the key) and publishes its public key at ``/.well-known/jwks.json``. A ``card`` that
    is already signed is served exactly as given. ``push_secrets_key`` (``relaykit.push.new_secrets_key()``)
    encrypts push credentials at rest in every store.

    Limits: ``quotas`` (``relaykit.server.Quotas``-like, in ``relaykit.server._quotas``) bounds what one
    authenticated principal may take: executions, open streams, requests per second, push configs per task.
    ``max_artifact_bytes`` bounds the artifacts a task holds over all its executions (past it the task FAILS),
    ``max_history_bytes`` the history (ProtoJSON bytes) follow-up messages grow a task to (past it a follow-up is
    refused with InvalidParams; start a new task in the same context); ``0`` turns either off. See docs/limits.md
    for every default.
    """
    # Every option but the HTTP ones is assemble's, by the same name and default (tests/test_assembly.py checks the
    # two signatures agree), so they are passed on as they came.
    options = dict(locals())
    del options["executor"], options["max_body"], options["keepalive"], options["inspector"]
    return http_app(assemble(executor, **options), max_body=max_body, keepalive=keepalive, inspector=inspector)
