"""``create_app``: an ASGI app serving an executor over JSON-RPC and HTTP+JSON, with its agent card and health.

The app is Starlette composition (a route list), so it runs alone or mounts into an existing Starlette/FastAPI app.
Its lifespan starts the engine (store open, orphan recovery) and drains it on shutdown. Mounted apps don't get
lifespan events from their parent, so the first request starts the engine too; add
``relaykit_app.state.relaykit.lifespan`` to the parent's lifespan to also drain on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from typing import Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route

from relaykit._card import (
    GRPC,
    HTTP_JSON,
    JSONRPC,
    PROTOCOL_VERSION,
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
)
from relaykit.adapters._detect import as_executor
from relaykit.backends._base import PushConfigStore, PushOutbox, TaskStore
from relaykit.backends._bus import EventBus, LocalEventBus
from relaykit.backends._url import open_push_store, open_store
from relaykit.http._asgi import Receive, Scope, Send, header, send_bytes
from relaykit.http._jsonrpc import JSONRPCBinding
from relaykit.http._rest import RESTBinding
from relaykit.push._outbox import open_outbox
from relaykit.push._sender import DeliveryPolicy, PushEvents, PushSender
from relaykit.push._signing import PushSigner
from relaykit.push._status import STATUS_PATH, JWKSEndpoint, PushStatusEndpoint
from relaykit.server._agent import FunctionAgent
from relaykit.server._engine import TaskEngine
from relaykit.server._executor import AgentExecutor
from relaykit.server._handler import ExtendedCardProvider, RequestHandler

__all__ = ["A2AServer", "build_card", "create_app"]

CARD_PATH = "/.well-known/agent-card.json"
JWKS_PATH = "/.well-known/jwks.json"


def build_card(
    executor: AgentExecutor,
    card: AgentCard | None,
    *,
    public_url: str,
    grpc_url: str | None = None,
    streaming: bool = True,
    push: bool = False,
    extended: bool = False,
) -> AgentCard:
    """The served card: the given one (or one derived from the executor) with interfaces and capabilities filled."""
    if card is None:
        card = getattr(executor, "card", None)
    if card is None:
        name = getattr(executor, "name", None) or type(executor).__name__
        doc = inspect.getdoc(executor.fn if isinstance(executor, FunctionAgent) else type(executor)) or ""
        description = doc.strip().split("\n\n", 1)[0] or f"{name} agent"
        card = AgentCard(
            name=name,
            description=description,
            version="1.0.0",
            skills=[AgentSkill(id=name, name=name, description=description, tags=["relaykit"])],
        )
    base = public_url.rstrip("/")
    interfaces = [
        # CONTRACT: JSON-RPC at {public-url}/, HTTP+JSON at {public-url} (routes at the root), gRPC as host:port.
        AgentInterface(url=base + "/", protocol_binding=JSONRPC, protocol_version=PROTOCOL_VERSION),
        AgentInterface(url=base, protocol_binding=HTTP_JSON, protocol_version=PROTOCOL_VERSION),
    ]
    if grpc_url:
        interfaces.append(AgentInterface(url=grpc_url, protocol_binding=GRPC, protocol_version=PROTOCOL_VERSION))
    caps = card.capabilities
    capabilities = AgentCapabilities(
        streaming=streaming if caps.streaming is None else caps.streaming and streaming,
        push_notifications=push,
        extensions=caps.extensions,
        extended_agent_card=True if extended else caps.extended_agent_card,
    )
    return card.model_copy(update={"supported_interfaces": interfaces, "capabilities": capabilities})


class _CardEndpoint:
    """``GET /.well-known/agent-card.json`` with ETag, Cache-Control and Last-Modified; no A2A-Version needed."""

    def __init__(self, card: AgentCard, max_age: int = 300) -> None:
        self.body = card.to_json()
        self.etag = b'"' + hashlib.sha256(self.body).hexdigest()[:32].encode() + b'"'
        self.headers = [
            (b"etag", self.etag),
            (b"cache-control", b"public, max-age=%d" % max_age),
            (b"last-modified", formatdate(usegmt=True).encode()),
            (b"access-control-allow-origin", b"*"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = header(scope, b"if-none-match")
        if match is not None and self.etag in {m.strip() for m in match.split(b",")}:
            await send({"type": "http.response.start", "status": 304, "headers": self.headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await send_bytes(send, 200, self.body, b"application/json", self.headers)


class A2AServer:
    """The running parts behind an app: engine, handler, bindings. ``app.state.relaykit`` holds it."""

    def __init__(
        self, engine: TaskEngine, handler: RequestHandler, *, grace: float = 5.0, retention: float | None = None
    ) -> None:
        self.engine = engine
        self.handler = handler
        self.grace = grace
        self.retention = retention
        self.started = False
        self.draining = False
        self._lock = asyncio.Lock()
        self._purger: asyncio.Task[None] | None = None
        # One access line per request (CONTRACT: operation, task id, outcome, duration; off by default).
        self.access_log = False
        # Webhook targets opened past the SSRF guard (--push-allow), read by push delivery.
        self.push_allow: tuple[str, ...] = ()
        # Push delivery (None when push is off): started after the stores, stopped after the engine drained.
        self.push_sender: PushSender | None = None

    async def start(self) -> None:
        """Open stores and recover orphans (idempotent)."""
        if self.started:
            return
        async with self._lock:
            if self.started:
                return
            await self.engine.start()
            await self.handler.push_store.start()
            if self.push_sender is not None:
                await self.push_sender.start()
            if self.retention:
                self._purger = asyncio.create_task(self._purge_loop(self.retention), name="relaykit-retention")
            self.started = True

    async def _purge_loop(self, retention: float) -> None:
        # Purge at a tenth of the retention period (at most hourly), so nothing outlives it by much.
        log = logging.getLogger("relaykit.retention")
        while True:
            try:
                cutoff = datetime.now(UTC) - timedelta(seconds=retention)
                removed = await self.engine.store.purge(cutoff)
                if removed:
                    log.info("purged %d terminal task(s) older than %s", removed, cutoff.isoformat())
            except Exception:
                log.exception("retention purge failed")
            await asyncio.sleep(min(retention / 10, 3600.0))

    async def stop(self) -> None:
        """Drain running executions for the grace period, fail the rest, close stores."""
        if not self.started:
            return
        self.draining = True
        if self._purger is not None:
            self._purger.cancel()
            self._purger = None
        await self.engine.shutdown(self.grace)
        if self.push_sender is not None:
            # After the engine: the notifications of its last events (e.g. "server shutdown") are queued by now.
            await self.push_sender.stop(drain=min(self.grace, 2.0))
        await self.handler.push_store.close()
        self.started = False

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """A lifespan context for the app (or a parent app that mounts it)."""
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    def guard(self, app: Any) -> _Guarded:
        """Wrap a binding so the first request starts the engine when no lifespan ran (mounted apps)."""
        return _Guarded(self, app)

    async def healthz(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 200, b'{"status":"ok"}', b"application/json")

    async def readyz(self, scope: Scope, receive: Receive, send: Send) -> None:
        # CONTRACT: ready = serving, not draining, and the store reachable (a store with a ping() is asked; the
        # embedded stores are in-process and reachable whenever they are started).
        ready = self.started and not self.draining and self.engine.accepting
        reason = b"not started or draining"
        ping = getattr(self.engine.store, "ping", None)
        if ready and ping is not None:
            try:
                await asyncio.wait_for(ping(), timeout=2.0)
            except Exception:
                ready, reason = False, b"store unreachable"
        if ready:
            try:
                await asyncio.wait_for(self.engine.bus.ping(), timeout=2.0)
            except Exception:
                ready, reason = False, b"event bus unreachable"
        body = b'{"status":"ready"}' if ready else b'{"status":"not ready","reason":"' + reason + b'"}'
        await send_bytes(send, 200 if ready else 503, body, b"application/json")


class _Guarded:
    # A class, not a closure: Starlette routes treat plain functions as request/response endpoints.
    __slots__ = ("app", "server")

    def __init__(self, server: A2AServer, app: Any) -> None:
        self.server = server
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.server.started:
            await self.server.start()
        if not self.server.access_log:
            await self.app(scope, receive, send)
            return
        await _logged(self.app, scope, receive, send)


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


class _Endpoint:
    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.fn(scope, receive, send)


def create_app(
    executor: AgentExecutor | object,
    *,
    card: AgentCard | None = None,
    store: TaskStore | str = "memory",
    push_store: PushConfigStore | None = None,
    bus: EventBus | str | None = None,
    public_url: str = "http://localhost:8000",
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
    replay: int = 1000,
    retention: float | None = None,
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
) -> Starlette:
    """Serve ``executor`` as an A2A 1.0 agent over JSON-RPC (``POST /``) and HTTP+JSON (routes at the root).

    >>> from relaykit import agent
    >>> from relaykit.http import create_app
    >>> @agent
    ... async def echo(context):
    ...     return context.text
    >>> app = create_app(echo)   # uvicorn module:app, or mount it in FastAPI

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
    """
    redis_url = bus if isinstance(bus, str) and bus != "memory" else None
    if redis_url is not None and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"unknown bus {bus!r}: use memory or redis://…")
    if isinstance(store, str):
        task_store = open_store(store, namespace=namespace, shared=redis_url is not None)
    else:
        task_store = store
    executor = as_executor(executor, store=task_store)  # a framework's agent or graph gets its adapter
    if push_store is None:
        push_store = open_push_store(store, task_store) if isinstance(store, str) else open_push_store("memory")
    sender: PushSender | None = None
    signer: PushSigner | None = None
    if push:
        if push_signing_key is not None:
            signer = PushSigner(push_signing_key, key_ids=push_key_id, issuer=public_url)
        sender = PushSender(
            push_store,
            push_outbox if push_outbox is not None else open_outbox(task_store),
            policy=push_policy,
            events=push_events,
            allow=tuple(push_allow),
            signer=signer,
        )
        # Config writes go through the sender's cache, so the engine hook never reads the store per event.
        push_store = sender.configs
    event_bus: EventBus
    if redis_url is not None:
        from relaykit.backends._redis import RedisEventBus

        event_bus = RedisEventBus(redis_url, namespace=namespace)
    else:
        event_bus = bus if bus is not None and not isinstance(bus, str) else LocalEventBus(replay=replay)
    engine = TaskEngine(
        executor,
        store=task_store,
        bus=event_bus,
        executor_timeout=executor_timeout,
        cancel_grace=cancel_grace,
        max_concurrent=max_concurrent,
        max_queued=max_queued,
        max_subscribers=max_subscribers,
    )
    if redis_url is not None:
        from relaykit.backends._redis_queue import RedisWorkQueue
        from relaykit.server._cluster import Cluster

        cluster = Cluster(
            engine,
            RedisWorkQueue(redis_url, namespace=namespace, client=event_bus.client),  # type: ignore[attr-defined]
            worker=worker,
            lease=lease,
            heartbeat=heartbeat if heartbeat is not None else lease / 5,
            unstarted_after=unstarted_after if unstarted_after is not None else max(30.0, 3 * lease),
            idempotency_window=idempotency_window,
        )
        if sender is not None:
            cluster.share_push_configs(sender.configs)
    if sender is not None:
        sender.bind(engine)  # hooks engine.on_event once a push config may exist
    served = build_card(
        executor,
        card,
        public_url=public_url,
        grpc_url=grpc_url,
        streaming=streaming,
        push=push,
        extended=extended_card is not None,
    )
    handler = RequestHandler(engine, served, push_store=push_store, extended_card=extended_card)
    server = A2AServer(engine, handler, grace=grace, retention=retention)
    server.access_log = access_log
    server.push_allow = push_allow
    server.push_sender = sender
    if sender is not None:
        handler.push_url_check = sender.check_config
    jsonrpc = server.guard(JSONRPCBinding(handler, max_body=max_body, keepalive=keepalive))
    rest = server.guard(RESTBinding(handler, max_body=max_body, keepalive=keepalive))
    # JSON-RPC first: no other route matches POST / (the REST mount takes it only as a fallback), and _App calls
    # the first route directly for that request.
    rpc_route = Route("/", jsonrpc, methods=["POST"])
    routes: list[BaseRoute] = [
        rpc_route,
        Route(CARD_PATH, _CardEndpoint(served), methods=["GET", "HEAD"]),
        Route("/healthz", _Endpoint(server.healthz), methods=["GET", "HEAD"]),
        Route("/readyz", _Endpoint(server.readyz), methods=["GET", "HEAD"]),
    ]
    if signer is not None:
        routes.append(Route(JWKS_PATH, JWKSEndpoint(signer), methods=["GET", "HEAD"]))
    if sender is not None:
        routes.append(Route(STATUS_PATH, server.guard(PushStatusEndpoint(sender, engine)), methods=["GET"]))
    routes.append(Mount("", app=rest))
    app = _App(routes=routes, lifespan=server.lifespan)
    app.rpc_route = rpc_route
    app.state.relaykit = server
    return app
