"""Fixtures for the auth tests: an identity provider served by the test, tokens minted by it, and relaykit agents
served for real (uvicorn and gRPC on 127.0.0.1 in the test's loop) with the auth under test.

``idp``: a JWKS at ``/jwks.json`` and an OpenID Connect discovery document, over HTTP in a thread (the agent's
lifespan fetches the keys while the test's loop may be busy starting it). Its keys can be rotated by the test.
``agent``: ``await agent(executor, auth=…, **create_app options)`` → ``Served`` with the base URL, the gRPC address and
``client(binding, *interceptors)`` for relaykit's own client on that binding.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from support.credential_watch import credential_watch, pytest_sessionfinish  # noqa: F401  (no credential in any log)
from support.servers import free_port

from relaykit.client import Client
from relaykit.grpc import GrpcServer
from relaykit.http import create_app

HOST = "127.0.0.1"
AUDIENCE = "relaykit-tests"
BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
T = 20.0


def pem(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_pem(key: Any) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def jwk_of(key: Any, kid: str) -> dict[str, Any]:
    public = key.public_key()
    algo = jwt.algorithms.RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else jwt.algorithms.ECAlgorithm
    jwk: dict[str, Any] = algo.to_jwk(public, as_dict=True)
    jwk.update({"kid": kid, "use": "sig"})
    return jwk


class IdentityProvider:
    """A JWKS and discovery document on 127.0.0.1, and tokens signed with its keys."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.keys: dict[str, Any] = {"rsa-1": self.rsa, "ec-1": self.ec}
        self.jwks_fetches = 0
        self.down = False  # the JWKS answers 404 (counted all the same)
        self.discovered_issuer: str | None = None  # what discovery names as issuer, when not its own URL
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/jwks.json":
                    provider.jwks_fetches += 1
                    if provider.down:
                        self.send_response(404)
                        self.end_headers()
                        return
                    body = json.dumps({"keys": [jwk_of(k, kid) for kid, k in provider.keys.items()]}).encode()
                elif self.path == "/.well-known/openid-configuration":
                    issuer = provider.discovered_issuer or provider.issuer
                    body = json.dumps({"issuer": issuer, "jwks_uri": provider.jwks_url}).encode()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        self.issuer = self.url
        self.jwks_url = self.url + "/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def token(
        self,
        sub: str = "alice",
        *,
        kid: str = "rsa-1",
        alg: str | None = None,
        key: Any = None,
        lifetime: float = 300,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {"iss": self.issuer, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + lifetime}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        signing = key if key is not None else self.keys[kid]
        algorithm = alg or ("ES256" if isinstance(signing, ec.EllipticCurvePrivateKey) else "RS256")
        return jwt.encode(payload, signing, algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider()
    try:
        yield provider
    finally:
        provider.close()


@dataclass
class Served:
    """A relaykit agent served for real: HTTP at ``url``, gRPC at ``grpc``."""

    url: str
    grpc: str
    app: Any
    clients: list[Client] = field(default_factory=list)

    async def client(self, binding: str, *interceptors: Any, **options: Any) -> Client:
        client = Client(self.url, transports=[binding], interceptors=list(interceptors), timeout=T, **options)
        self.clients.append(client)
        await client.connect()
        return client


def _listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    # Listening before uvicorn starts: a client that connects early waits in the backlog instead of being refused.
    sock.listen(128)
    return sock


@pytest.fixture
async def agent() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    stack = AsyncExitStack()
    served: list[Served] = []

    async def start(
        executor: Any,
        *,
        uvicorn_options: dict[str, Any] | None = None,
        grpc_credentials: Any = None,
        scheme: str = "http",
        **options: Any,
    ) -> Served:
        sock = _listening()
        port = sock.getsockname()[1]
        grpc_port = free_port()
        url = f"{scheme}://{HOST}:{port}"
        options.setdefault("store", "memory")
        options.setdefault("grace", 0.5)
        options.setdefault("push_allow", ("127.0.0.1",))
        app = create_app(executor, public_url=url, grpc_url=f"{HOST}:{grpc_port}", **options)
        await app.state.relaykit.start()
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, ws="none", **(uvicorn_options or {})
        )
        if (uvicorn_options or {}).get("ssl_ca_certs"):
            from relaykit.cli._security import with_client_certs

            with_client_certs(config)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        grpc_server = GrpcServer(app, host=HOST, port=grpc_port, credentials=grpc_credentials)
        await grpc_server.start()

        async def stop() -> None:
            for client in result.clients:
                await client.aclose()
            await grpc_server.stop(0.2)
            server.should_exit = True
            await asyncio.wait_for(task, 10)
            await app.state.relaykit.stop()
            sock.close()

        result = Served(url, f"{HOST}:{grpc_port}", app)
        stack.push_async_callback(stop)
        served.append(result)
        return result

    try:
        yield start
    finally:
        await stack.aclose()
