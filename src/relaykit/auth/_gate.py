"""``Auth``: the one place every binding asks "who is calling, and may they do this?".

A binding (JSON-RPC, HTTP+JSON, gRPC, the push status endpoint, any protocol version) turns its request into an
``AuthRequest`` (headers or metadata, the TLS peer certificate, a principal a host framework already established)
and calls ``Auth.authenticate`` before it decodes anything, then ``Auth.authorize`` with the decoded request before
the handler runs. Nothing else in relaykit decides identity.

Invariants:

* Authenticators are tried in order. One that finds no credential of its kind returns ``None``; one that finds a
  credential it cannot accept raises ``AuthenticationRequiredError`` at once (a bad token is never silently ignored
  in favour of a weaker scheme or of anonymity).
* With ``required=True`` (what any ``relaykit serve`` auth option means) a request no authenticator accepts is
  refused with ``AuthenticationRequiredError`` carrying the challenges (``WWW-Authenticate`` on HTTP,
  UNAUTHENTICATED on gRPC). Otherwise it proceeds as the anonymous principal.
* Interceptors see (operation, principal, request) for every operation on every binding; they raise
  ``PermissionDeniedError`` (403 / PERMISSION_DENIED) to refuse and may record what they like (audit).
* The card describes exactly what is enforced: ``security_schemes()`` and ``security_requirements()`` come from the
  authenticators (each requirement one alternative), plus an empty requirement (anonymous allowed) when not required.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from relaykit._card import SecurityRequirement, SecurityScheme, StringList
from relaykit._errors import AuthenticationRequiredError
from relaykit._principal import ANONYMOUS_PRINCIPAL, Principal

__all__ = ["Auth", "AuthRequest", "Authenticator", "CallInterceptor"]

log = logging.getLogger("relaykit.auth")


class AuthRequest:
    """What a binding knows about a request's credentials, transport-neutral.

    ``headers``: HTTP headers or gRPC metadata, looked up by lower-case name. ``peer_cert``: the TLS client
    certificate (DER), computed on first use. ``user``: a principal a host framework already authenticated (a
    Starlette authentication middleware's ``scope["user"]``), or None. ``binding``: ``JSONRPC``, ``HTTP+JSON``,
    ``GRPC`` or ``HTTP`` (relaykit's own endpoints).
    """

    __slots__ = ("_peer", "_peer_cert", "binding", "headers", "user")

    def __init__(
        self,
        headers: Mapping[str, str],
        *,
        binding: str,
        peer_cert: Callable[[], bytes | None] | bytes | None = None,
        user: Principal | None = None,
    ) -> None:
        self.headers = headers
        self.binding = binding
        self.user = user
        self._peer = peer_cert
        self._peer_cert: bytes | None = None

    @property
    def peer_cert(self) -> bytes | None:
        """The DER client certificate the TLS handshake verified, if any."""
        if callable(self._peer):
            self._peer_cert = self._peer()
            self._peer = self._peer_cert
        return self._peer if isinstance(self._peer, bytes) else None


@runtime_checkable
class Authenticator(Protocol):
    """One way to authenticate (a scheme of the card). Implement this to plug in your own.

    ``authenticate`` returns the caller's ``Principal``, ``None`` when the request carries no credential of this kind,
    or raises ``AuthenticationRequiredError`` for a credential it refuses. ``scheme_name`` and ``security_scheme``
    describe it in the card; ``challenge`` is its ``WWW-Authenticate`` value.
    """

    scheme_name: str

    @property
    def security_scheme(self) -> SecurityScheme:
        """The card's description of this scheme."""

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` challenge a 401 carries for this scheme."""

    async def authenticate(self, request: AuthRequest) -> Principal | None:
        """The caller, ``None`` (no credential of this kind), or raise ``AuthenticationRequiredError``."""

    async def start(self) -> None:
        """Called once before serving (fetch keys, check files); may raise to refuse to start."""

    async def close(self) -> None:
        """Called once on shutdown."""


CallInterceptor = Callable[[str, Principal, Any], Awaitable[None]]
"""``async def interceptor(operation, principal, request) -> None``: raise ``PermissionDeniedError`` to refuse."""


class Auth:
    """Authenticators, whether one is required, and the interceptors: the policy every binding enforces.

    >>> from relaykit.auth import Auth, APIKeyAuthenticator
    >>> auth = Auth(APIKeyAuthenticator({"alice": "s3cret"}))
    >>> [r.to_dict() for r in auth.security_requirements()]
    [{'schemes': {'apiKey': {}}}]
    """

    def __init__(
        self,
        *authenticators: Authenticator,
        required: bool = True,
        interceptors: Sequence[CallInterceptor] = (),
    ) -> None:
        names = [a.scheme_name for a in authenticators]
        if len(set(names)) != len(names):
            raise ValueError(f"two authenticators share a scheme name: {names}")
        self.authenticators = tuple(authenticators)
        self.required = required and bool(authenticators)
        self.interceptors = tuple(interceptors)

    def challenges(self) -> list[str]:
        """The ``WWW-Authenticate`` values of a 401, one per scheme."""
        return [a.challenge for a in self.authenticators if a.challenge]

    def unauthenticated(self, message: str) -> AuthenticationRequiredError:
        """The error a refused request gets, with the challenges."""
        error = AuthenticationRequiredError(message)
        error.challenges = tuple(self.challenges())
        return error

    async def authenticate(self, request: AuthRequest) -> Principal:
        """The caller's principal, or raise ``AuthenticationRequiredError`` (see the module docstring)."""
        for authenticator in self.authenticators:
            try:
                principal = await authenticator.authenticate(request)
            except AuthenticationRequiredError as exc:
                log.info("refused %s credential on %s: %s", authenticator.scheme_name, request.binding, exc.message)
                raise self.unauthenticated(exc.message) from None
            if principal is not None:
                return principal
        if request.user is not None:
            return request.user
        if self.required:
            log.info("refused a request without credentials on %s", request.binding)
            raise self.unauthenticated("authentication required: " + self._hint())
        return ANONYMOUS_PRINCIPAL

    def _hint(self) -> str:
        # An authenticator may say how to authenticate (``hint``); its scheme name otherwise.
        return " or ".join(str(getattr(a, "hint", a.scheme_name)) for a in self.authenticators)

    async def authorize(self, operation: str, principal: Principal, request: Any) -> None:
        """Run the interceptors; one raising ``PermissionDeniedError`` refuses the operation."""
        for interceptor in self.interceptors:
            await interceptor(operation, principal, request)

    def security_schemes(self) -> dict[str, SecurityScheme]:
        """The card's ``securitySchemes``: one per authenticator."""
        return {a.scheme_name: a.security_scheme for a in self.authenticators}

    def security_requirements(self) -> list[SecurityRequirement]:
        """The card's ``securityRequirements``: each scheme alone is enough; ``{}`` too when anonymous is allowed."""
        out = [SecurityRequirement(schemes={a.scheme_name: StringList()}) for a in self.authenticators]
        if self.authenticators and not self.required:
            out.append(SecurityRequirement())
        return out

    async def start(self) -> None:
        """Start every authenticator (a JWKS that cannot be fetched refuses the start)."""
        for authenticator in self.authenticators:
            await authenticator.start()

    async def close(self) -> None:
        """Close every authenticator."""
        for authenticator in self.authenticators:
            await authenticator.close()
