"""Whether to trust an agent card: the verifier hook the client runs on a fetched card, signature checks, key sources.

Rules:

* A card verifier is any callable ``(card, received) -> None`` (sync or async): ``card`` the parsed ``AgentCard``,
  ``received`` the card's JSON object exactly as it came over the wire (before any 0.3 reading, unknown members
  kept). It refuses the card by raising (or by returning ``False``); the client then fails with
  ``A2AInvalidCardError`` (an ``A2AError`` the verifier raises is kept as it is) and sends the agent nothing.
  ``Client(card_verifier=…)`` and ``CardResolver(verifier=…)`` run it on every card they fetch, before it is cached
  or used: the client on the public card and on the extended one (GetExtendedAgentCard) alike. Over gRPC the
  extended card arrives as protobuf, and ``received`` is that message's ProtoJSON in the spec's canonical form
  (REQUIRED fields kept even when empty; ``GrpcTransport.call_received`` says why that is sound, and which signed
  JSON it cannot rebuild: a non-REQUIRED field kept at its default, such as ``"required": false``).
* Signatures are checked on what was received: ``verify_card(..., received=...)`` canonicalises that JSON object
  (RFC 8785) as well as the parsed card, so members this client does not model (a newer spec's, a vendor's), which
  the parsed card drops, are covered by the signature and cannot be forged around it.
* Keys come from the caller (a key, a JWK, a JWKS document, ``{kid: key}``), from a JWKS URL the caller names, or
  from a signature's own ``jku`` only when it lies under a URL the caller trusts (``card_keys``). A card never
  vouches for its own keys. Key documents are bounded like every other response (``max_bytes``).
"""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from relaykit._card import AgentCard
from relaykit._errors import A2AConnectionError, A2AError, A2AInvalidCardError, A2ATimeoutError
from relaykit._jws import KeySource, jwks_keys, resolve_key, verify_card
from relaykit.client._transport import MAX_RESPONSE_BYTES, describe, read_body
from relaykit.client._urls import redact_url, scrub, sendable

__all__ = ["CardSignatureVerifier", "CardVerifier", "card_keys", "run_verifier"]

CardVerifier = Callable[[AgentCard, Mapping[str, Any]], Awaitable[object] | object]
"""``(card, received JSON object) -> None``, sync or async; raise (or return ``False``) to refuse the card."""


async def run_verifier(
    verifier: CardVerifier, card: AgentCard, received: Mapping[str, Any], where: str, *, what: str = "the agent card"
) -> None:
    """Run ``verifier`` on ``what`` (a card) fetched from ``where``; a refusal becomes ``A2AInvalidCardError``."""
    shown = redact_url(where)
    try:
        outcome = verifier(card, received)
        if inspect.isawaitable(outcome):
            outcome = await outcome
    except A2AError:
        raise
    except Exception as exc:
        detail = scrub(str(exc)) or type(exc).__name__
        raise A2AInvalidCardError(f"{what} at {shown} was refused by the card verifier: {detail}") from exc
    if outcome is False:
        raise A2AInvalidCardError(f"{what} at {shown} was refused by the card verifier")


class CardSignatureVerifier:
    """A card verifier that requires a valid JWS signature (digest §7.5) before the client uses the card.

    At least one of the card's signatures must verify with one of the keys, over the card's JSON exactly as
    received (RFC 8785 canonical form) or over the parsed card's canonical form; ``algorithms`` are pinned. Keys:
    ``keys`` (a public key as PEM or a cryptography key, a JWK, a JWKS document, a ``{kid: key}`` mapping, or a
    callable ``(kid, jku) -> key | None``), the JWKS at ``jwks_url`` (fetched at each verification), and the JWKS a
    signature names in its ``jku`` when that URL lies under one of ``trusted_jku`` (see ``card_keys``). ``http``:
    the client for those fetches (give one with your TLS settings; default: a short-lived one, system CAs).

    >>> from relaykit.client import CardSignatureVerifier, Client
    >>> verifier = CardSignatureVerifier(jwks_url="https://agent.example/.well-known/jwks.json", algorithms=["ES256"])
    >>> async def main():
    ...     async with Client("https://agent.example", card_verifier=verifier) as client:  # refused unless signed
    ...         print(await client.ask("hello"))
    """

    def __init__(
        self,
        keys: KeySource = None,
        *,
        jwks_url: str | None = None,
        trusted_jku: Sequence[str] = (),
        algorithms: Sequence[str] = ("ES256", "RS256"),
        sdk_form: bool = False,
        http: httpx.AsyncClient | None = None,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if keys is None and jwks_url is None and not trusted_jku:
            raise ValueError("give keys, a jwks_url or trusted_jku: a signature verifies only against a known key")
        self.keys = keys
        self.jwks_url = jwks_url
        self.trusted_jku = tuple(trusted_jku)
        self.algorithms = tuple(algorithms)
        # a2a-sdk's empties-dropped form (``verify_card``'s ``sdk_form``): off unless the agent is known to sign so.
        self.sdk_form = sdk_form
        self.http = http
        self.max_bytes = max_bytes

    async def __call__(self, card: AgentCard, received: Mapping[str, Any]) -> None:
        """Verify ``card`` (``received``: its JSON object as fetched); ``A2AInvalidCardError`` when none verifies."""
        fetched: dict[str, Any] = {}
        if card.signatures and (self.jwks_url is not None or self.trusted_jku):
            async with _http_for(self.http) as http:
                if self.jwks_url is not None:
                    fetched.update(jwks_keys(await fetch_json(http, self.jwks_url, self.max_bytes)))
                if self.trusted_jku:
                    fetched.update(await card_keys(card, self.trusted_jku, http=http, max_bytes=self.max_bytes))
        own = self.keys

        def lookup(kid: str | None, jku: str | None) -> Any:
            # A fetched key named by the signature's kid first; then the caller's own keys (a single key applies
            # to every kid, a mapping or JWKS by kid).
            if kid is not None and kid in fetched:
                return fetched[kid]
            if own is None:
                return None
            return resolve_key(own, kid, jku)

        verify_card(card, lookup, algorithms=self.algorithms, sdk_form=self.sdk_form, received=received)


class _http_for:
    """``async with``: the given client, or a short-lived one closed on exit."""

    def __init__(self, http: httpx.AsyncClient | None) -> None:
        self.given = http
        self.made: httpx.AsyncClient | None = None

    async def __aenter__(self) -> httpx.AsyncClient:
        if self.given is not None:
            return self.given
        self.made = httpx.AsyncClient(timeout=10.0)
        return self.made

    async def __aexit__(self, *exc: object) -> None:
        if self.made is not None:
            await self.made.aclose()


async def fetch_json(http: httpx.AsyncClient, url: str, max_bytes: int) -> Any:
    """The JSON document at ``url`` (at most ``max_bytes``), or ``A2AConnectionError`` / ``A2ATimeoutError``."""
    target, basic = sendable(url)
    auth: Any = basic if basic is not None and http.auth is None else httpx.USE_CLIENT_DEFAULT
    shown = redact_url(url)
    try:
        async with http.stream("GET", target, auth=auth) as response:
            body = await read_body(response, max_bytes, url)
            status = response.status_code
    except httpx.TimeoutException:
        raise A2ATimeoutError(f"{shown} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise A2AConnectionError(f"cannot fetch the card's keys at {shown}: {describe(exc)}") from None
    if status != 200:
        raise A2AConnectionError(f"cannot fetch the card's keys at {shown}: HTTP {status}")
    try:
        return json.loads(body)
    except ValueError:
        raise A2AInvalidCardError(f"the card's keys at {shown} are not JSON") from None


async def card_keys(
    card: AgentCard,
    trusted: Sequence[str],
    *,
    http: httpx.AsyncClient | None = None,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> dict[str, object]:
    """The ``{kid: key}`` of the JWKS the card's signatures name in ``jku``, for ``verify_card``; only a ``jku`` under
    one of ``trusted`` (e.g. ``"https://agent.example/"``) is fetched, never one the card alone vouches for. A ``jku``
    is under a trusted URL when its scheme, host and port are the same and its path is that URL's path or below it.

    >>> # verify_card(card, await card_keys(card, ["https://agent.example/"]), algorithms=["ES256"])
    """
    urls: list[str] = []
    for signature in card.signatures:
        jku = _jku(signature.protected)
        if jku and any(_under(jku, prefix) for prefix in trusted) and jku not in urls:
            urls.append(jku)
    keys: dict[str, object] = {}
    if not urls:
        return keys
    async with _http_for(http) as client:
        for url in urls:
            keys.update(jwks_keys(await fetch_json(client, url, max_bytes)))
    return keys


def _jku(protected: str) -> str | None:
    try:
        header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    except ValueError:
        return None
    value = header.get("jku") if isinstance(header, dict) else None
    return value if isinstance(value, str) else None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _under(url: str, trusted: str) -> bool:
    """Whether ``url`` is at or below ``trusted``: the same scheme, host and port, and a path that is ``trusted``'s
    or continues it past a ``/``. Not a string prefix: ``https://agent.example`` is a prefix of
    ``https://agent.example.evil/`` and ``http://host:80`` of ``http://host:8080/``."""
    try:
        got, want = urlsplit(url), urlsplit(trusted)
        ports = (got.port, want.port)
    except ValueError:
        return False  # a malformed port: nothing to trust
    scheme = got.scheme.lower()
    if scheme != want.scheme.lower() or scheme not in _DEFAULT_PORTS or not got.hostname:
        return False
    default = _DEFAULT_PORTS[scheme]
    if got.hostname != want.hostname or (ports[0] or default) != (ports[1] or default):
        return False
    path = got.path or "/"
    # ``..`` would climb out of the trusted path once the server normalises it.
    if any(segment in (".", "..") for segment in unquote(path).split("/")):
        return False
    base = want.path or "/"
    return path == base or path.startswith(base if base.endswith("/") else base + "/")
