"""The gRPC binding: service ``lf.a2a.v1.A2AService`` on ``grpc.aio``, generated from the operation table.

Every rpc decodes its request (protobuf ⇒ the pydantic model, validated exactly as the JSON bindings validate), calls
the ``RequestHandler`` method the operation names, and encodes the result. Wire conventions:

* **Metadata in**: ``a2a-version`` (required: missing or empty means 0.3, and anything but 1.x is
  ``VersionNotSupportedError``, as on HTTP), ``a2a-extensions`` (comma-separated URIs; ``x-a2a-extensions`` too),
  ``last-event-id`` (SubscribeToTask: resume after that event id, as SSE ``Last-Event-ID``).
* **Metadata out**: streams send initial metadata ``a2a-first-event-id: N`` with the first message. The events of one
  stream are consecutive numbers of the task's event sequence (the same ids SSE carries), so message *k* (from 0) has
  id ``N + k``; the trailing metadata carries ``a2a-last-event-id`` (the id of the last message sent). Activated
  extensions are echoed as ``a2a-extensions`` in the initial metadata.
* **Errors**: the status code of the error table (digest §6.1/6.2) and a ``google.rpc.Status`` in the
  ``grpc-status-details-bin`` trailer with an ``ErrorInfo`` (domain ``a2a-protocol.org``) and, for validation failures,
  a ``BadRequest`` with one field violation per bad field. An error before a stream's first message ends the call
  with no message; a later one ends it after the messages already sent.
* A client that cancels a stream releases only its own subscription; the task runs on.
* A2A 0.3: ``GrpcServer`` also serves 0.3's ``a2a.v1.A2AService`` when the assembly speaks 0.3; its rpcs are the
  same closures over the same handler, given the 0.3 codec's decode/encode (``relaykit._v03._grpc``).
* **Auth**: every call, of either version, is authenticated by the server's one ``relaykit.auth.Auth`` (metadata
  such as ``authorization`` / ``x-api-key``, and the client certificate of a mutual-TLS channel) before its request
  is decoded; a refusal is UNAUTHENTICATED (PERMISSION_DENIED from an interceptor), with the usual status details
  and, for UNAUTHENTICATED, the HTTP ``WWW-Authenticate`` challenges as ``www-authenticate`` trailing metadata.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
from google.protobuf import any_pb2, json_format
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as _reflection_pb2
from grpc_status import rpc_status
from pydantic import ValidationError

from relaykit._errors import (
    BAD_REQUEST_TYPE,
    ERROR_INFO_TYPE,
    GRPC_CODES,
    A2AError,
    AuthenticationRequiredError,
    InternalError,
    InvalidParamsError,
    VersionNotSupportedError,
    invalid_params,
)
from relaykit._grpc_gen import a2a_v0_3_pb2 as v03_pb
from relaykit._input import parse_event_id
from relaykit._methods import OPERATIONS, Operation
from relaykit._model import Encoded
from relaykit._proto import (
    FIRST_EVENT_ID,
    LAST_EVENT_ID,
    POOL,
    RESUME_FROM,
    SERVICE_NAME,
    decoder,
    encode_event,
    encoder,
)
from relaykit._types import SendMessageResponse
from relaykit._v03 import _grpc as v03
from relaykit.auth._gate import AuthRequest
from relaykit.server._context import CallContext
from relaykit.server._handler import RequestHandler

__all__ = ["GrpcBinding", "GrpcServer", "error_status", "peer_certificate"]

log = logging.getLogger("relaykit.grpc")

SUPPORTED_VERSIONS = ("1.0",)


def _pack(detail: dict[str, Any]) -> any_pb2.Any | None:
    kind = detail.get("@type")
    packed = any_pb2.Any()
    if kind == ERROR_INFO_TYPE:
        info = error_details_pb2.ErrorInfo(
            reason=str(detail.get("reason", "")),
            domain=str(detail.get("domain", "")),
            metadata={str(k): str(v) for k, v in (detail.get("metadata") or {}).items()},
        )
        packed.Pack(info)
        return packed
    if kind == BAD_REQUEST_TYPE:
        violations = [
            error_details_pb2.BadRequest.FieldViolation(
                field=str(v.get("field", "")), description=str(v.get("description", ""))
            )
            for v in detail.get("fieldViolations") or []
            if isinstance(v, dict)
        ]
        packed.Pack(error_details_pb2.BadRequest(field_violations=violations))
        return packed
    try:
        json_format.ParseDict(detail, packed)
    except (json_format.ParseError, TypeError, KeyError):
        return None  # a detail type this process does not know: leave it out rather than fail the error
    return packed


def error_status(exc: A2AError) -> grpc.Status:
    """The gRPC status of an error: its code, its message, and the details in ``grpc-status-details-bin``.

    UNAUTHENTICATED also carries the challenges (``www-authenticate``, one entry per scheme) as trailing metadata:
    gRPC has no ``WWW-Authenticate`` header, and without them a client cannot tell which credential is expected.
    """
    details = [d for d in (_pack(item) for item in exc.to_details()) if d is not None]
    status = status_pb2.Status(code=GRPC_CODES.get(exc.grpc_status, 13), message=exc.message, details=details)
    result = rpc_status.to_status(status)
    if isinstance(exc, AuthenticationRequiredError):
        challenges = tuple(("www-authenticate", c) for c in exc.www_authenticate())
        result = result._replace(trailing_metadata=(*result.trailing_metadata, *challenges))
    return result


def _check_version(value: str | None) -> None:
    text = (value or "").strip()
    if not text:
        raise VersionNotSupportedError(
            "missing a2a-version metadata: this server speaks A2A 1.0 only (send a2a-version: 1.0)",
            requested="0.3",
            supported="1.0",
        )
    if ".".join(text.split(".")[:2]) not in SUPPORTED_VERSIONS:
        raise VersionNotSupportedError(
            f"A2A version {text} is not supported; this server speaks 1.0", requested=text, supported="1.0"
        )


def _check_version_v03(value: str | None) -> None:
    # The 0.3 service: no version (0.3 clients send none) or 0.x.
    text = (value or "").strip()
    if text and text.split(".", 1)[0] != "0":
        raise VersionNotSupportedError(
            f"A2A version {text} on the A2A 0.3 service {v03.SERVICE_NAME}: use {SERVICE_NAME} for 1.0",
            requested=text,
            supported="0.3",
        )


# Hostile-load bounds on by default (issue 14; docs/limits.md), as the HTTP server's: request metadata (headers) at
# most 16 KiB, at most 100 concurrent streams per connection, client pings no more often than every 10 s (a client
# that keeps pinging faster is disconnected after 2 strikes; none without a call in flight), idle connections closed
# after 5 minutes.
GRPC_LIMITS: tuple[tuple[str, int], ...] = (
    ("grpc.max_metadata_size", 16 * 1024),
    ("grpc.max_concurrent_streams", 100),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 2),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_connection_idle_ms", 5 * 60_000),
)


def _metadata(context: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str) and key not in out:
            out[key] = value
    return out


def peer_certificate(context: Any) -> bytes | None:
    """The DER client certificate a mutual-TLS channel verified, if any."""
    auth_context = context.auth_context() or {}
    pem = auth_context.get("x509_pem_cert")
    if not pem:
        return None
    return ssl.PEM_cert_to_DER_cert(pem[0].decode("ascii"))


def _resume_point(metadata: Mapping[str, str]) -> int | None:
    return parse_event_id(metadata.get(RESUME_FROM, ""), "last-event-id")


def _extension_metadata(call: CallContext) -> tuple[tuple[str, str], ...]:
    if not call.activated_extensions:
        return ()
    return (("a2a-extensions", ", ".join(sorted(call.activated_extensions))),)


def server_credentials(certfile: str, keyfile: str, ca_certs: str | None = None) -> grpc.ServerCredentials:
    """TLS for the gRPC port from PEM files; with ``ca_certs`` clients must present a certificate signed by it."""
    with open(keyfile, "rb") as key, open(certfile, "rb") as cert:
        pair = (key.read(), cert.read())
    roots = None
    if ca_certs is not None:
        with open(ca_certs, "rb") as ca:
            roots = ca.read()
    return grpc.ssl_server_credentials([pair], root_certificates=roots, require_client_auth=roots is not None)


class GrpcBinding:
    """The A2AService rpcs over a ``RequestHandler``, as one ``grpc.GenericRpcHandler``.

    >>> # server = grpc.aio.server(); server.add_generic_rpc_handlers((GrpcBinding(handler).generic_handler(),))
    """

    def __init__(
        self,
        handler: RequestHandler,
        *,
        ensure_started: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.handler = handler
        self.ensure_started = ensure_started

    def generic_handler(self) -> grpc.GenericRpcHandler:
        """Method handlers for every operation (``/lf.a2a.v1.A2AService/<Operation>``), bytes in and out."""
        methods: dict[str, grpc.RpcMethodHandler] = {}
        for op in OPERATIONS:
            if op.streaming:
                methods[op.grpc_name] = grpc.unary_stream_rpc_method_handler(self._streaming(op))
            else:
                methods[op.grpc_name] = grpc.unary_unary_rpc_method_handler(self._unary(op))
        return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)

    def v03_handler(self) -> grpc.GenericRpcHandler:
        """The A2A 0.3 service ``a2a.v1.A2AService``: the same rpcs over the same handler, through the 0.3 codec."""
        methods: dict[str, grpc.RpcMethodHandler] = {}
        for rpc in v03.RPCS:
            op = rpc.op
            if op.streaming:
                handler = self._streaming(op, rpc.decoder(), v03.event_bytes, _check_version_v03)
                methods[rpc.name] = grpc.unary_stream_rpc_method_handler(handler)
            else:
                unary = self._unary(op, rpc.decoder(), rpc.encoder(), _check_version_v03)
                methods[rpc.name] = grpc.unary_unary_rpc_method_handler(unary)
        return grpc.method_handlers_generic_handler(v03.SERVICE_NAME, methods)

    async def _prepare(
        self,
        op: Operation,
        data: bytes,
        context: Any,
        decode: Callable[[bytes], Any],
        check_version: Callable[[str | None], None] = _check_version,
    ) -> tuple[Any, CallContext, dict[str, str]]:
        if self.ensure_started is not None:
            await self.ensure_started()
        metadata = _metadata(context)
        auth = self.handler.auth
        principal = await auth.authenticate(
            AuthRequest(metadata, binding="GRPC", peer_cert=lambda: peer_certificate(context))
        )
        check_version(metadata.get("a2a-version"))
        try:
            request = decode(data)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        except (DecodeError, ValueError) as exc:  # ValueError: e.g. a NaN in a Struct (relaykit._proto)
            raise InvalidParamsError(
                f"the {op.name} request is not a valid {op.request.__name__} message: {exc}"
            ) from None
        if auth.interceptors:
            await auth.authorize(op.name, principal, request)
        raw = metadata.get("a2a-extensions") or metadata.get("x-a2a-extensions") or ""
        requested = frozenset(part.strip() for part in raw.split(",") if part.strip())
        call = CallContext(
            user=principal.id,
            tenant=getattr(request, "tenant", ""),
            requested_extensions=requested,
            headers=metadata,
            principal=principal,
        )
        self.handler.negotiate_extensions(call)
        return request, call, metadata

    def _unary(
        self,
        op: Operation,
        decode: Callable[[bytes], Any] | None = None,
        encode: Callable[[Any], bytes] | None = None,
        check_version: Callable[[str | None], None] | None = None,
    ) -> Callable[[bytes, Any], Awaitable[bytes]]:
        # Defaults: the 1.0 service; the 0.3 service (v03_handler) passes its codec's functions and version rule.
        legacy = check_version is not None
        if decode is None:
            decode = decoder(op.request)
        if encode is None and not legacy and op.response is not None:
            encode = encoder(op.response)
        version_rule = check_version or _check_version
        handler_name = op.handler

        async def rpc(data: bytes, context: Any) -> bytes:
            try:
                request, call, _ = await self._prepare(op, data, context, decode, version_rule)
                if legacy and handler_name == "get_extended_card" and not self.handler.extended:
                    result: Any = self.handler.card  # 0.3 GetAgentCard: the public card when there is no other
                else:
                    result = await self.handler.dispatch(handler_name, request, call)
                if call.activated_extensions:
                    await context.send_initial_metadata(_extension_metadata(call))
                if encode is None:
                    return b""  # google.protobuf.Empty
                if isinstance(result, Encoded) and not legacy:
                    result = SendMessageResponse.model_validate_json(result.data)
                return encode(result)
            except A2AError as exc:
                error = exc
            except Exception:
                log.exception("gRPC %s failed", op.name)
                error = InternalError()
            await context.abort_with_status(error_status(error))
            raise AssertionError("abort_with_status returned")  # pragma: no cover

        return rpc

    def _streaming(
        self,
        op: Operation,
        decode: Callable[[bytes], Any] | None = None,
        encode_data: Callable[[bytes], bytes] | None = None,
        check_version: Callable[[str | None], None] = _check_version,
    ) -> Callable[[bytes, Any], AsyncIterator[bytes]]:
        if decode is None:
            decode = decoder(op.request)
        subscribe = op.name == "SubscribeToTask"
        handler_name = op.handler

        def encode(item: tuple[int, Any, bytes]) -> bytes:
            # 1.0: from the event object (compiled plans); 0.3: from the event's 1.0 JSON, through the codec.
            return encode_event(item[1]) if encode_data is None else encode_data(item[2])

        async def rpc(data: bytes, context: Any) -> AsyncIterator[bytes]:
            items: Any = None
            error: A2AError | None = None
            first: tuple[int, Any, bytes] | None = None
            call: CallContext | None = None
            try:
                request, call, metadata = await self._prepare(op, data, context, decode, check_version)
                if subscribe:
                    items = await self.handler.subscribe_to_task(request, call, _resume_point(metadata))
                else:
                    items = await self.handler.dispatch(handler_name, request, call)
                # Pull the first event before answering: an error up to here ends the call with no message.
                first = await anext(items)
            except StopAsyncIteration:
                first = None
            except A2AError as exc:
                error = exc
            except Exception:
                log.exception("gRPC %s failed", op.name)
                error = InternalError()
            if error is not None or first is None or call is None:
                await _close(items)
                if error is not None:
                    await context.abort_with_status(error_status(error))
                return
            last = first[0]
            try:
                await context.send_initial_metadata(((FIRST_EVENT_ID, str(last)), *_extension_metadata(call)))
                yield encode(first)
                async for item in items:
                    yield encode(item)
                    last = item[0]
            except A2AError as exc:
                error = exc
            except Exception:
                log.exception("gRPC %s stream failed", op.name)
                error = InternalError()
            finally:
                await _close(items)
            trailer = ((LAST_EVENT_ID, str(last)),)
            if error is None:
                context.set_trailing_metadata(trailer)
                return
            # abort() replaces the trailing metadata: send the event id together with the status details.
            status = error_status(error)
            await context.abort(status.code, status.details, (*status.trailing_metadata, *trailer))

        return rpc


async def _close(items: Any) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


def _add_file(file: Any) -> None:
    """Put a default-pool file (and what it imports) into relaykit's private pool, for reflection."""
    try:
        POOL.FindFileByName(file.name)
        return
    except KeyError:
        pass
    for dependency in file.dependencies:
        _add_file(dependency)
    POOL.AddSerializedFile(file.serialized_pb)


class GrpcServer:
    """A ``grpc.aio`` server for one agent: A2AService, plus health checking and server reflection.

    ``target`` is an ``A2AServer`` (``relaykit.assembly.assemble(...)``, or ``app.state.relaykit`` of a
    ``create_app`` app), such an app itself, or a bare ``RequestHandler``. ``start()`` starts the engine too
    (idempotent), so gRPC and HTTP share one engine and store, and the same ``auth`` (the target's handler's).
    ``credentials`` (``server_credentials(cert, key, ca)``) serves TLS, with client certificates when ``ca`` is given.

    >>> # grpc_server = GrpcServer(app, host="127.0.0.1", port=50051)
    >>> # await grpc_server.start(); ...; await grpc_server.stop(grace=5)
    """

    def __init__(
        self,
        target: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        credentials: grpc.ServerCredentials | None = None,
        max_message: int = 10 * 1024 * 1024,
        reflection: bool = True,
        health: bool = True,
        options: tuple[tuple[str, Any], ...] = (),
        v03: bool | None = None,
    ) -> None:
        state = getattr(getattr(target, "state", None), "relaykit", None)
        a2a_server = state if state is not None else target
        if isinstance(a2a_server, RequestHandler):
            self.a2a_server: Any = None
            handler = a2a_server
        else:
            self.a2a_server = a2a_server
            handler = a2a_server.handler
        self.handler = handler
        # A2A 0.3's service too (a2a.v1.A2AService), when the assembly serves 0.3 (its default) or when asked.
        self.v03 = v03 if v03 is not None else "0.3" in getattr(self.a2a_server, "protocols", ())
        self.host = host
        self.port = port
        self.credentials = credentials
        self.binding = GrpcBinding(
            handler,
            ensure_started=self._ensure_started if self.a2a_server is not None else None,
        )
        self._options = (
            ("grpc.max_receive_message_length", max_message),
            ("grpc.max_send_message_length", max_message),
            ("grpc.so_reuseport", 0),
            *GRPC_LIMITS,
            *options,  # given options come last: gRPC keeps the last value of a repeated key
        )
        self._reflection = reflection
        self._health_enabled = health
        self.health: Any = None
        self.server: Any = None

    async def _ensure_started(self) -> None:
        if not self.a2a_server.started:
            await self.a2a_server.start()

    @property
    def address(self) -> str:
        """``host:port`` the server listens on (the port the OS chose when 0 was asked)."""
        return f"{self.host}:{self.port}"

    async def start(self) -> int:
        """Start the engine (when given an A2AServer), bind and start serving; returns the bound port."""
        if self.a2a_server is not None:
            await self._ensure_started()
        interceptors: list[Any] = []
        telemetry = getattr(self.a2a_server, "telemetry", None)
        if telemetry is not None:
            from relaykit.telemetry._grpc import TelemetryInterceptor

            interceptors.append(TelemetryInterceptor(telemetry))
        server = grpc.aio.server(options=self._options, interceptors=interceptors or None)
        handlers = [self.binding.generic_handler()]
        services = [SERVICE_NAME]
        if self.v03:
            handlers.append(self.binding.v03_handler())
            services.append(v03.SERVICE_NAME)
        server.add_generic_rpc_handlers(tuple(handlers))
        if self._health_enabled:
            self.health = health.aio.HealthServicer()
            from grpc_health.v1 import health_pb2_grpc

            health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
            await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
            for name in services:
                await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
            services.append(health.SERVICE_NAME)
        if self._reflection:
            # The reflection service answers from relaykit's private pool, which holds lf.a2a.v1; add the health and
            # reflection files to it so every listed service resolves.
            if self.v03:
                _add_file(v03_pb.DESCRIPTOR)
            _add_file(health_pb2.DESCRIPTOR)
            _add_file(_reflection_pb2.DESCRIPTOR)
            services.append(reflection.SERVICE_NAME)
            reflection.enable_server_reflection(services, server, pool=POOL)
        if self.credentials is not None:
            bound = server.add_secure_port(f"{self.host}:{self.port}", self.credentials)
        else:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if not bound:
            raise OSError(f"cannot listen for gRPC on {self.host}:{self.port}")
        self.port = int(bound)
        await server.start()
        self.server = server
        return self.port

    async def drain(self) -> None:
        """Report NOT_SERVING to health checks (load balancers stop routing here); calls are still served."""
        if self.health is not None:
            await self.health.enter_graceful_shutdown()

    async def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting calls, let the ones in flight finish for ``grace`` seconds, then cancel them."""
        server, self.server = self.server, None
        if server is None:
            return
        await self.drain()
        await server.stop(grace)

    async def wait_for_termination(self) -> None:
        """Block until the server stops."""
        if self.server is not None:
            await self.server.wait_for_termination()
