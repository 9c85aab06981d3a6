"""Per-request header hooks (interceptors): auth schemes and W3C trace context.

An interceptor is any object with ``async def headers(self, operation: str) -> Mapping[str, str]``; the client
merges what every interceptor returns into each request, in order.

>>> from relaykit.client import BearerAuth
>>> auth = BearerAuth("token-123")
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

import httpx

from relaykit._errors import AuthenticationRequiredError
from relaykit.client._plaintext import exposed, refusal
from relaykit.client._urls import redact_url

__all__ = ["APIKeyAuth", "BearerAuth", "Interceptor", "OAuth2ClientCredentials", "TraceContext"]


@runtime_checkable
class Interceptor(Protocol):
    """Adds headers to every request the client sends."""

    async def headers(self, operation: str) -> Mapping[str, str]:
        """Headers for one request of ``operation`` (e.g. ``"SendMessage"``)."""


class BearerAuth:
    """``Authorization: Bearer <token>``; ``token`` may be a string or an async callable returning one."""

    def __init__(self, token: str | Callable[[], Awaitable[str]]) -> None:
        self.token = token

    async def headers(self, operation: str) -> Mapping[str, str]:
        token = self.token if isinstance(self.token, str) else await self.token()
        return {"Authorization": f"Bearer {token}"}


class APIKeyAuth:
    """An API key in a header (``X-API-Key`` by default)."""

    def __init__(self, key: str, *, header: str = "X-API-Key") -> None:
        self.key = key
        self.header = header

    async def headers(self, operation: str) -> Mapping[str, str]:
        return {self.header: self.key}


# The most a token endpoint's answer may hold: a token response is a few KiB at most.
_MAX_TOKEN_RESPONSE = 64 * 1024


class OAuth2ClientCredentials:
    """OAuth 2.0 client-credentials token provider (RFC 6749 §4.4): fetches, caches and refreshes a bearer token.

    The client secret goes to ``token_url`` as Basic auth, so, as RFC 6749 §3.2 requires, only over TLS, or to a
    loopback host (development); ``allow_insecure=True`` lifts that, as ``Client(allow_insecure_credentials=True)``
    does for the agent's URL. Every failure to get a token is an ``AuthenticationRequiredError`` whose message names
    the endpoint with its userinfo and query values masked, never the secret.

    >>> auth = OAuth2ClientCredentials("https://idp.example/token", "my-client", "s3cret", scopes=("a2a",))
    >>> # Client(url, interceptors=[auth])
    """

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        *,
        scopes: tuple[str, ...] = (),
        http: httpx.AsyncClient | None = None,
        leeway: float = 30.0,
        allow_insecure: bool = False,
    ) -> None:
        if not allow_insecure and exposed(token_url, token_url[:8].lower() == "https://"):
            raise refusal(token_url, "the OAuth client secret")
        self.token_url = token_url
        self.client_id = client_id
        self.client_secret = client_secret
        self.scopes = scopes
        self.http = http
        self.leeway = leeway
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        """A valid access token, fetched when missing or about to expire."""
        async with self._lock:
            if self._token is not None and time.monotonic() < self._expires - self.leeway:
                return self._token
            form = {"grant_type": "client_credentials"}
            if self.scopes:
                form["scope"] = " ".join(self.scopes)
            where = f"token endpoint {redact_url(self.token_url)}"
            http = self.http or httpx.AsyncClient(timeout=30.0)
            try:
                auth = (self.client_id, self.client_secret)
                async with http.stream("POST", self.token_url, data=form, auth=auth) as response:
                    content = b""
                    async for piece in response.aiter_bytes():
                        content += piece
                        if len(content) > _MAX_TOKEN_RESPONSE:
                            raise AuthenticationRequiredError(f"{where} answered more than {_MAX_TOKEN_RESPONSE} bytes")
            except httpx.HTTPError as exc:
                # httpx's text names no credential, but may name the URL: only its class is shown.
                raise AuthenticationRequiredError(f"{where} unreachable ({type(exc).__name__})") from None
            finally:
                if self.http is None:
                    await http.aclose()
            if response.status_code != 200:
                raise AuthenticationRequiredError(
                    f"{where} refused the client credentials (HTTP {response.status_code})"
                )
            try:
                body = json.loads(content)
                token = body["access_token"]
                lifetime = float(body.get("expires_in", 3600))
            except (ValueError, TypeError, KeyError, AttributeError):
                raise AuthenticationRequiredError(f"{where} answered no usable access token") from None
            if not isinstance(token, str) or not token:
                raise AuthenticationRequiredError(f"{where} answered no usable access token")
            self._token = token
            self._expires = time.monotonic() + lifetime
            return self._token

    async def headers(self, operation: str) -> Mapping[str, str]:
        return {"Authorization": f"Bearer {await self.token()}"}


class TraceContext:
    """Propagates W3C trace context: the current OpenTelemetry span when installed, else a fixed ``traceparent``."""

    def __init__(self, traceparent: str | None = None) -> None:
        self.traceparent = traceparent

    async def headers(self, operation: str) -> Mapping[str, str]:
        carrier: dict[str, str] = {}
        try:
            from opentelemetry import propagate

            propagate.inject(carrier)
        except ImportError:
            pass
        if "traceparent" not in carrier and self.traceparent:
            carrier["traceparent"] = self.traceparent
        return carrier
