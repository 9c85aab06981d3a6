"""``JWTAuthenticator``: ``Authorization: Bearer <JWT>`` verified against a JWKS, or found by OpenID Connect discovery.

Invariants:

* Algorithms are pinned to asymmetric ones (RS*, PS*, ES*, EdDSA). ``none`` and HMAC (HS*) are refused at
  construction and in every token header, so a token "signed" with the public key as an HMAC secret never verifies.
* The key is the JWKS entry named by the token's ``kid``; its type must fit the header's ``alg`` (PyJWK refuses an EC
  key for RS256), and a key that declares its own ``alg`` must declare the header's. A token without ``kid`` is
  accepted only when the JWKS holds exactly one key.
* ``exp`` is required and checked, ``nbf`` checked when present, ``iss`` / ``aud`` when configured (``leeway``
  seconds of clock skew). ``sub`` is required: the principal is ``jwt:<iss>#<sub>``.
* Keys: fetched at start, refetched after ``cache_ttl`` seconds (rotation) and on an unknown ``kid`` — at most one
  attempt per ``min_refresh`` seconds, failed attempts included, so a stream of forged kids cannot make the server
  hammer the key server, even one that is down. A token signed by a known key never waits for another request's
  refetch of stale keys: it goes on with the keys held, so a key server that hangs holds up only that one. At most
  ``max_keys`` keys are kept.
* OpenID Connect discovery: the document's ``issuer`` must be the URL discovery was asked at (OpenID Connect
  Discovery 1.0 §4.3), or a provider could name another issuer and have its tokens accepted as that issuer's.
* Verified tokens are remembered (bounded, at most ``token_cache_ttl`` seconds and never past their ``exp``), so a
  client that sends the same token on every call pays for one signature check, not one per call.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from typing import Any

import httpx

from relaykit._card import HTTPAuthSecurityScheme, OpenIdConnectSecurityScheme, SecurityScheme
from relaykit._errors import AuthenticationRequiredError
from relaykit._principal import Principal
from relaykit.auth._gate import AuthRequest

__all__ = ["ASYMMETRIC_ALGORITHMS", "JWTAuthenticator"]

log = logging.getLogger("relaykit.auth")

ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
DEFAULT_ALGORITHMS = ("RS256", "ES256", "EdDSA")
OIDC_SUFFIX = "/.well-known/openid-configuration"


def _jwt() -> Any:
    try:
        import jwt
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise ImportError("JWT authentication needs PyJWT: pip install 'relaykit[signing]'") from exc
    return jwt


class JWTAuthenticator:
    """Bearer JWTs checked against ``jwks_url`` (or the JWKS an OpenID Connect provider at ``oidc_url`` names).

    >>> auth = JWTAuthenticator("https://idp.example/jwks.json", issuer="https://idp.example", audience="my-agent")
    >>> auth.scheme_name
    'bearer'

    ``oidc_url`` instead of ``jwks_url``: the provider's issuer (or its ``…/.well-known/openid-configuration``); the
    discovery document gives ``jwks_uri`` and ``issuer`` (the required issuer unless ``issuer`` is given).
    """

    hint = "send Authorization: Bearer <JWT>"

    def __init__(
        self,
        jwks_url: str | None = None,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        oidc_url: str | None = None,
        algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS,
        leeway: float = 0.0,
        cache_ttl: float = 300.0,
        min_refresh: float = 10.0,
        max_keys: int = 64,
        token_cache: int = 4096,
        token_cache_ttl: float = 60.0,
        scheme_name: str | None = None,
        http: httpx.AsyncClient | None = None,
        verify: Any = True,
    ) -> None:
        if (jwks_url is None) == (oidc_url is None):
            raise ValueError("give exactly one of jwks_url and oidc_url")
        refused = [a for a in algorithms if a not in ASYMMETRIC_ALGORITHMS]
        if refused or not algorithms:
            raise ValueError(
                f"algorithms {refused or '()'} refused: only asymmetric ones ({', '.join(ASYMMETRIC_ALGORITHMS)}) "
                "are accepted, never none or HS*"
            )
        self.jwks_url = jwks_url
        self.oidc_url = oidc_url
        self.issuer = issuer
        self.audience = audience
        self.algorithms = tuple(algorithms)
        self.leeway = leeway
        self.cache_ttl = cache_ttl
        self.min_refresh = min_refresh
        self.max_keys = max_keys
        self.scheme_name = scheme_name or ("oidc" if oidc_url else "bearer")
        self._http = http
        self._owns_http = http is None
        self._verify = verify
        self._keys: dict[str, dict[str, Any]] = {}
        self._fetched = float("-inf")
        self._attempted = float("-inf")
        self._lock = asyncio.Lock()
        self._tokens: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()
        self._token_cache = token_cache
        self._token_cache_ttl = token_cache_ttl

    # --- card ----------------------------------------------------------------------------------------------

    @property
    def security_scheme(self) -> SecurityScheme:
        """``openIdConnectSecurityScheme`` with discovery, an HTTP Bearer JWT scheme otherwise."""
        if self.oidc_url:
            return SecurityScheme(
                open_id_connect_security_scheme=OpenIdConnectSecurityScheme(open_id_connect_url=self._discovery_url())
            )
        return SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", bearer_format="JWT"))

    @property
    def challenge(self) -> str:
        """RFC 6750 §3."""
        return 'Bearer realm="a2a"'

    def _discovery_url(self) -> str:
        url = (self.oidc_url or "").rstrip("/")
        return url if url.endswith(OIDC_SUFFIX) else url + OIDC_SUFFIX

    # --- keys ----------------------------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10.0, verify=self._verify)
        return self._http

    async def start(self) -> None:
        """Discover (OIDC) and fetch the keys; a provider that cannot be reached refuses the start."""
        await self._refresh(force=True)
        if not self._keys:
            raise ValueError(f"the JWKS at {self.jwks_url} holds no usable key")

    async def close(self) -> None:
        """Close the HTTP client this authenticator made."""
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _get_json(self, url: str) -> Any:
        try:
            response = await self._client().get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise ValueError(f"cannot fetch {url}: {exc}") from None
        if response.status_code != 200:
            raise ValueError(f"{url} answered HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise ValueError(f"{url} did not answer JSON") from None

    async def _discover(self) -> None:
        url = self._discovery_url()
        document = await self._get_json(url)
        if not isinstance(document, dict) or not document.get("jwks_uri") or not document.get("issuer"):
            raise ValueError(f"{url} is not an OpenID Connect discovery document (no jwks_uri / issuer)")
        issuer = str(document["issuer"])
        asked = url[: -len(OIDC_SUFFIX)]
        if issuer.rstrip("/") != asked.rstrip("/"):
            raise ValueError(
                f"{url} names the issuer {issuer!r}, not {asked!r}: OpenID Connect discovery requires the two to be "
                "identical (give the issuer's URL to --auth-oidc)"
            )
        self.jwks_url = str(document["jwks_uri"])
        if self.issuer is None:
            self.issuer = issuer

    async def _refresh(self, *, force: bool = False) -> None:
        """Refetch the JWKS unless that was tried less than ``min_refresh`` seconds ago (``force``: always)."""
        async with self._lock:
            now = time.monotonic()
            if not force and now - self._attempted < self.min_refresh:
                return
            self._attempted = now
            if self.oidc_url and (force or self.jwks_url is None):
                await self._discover()
            assert self.jwks_url is not None
            document = await self._get_json(self.jwks_url)
            entries = document.get("keys") if isinstance(document, dict) else None
            if not isinstance(entries, list):
                raise ValueError(f"{self.jwks_url} is not a JWKS (no keys array)")
            keys: dict[str, dict[str, Any]] = {}
            for entry in entries[: self.max_keys]:
                if isinstance(entry, dict) and entry.get("kty") in ("RSA", "EC", "OKP") and entry.get("use") != "enc":
                    keys[str(entry.get("kid", ""))] = entry
            self._keys = keys
            self._fetched = now

    async def _key_for(self, kid: str | None, alg: str) -> Any:
        if time.monotonic() - self._fetched > self.cache_ttl and not self._lock.locked():
            # Stale keys are refetched by one request; while that runs, others go on with the keys held rather
            # than queue behind it (a hanging key server would hold them all). An unknown kid, below, does wait.
            try:
                await self._refresh()
            except ValueError as exc:
                log.warning("JWKS refresh failed, keeping the keys fetched before: %s", exc)
        entry = self._lookup(kid)
        if entry is None:
            # An unknown kid may be a key the provider rotated in since: refetch (rate-limited) once.
            try:
                await self._refresh()
            except ValueError as exc:
                log.warning("JWKS refresh failed: %s", exc)
            entry = self._lookup(kid)
        if entry is None:
            raise AuthenticationRequiredError("invalid token: unknown signing key" + (f" {kid!r}" if kid else ""))
        declared = entry.get("alg")
        if declared is not None and declared != alg:
            raise AuthenticationRequiredError(f"invalid token: key {kid!r} is for {declared}, not {alg}")
        jwt = _jwt()
        try:
            return jwt.PyJWK(entry, algorithm=alg).key
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            raise AuthenticationRequiredError(f"invalid token: key {kid!r} does not fit {alg}") from None

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    # --- tokens --------------------------------------------------------------------------------------------

    async def authenticate(self, request: AuthRequest) -> Principal | None:
        """The principal of a valid bearer token; None without an ``Authorization: Bearer`` header."""
        value = request.headers.get("authorization")
        if not value:
            return None
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = token.strip()
        if not token:
            raise AuthenticationRequiredError("invalid token: empty bearer token")
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(digest)
        now = time.time()
        if cached is not None:
            if cached[1] > now:
                self._tokens.move_to_end(digest)
                return cached[0]
            del self._tokens[digest]
        principal, expires = await self._verify_token(token)
        self._tokens[digest] = (principal, min(expires, now + self._token_cache_ttl))
        if len(self._tokens) > self._token_cache:
            self._tokens.popitem(last=False)
        return principal

    async def _verify_token(self, token: str) -> tuple[Principal, float]:
        jwt = _jwt()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthenticationRequiredError(f"invalid token: {exc}") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise AuthenticationRequiredError(f"invalid token: algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        key = await self._key_for(None if kid is None else str(kid), alg)
        required = ["exp", "sub"]
        if self.issuer is not None:
            required.append("iss")
        if self.audience is not None:
            required.append("aud")
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": required, "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise AuthenticationRequiredError(f"invalid token: {exc}") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise AuthenticationRequiredError("invalid token: sub must be a non-empty string")
        issuer = claims.get("iss")
        principal = Principal("jwt", subject, issuer=issuer if isinstance(issuer, str) else "", claims=claims)
        return principal, float(claims["exp"])
