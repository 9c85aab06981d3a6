"""``GrpcServer``: a ``grpc.aio`` server for one agent, with A2AService (``_binding``), health and reflection.

It owns the process-level side of gRPC: the listening port and its TLS (``server_credentials``), the hostile-load
bounds (``GRPC_LIMITS``), the telemetry interceptor, and starting the shared engine on the first call or on
``start()``. Which services it serves: A2A 1.0 always, A2A 0.3's when the assembly speaks 0.3 (or when asked).
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as _reflection_pb2

from relaykit._grpc_gen import a2a_v0_3_pb2 as v03_pb
from relaykit._proto import POOL, SERVICE_NAME
from relaykit._v03 import _grpc as v03
from relaykit.grpc._binding import GrpcBinding
from relaykit.server._handler import RequestHandler

__all__ = ["GRPC_LIMITS", "GrpcServer", "server_credentials"]

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


def server_credentials(certfile: str, keyfile: str, ca_certs: str | None = None) -> grpc.ServerCredentials:
    """TLS for the gRPC port from PEM files; with ``ca_certs`` clients must present a certificate signed by it."""
    with open(keyfile, "rb") as key, open(certfile, "rb") as cert:
        pair = (key.read(), cert.read())
    roots = None
    if ca_certs is not None:
        with open(ca_certs, "rb") as ca:
            roots = ca.read()
    return grpc.ssl_server_credentials([pair], root_certificates=roots, require_client_auth=roots is not None)


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
        address = f"{self.host}:{self.port}"
        try:
            if self.credentials is not None:
                bound = server.add_secure_port(address, self.credentials)
            else:
                bound = server.add_insecure_port(address)
        except RuntimeError:  # grpcio >= 1.60 raises where older versions returned 0; one error type either way
            bound = 0
        if not bound:
            raise OSError(f"cannot serve gRPC on {address}: the port is in use, or the host is not this machine's")
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
