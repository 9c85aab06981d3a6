"""``assemble``: options in, one ``A2AServer`` out: task store, push config store, event bus, work queue (scale-out),
engine, push delivery and signing, the agent card, the request handler.

This is the composition root every way of serving attaches to: ``create_app`` (HTTP) adds its routes to the server
it returns, ``GrpcServer`` its service, ``relaykit serve`` both, ``relaykit worker`` neither. So an HTTP-only, a
gRPC-only and a dual server are the same assembly with bindings left out or added, and no binding builds engines,
stores or buses of its own.

Rules kept here once:

* A store URL opens the task store and, beside it, the push config store and the push outbox (``store="memory"``
  for all three unless given).
* ``bus="redis://…"`` makes the server one replica of many: a Redis event bus plus a Redis work queue under a
  ``Cluster`` (and the task store opened ``shared``); any other string but ``memory`` is refused.
* With push on, config writes go through the ``PushSender``'s cache (the handler's push store *is* that cache), so
  the engine hook never reads the store per event.
* The card says exactly what is enforced: its ``securitySchemes`` / ``securityRequirements`` are generated from
  ``auth``, and a card that declares a scheme no configured authenticator verifies refuses to start (``ValueError``).
  A card passed in already signed is served exactly as given (its security must match ``auth``); otherwise the card
  is signed last (``card_signing_key``), after its interfaces and security are filled in.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

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
from relaykit._v03 import VERSION as V03
from relaykit.assembly._server import A2AServer
from relaykit.assembly._signing import CardSigner
from relaykit.auth._gate import Auth
from relaykit.backends._base import PushConfigStore, PushOutbox, TaskStore
from relaykit.backends._bus import EventBus
from relaykit.backends._url import open_push_store, open_store
from relaykit.backends.memory import LocalEventBus
from relaykit.push._outbox import open_outbox
from relaykit.push._secrets import SealedPushConfigStore
from relaykit.push._sender import DeliveryPolicy, PushEvents, PushSender
from relaykit.push._signing import PushSigner
from relaykit.server._agent import FunctionAgent
from relaykit.server._engine import TaskEngine
from relaykit.server._executor import AgentExecutor
from relaykit.server._handler import ExtendedCardProvider, RequestHandler
from relaykit.server._quotas import Quotas
from relaykit.telemetry import Telemetry, telemetry_for

__all__ = [
    "DEFAULT_PUBLIC_URL",
    "PROTOCOLS",
    "assemble",
    "build_card",
    "http_interfaces",
    "parse_protocols",
    "served_interfaces",
]

# The A2A versions relaykit speaks, in the card's order; both are served unless told otherwise.
PROTOCOLS: tuple[str, ...] = (PROTOCOL_VERSION, V03)

# Where the HTTP app publishes its public keys (push signing, card signing): the card's ``jku``.
JWKS_PATH = "/.well-known/jwks.json"
# The base URL of the card (and the push JWT issuer) when none is given: ``relaykit serve``'s default address.
DEFAULT_PUBLIC_URL = "http://localhost:8000"


def http_interfaces(public_url: str, version: str = PROTOCOL_VERSION) -> list[AgentInterface]:
    """The card's JSON-RPC and HTTP+JSON interfaces for an app whose routes are at ``public_url``."""
    base = public_url.rstrip("/")
    # CONTRACT: JSON-RPC at {public-url}/, HTTP+JSON at {public-url} (routes at the root; 0.3's under /v1/ there).
    return [
        AgentInterface(url=base + "/", protocol_binding=JSONRPC, protocol_version=version),
        AgentInterface(url=base, protocol_binding=HTTP_JSON, protocol_version=version),
    ]


def served_interfaces(public_url: str, grpc_url: str | None, protocols: Sequence[str]) -> list[AgentInterface]:
    """Every interface of the card: per protocol version (1.0 first), JSON-RPC, HTTP+JSON and, when on, gRPC."""
    interfaces: list[AgentInterface] = []
    for version in protocols:
        interfaces.extend(http_interfaces(public_url, version))
        if grpc_url:
            # CONTRACT: gRPC as a bare host:port.
            interfaces.append(AgentInterface(url=grpc_url, protocol_binding=GRPC, protocol_version=version))
    return interfaces


def parse_protocols(protocols: str | Sequence[str]) -> tuple[str, ...]:
    """``"1.0,0.3"`` (or a sequence) as the served versions, 1.0 first; only 1.0 and 0.3 exist."""
    items = protocols.split(",") if isinstance(protocols, str) else list(protocols)
    wanted = [".".join(item.strip().split(".")[:2]) for item in items if item.strip()]
    unknown = sorted(set(wanted) - set(PROTOCOLS))
    if unknown or PROTOCOL_VERSION not in wanted:
        raise ValueError(
            f"protocol versions {', '.join(wanted) or '(none)'}: relaykit serves 1.0, optionally with 0.3 "
            "(e.g. --protocol 1.0,0.3)"
        )
    return tuple(v for v in PROTOCOLS if v in wanted)


def build_card(
    executor: AgentExecutor,
    card: AgentCard | None,
    *,
    public_url: str,
    grpc_url: str | None = None,
    streaming: bool = True,
    push: bool = False,
    extended: bool = False,
    auth: Auth | None = None,
    protocols: Sequence[str] = (PROTOCOL_VERSION,),
) -> AgentCard:
    """The served card: the given one (or one derived from the executor) with interfaces, capabilities and security
    filled in; a card that is already signed is served as it is (filling anything in would break its signatures)."""
    if card is None:
        card = getattr(executor, "card", None)
    if card is not None and card.signatures:
        declared, enforced = set(card.security_schemes), set(auth.security_schemes() if auth else {})
        if declared != enforced:
            raise ValueError(
                f"the signed card declares security schemes {sorted(declared)} but the server enforces "
                f"{sorted(enforced)}: sign the card the server builds instead (card_signing_key / --card-key)"
            )
        return card
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
    interfaces = served_interfaces(public_url, grpc_url, protocols)
    caps = card.capabilities
    capabilities = AgentCapabilities(
        streaming=streaming if caps.streaming is None else caps.streaming and streaming,
        push_notifications=push,
        extensions=caps.extensions,
        extended_agent_card=True if extended else caps.extended_agent_card,
    )
    update: dict[str, Any] = {"supported_interfaces": interfaces, "capabilities": capabilities}
    update.update(_security(card, auth))
    return card.model_copy(update=update)


def _security(card: AgentCard, auth: Auth | None) -> dict[str, Any]:
    """The card's securitySchemes / securityRequirements: what ``auth`` enforces, nothing it does not."""
    enforced = auth.security_schemes() if auth is not None else {}
    declared = set(card.security_schemes)
    for skill in card.skills:
        for requirement in skill.security_requirements:
            declared.update(requirement.schemes)
    unverified = sorted(declared - set(enforced))
    if unverified:
        raise ValueError(
            f"the agent card declares security scheme(s) {', '.join(unverified)} that no configured authenticator "
            "verifies: configure auth (relaykit.auth.Auth, --auth-jwks, --api-keys, --ssl-ca-certs) or remove them"
        )
    if auth is None:
        return {}
    return {"security_schemes": enforced, "security_requirements": auth.security_requirements()}


def assemble(
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
    auth: Auth | None = None,
    card_signing_key: Any = None,
    card_key_id: str | None = None,
    push_secrets_key: str | bytes | Sequence[str | bytes] | None = None,
    protocols: str | Sequence[str] = PROTOCOLS,
    telemetry: Telemetry | bool | None = None,
    metrics: bool = False,
    quotas: Quotas | None = None,
) -> A2AServer:
    """The ``A2AServer`` for ``executor``, not yet started: serve it with any binding, or none (a worker).

    >>> from relaykit import agent
    >>> from relaykit.assembly import assemble
    >>> @agent
    ... async def echo(context):
    ...     return context.text
    >>> server = assemble(echo, grpc_url="localhost:50051")
    >>> # grpc_server = relaykit.grpc.GrpcServer(server, port=50051)   # a gRPC-only agent

    The options are ``create_app``'s (see there), less the HTTP ones. ``public_url`` (default ``DEFAULT_PUBLIC_URL``)
    is the base of the card's JSON-RPC and HTTP+JSON interfaces and the push JWT issuer; ``grpc_url`` adds the
    GRPC interface. ``quotas``: per-principal limits (``relaykit.server._quotas.Quotas``; defaults when None), shared by
    the replicas in scale-out mode (``relaykit.backends.redis.RedisQuotas``). The
    default store is ``memory`` (``relaykit serve`` defaults to SQLite). ``protocols``: the A2A
    versions served, ``("1.0", "0.3")`` by default; ``"1.0"`` turns 0.3 off (its requests get VersionNotSupported).

    Observability (``relaykit.telemetry``): ``telemetry=None`` traces when an OpenTelemetry SDK is set up (by the
    host application, or ``relaykit.telemetry.configure_otel()``) and records metrics when a meter provider is;
    ``False`` turns it all off; a ``Telemetry`` is used as given. ``metrics=True`` records metrics and serves them
    as Prometheus text at ``GET /metrics`` on the HTTP app.

    ``auth`` (``relaykit.auth.Auth``): who may call, enforced on every binding and version; the card's security is
    generated from it. ``card_signing_key`` (PEM private key, bytes or a cryptography key) signs the served card
    (RFC 8785 + JWS, ``kid`` ``card_key_id`` or the key's JWK thumbprint); its public key joins
    ``/.well-known/jwks.json``. ``push_secrets_key`` (a Fernet key, or several: the first seals) encrypts push
    credentials in the store.
    """
    served_versions = parse_protocols(protocols)
    redis_url = bus if isinstance(bus, str) and bus != "memory" else None
    if redis_url is not None and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"unknown bus {bus!r}: use memory or redis://…")
    base_url = public_url if public_url is not None else DEFAULT_PUBLIC_URL
    if isinstance(store, str):
        task_store = open_store(store, namespace=namespace, shared=redis_url is not None)
    else:
        task_store = store
    # A framework's agent or graph (pydantic-ai, LangGraph, OpenAI Agents, ADK) gets its adapter, which keeps its
    # conversations with this store; an executor passes through unchanged.
    from relaykit.adapters._detect import as_executor

    executor = as_executor(executor, store=task_store)
    if executor.idempotency_window is not None:
        # The agent knows its callers (e.g. the conformance kit reuses messageIds): its own window wins.
        idempotency_window = executor.idempotency_window
    if push_store is None:
        push_store = open_push_store(store, task_store) if isinstance(store, str) else open_push_store("memory")
    if push_secrets_key is not None:
        push_store = SealedPushConfigStore(push_store, push_secrets_key)
    sender: PushSender | None = None
    signer: PushSigner | None = None
    if push:
        if push_signing_key is not None:
            signer = PushSigner(push_signing_key, key_ids=push_key_id, issuer=base_url)
        sender = PushSender(
            push_store,
            push_outbox
            if push_outbox is not None
            else open_outbox(task_store, lease=lease if redis_url is not None else None),
            policy=push_policy,
            events=push_events,
            allow=tuple(push_allow),
            signer=signer,
        )
        # Config writes go through the sender's cache, so the engine hook never reads the store per event.
        push_store = sender.configs
    event_bus: EventBus
    if redis_url is not None:
        from relaykit.backends.redis import RedisEventBus

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
        idempotency_window=idempotency_window,
        max_artifact_bytes=max_artifact_bytes,
        max_history_bytes=max_history_bytes,
    )
    if redis_url is not None:
        from relaykit.backends.redis import RedisWorkQueue
        from relaykit.server._cluster import Cluster

        cluster = Cluster(
            engine,
            RedisWorkQueue(
                redis_url,
                namespace=namespace,
                client=event_bus.client,  # type: ignore[attr-defined]
                hot=event_bus.hot,  # type: ignore[attr-defined]
            ),
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

    def serving_card(given: AgentCard | None, *, extended: bool) -> AgentCard:
        return build_card(
            executor,
            given,
            public_url=base_url,
            grpc_url=grpc_url,
            streaming=streaming,
            push=push,
            extended=extended,
            auth=auth,
            protocols=served_versions,
        )

    served = serving_card(card, extended=extended_card is not None)
    if isinstance(extended_card, AgentCard):
        # The extended card describes the same server: its interfaces (REQUIRED; a client switches to this card, and
        # the 0.3 rendering needs them for url / preferredTransport), capabilities and enforced security are the
        # served ones, whatever the given card says; its name, skills and the rest are its own.
        extended_card = serving_card(extended_card, extended=True)
    card_signer = (
        CardSigner(card_signing_key, kid=card_key_id, jku=base_url.rstrip("/") + JWKS_PATH)
        if card_signing_key is not None
        else None
    )
    if card_signer is not None:
        served = card_signer.sign(served)
        if isinstance(extended_card, AgentCard):
            # Signed like the public card: a client that checks signatures (a2a-sdk's signature_verifier does, on
            # every card it receives) checks the extended one too. A provider function's cards are its own.
            extended_card = card_signer.sign(extended_card)
    shared_quotas = None
    if redis_url is not None:
        from relaykit.backends.redis import RedisQuotas

        shared_quotas = RedisQuotas(event_bus.client, namespace=namespace, url=redis_url)  # type: ignore[attr-defined]
    handler = RequestHandler(
        engine,
        served,
        push_store=push_store,
        extended_card=extended_card,
        auth=auth,
        quotas=quotas,
        shared_quotas=shared_quotas,
    )
    if sender is not None:
        handler.push_url_check = sender.check_config
    server = A2AServer(engine, handler, grace=grace, retention=retention, retention_interrupted=retention_interrupted)
    server.access_log = access_log
    server.push_allow = push_allow
    server.push_sender = sender
    server.push_signer = signer
    server.public_url = public_url
    server.card_signer = card_signer
    server.protocols = served_versions
    if telemetry is None or telemetry is True:
        telemetry = telemetry_for(metrics=True if metrics else None)
    if isinstance(telemetry, Telemetry):
        instrument(server, telemetry)
    server.metrics_endpoint = metrics and server.telemetry is not None and server.telemetry.metrics is not None
    return server


def instrument(server: A2AServer, telemetry: Telemetry) -> None:
    """Plug ``telemetry`` into every part of ``server`` that reports (handler, engine, push), and its gauges."""
    server.telemetry = telemetry
    server.handler.telemetry = telemetry
    engine = server.engine
    engine.telemetry = telemetry
    if server.push_sender is not None:
        server.push_sender.telemetry = telemetry
    metrics = telemetry.metrics
    if metrics is None:
        return
    metrics.gauge("a2a.server.executions.active", lambda: engine.running_executions)
    metrics.gauge("a2a.server.stream.subscribers", lambda: telemetry.streams)
    sender = server.push_sender
    if sender is not None:
        metrics.gauge("a2a.push.outbox.backlog", lambda: sum(len(s.queue) for s in sender._streams.values()))
    cluster = engine.cluster
    if cluster is not None:
        queue = cluster.queue

        async def depth() -> float:
            return float((await queue.backlog())[0])

        async def lag() -> float:
            return float((await queue.backlog())[1])

        metrics.gauge("a2a.queue.depth", depth)
        metrics.gauge("a2a.queue.lag", lag)
