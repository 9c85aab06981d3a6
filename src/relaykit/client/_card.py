"""Agent Card discovery and transport negotiation (digest §1, §4.5, §7.5).

* ``CardResolver`` fetches ``/.well-known/agent-card.json``, keeps it for its ``Cache-Control: max-age`` and
  revalidates with ``If-None-Match`` (a 304 keeps the cached card); a card over ``max_bytes`` is refused
  (``A2AResponseTooLargeError``) without being read whole. It keeps the card's JSON object exactly as received
  (``received``), and runs its ``verifier`` (``_card_trust``) on that and the parsed card before caching either:
  a signature is checked on what the agent sent, not on a re-encoding of the model (which drops unknown members).
* ``verify_card`` / ``sign_card`` (from ``relaykit._jws``, shared with the server's ``--card-key``) check and make a
  card's detached JWS signatures (RFC 7515, payload canonicalised per RFC 8785), with the algorithms pinned.
* ``choose_interface`` filters and orders the card's ``supportedInterfaces``: A2A 1.0 before 0.3, then the client's
  preference; ties keep the card's order (the server's preference). Given a ``version`` ("1.0" or "0.3"), only
  interfaces of that major version count (a dual-stack card can be spoken to as 0.3). A card with nothing usable
  raises ``A2AInvalidCardError``. A 0.3 card is read as its 1.0 equivalent (``relaykit._v03.card_in``).
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import ValidationError

from relaykit._card import AgentCard, AgentInterface
from relaykit._errors import A2AConnectionError, A2AInvalidCardError, A2ATimeoutError
from relaykit._jws import canonical_card, sign_card, verify_card
from relaykit._v03 import card_in, is_v03
from relaykit.client._card_trust import CardVerifier, run_verifier
from relaykit.client._transport import MAX_RESPONSE_BYTES, describe, read_body
from relaykit.client._urls import redact_url, sendable

__all__ = [
    "CARD_PATH",
    "DEFAULT_TRANSPORTS",
    "CardResolver",
    "canonical_card",
    "choose_interface",
    "grpc_available",
    "parse_card",
    "sign_card",
    "verify_card",
]

CARD_PATH = "/.well-known/agent-card.json"


def grpc_available() -> bool:
    """Whether the gRPC transport can be used: grpcio and relaykit's gRPC client module are installed."""
    return (
        importlib.util.find_spec("grpc") is not None and importlib.util.find_spec("relaykit.client._grpc") is not None
    )


# The client's default preference among a card's interfaces: JSON-RPC, then REST, then gRPC when its transport and
# grpcio are installed.
DEFAULT_TRANSPORTS: tuple[str, ...] = ("JSONRPC", "HTTP+JSON", *(("GRPC",) if grpc_available() else ()))
_MAX_AGE = re.compile(r"max-age=(\d+)")


def card_url(url: str) -> str:
    """The card URL for a base URL (a URL that already names a JSON document is used as is); a query (an API key
    the agent wants there, say) stays after the path.

    >>> card_url("https://agent.example/a2a/?api_key=k")
    'https://agent.example/a2a/.well-known/agent-card.json?api_key=k'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url  # httpx refuses it with its own error
    if parts.path.endswith(".json"):
        return url
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + CARD_PATH))


@dataclass
class _Cached:
    card: AgentCard
    etag: str | None
    expires: float
    content: bytes  # the card's bytes as received


class CardResolver:
    """Fetches and caches agent cards (RFC 9111 freshness + ETag revalidation).

    ``verifier`` (``(card, received JSON object) -> None``, sync or async, e.g. a ``CardSignatureVerifier``) runs
    on every card fetched, before it is cached or returned; its refusal raises ``A2AInvalidCardError``.

    >>> # resolver = CardResolver(http, verifier=CardSignatureVerifier(public_pem))
    >>> # card = await resolver.get("https://agent.example"); raw = resolver.received("https://agent.example")
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = MAX_RESPONSE_BYTES,
        verifier: CardVerifier | None = None,
    ) -> None:
        self.http = http
        # Freshness is judged by this clock (monotonic seconds); tests pass their own to step past max-age.
        self.clock = clock
        self.max_bytes = max_bytes
        self.verifier = verifier
        self._cache: dict[str, _Cached] = {}

    def received(self, url: str) -> dict[str, Any] | None:
        """The JSON object of the card last fetched from ``url``, exactly as received (a fresh copy; ``None``: not
        fetched). What to verify a signature against: ``verify_card(card, key, received=...)``."""
        cached = self._cache.get(card_url(url))
        if cached is None:
            return None
        value: dict[str, Any] = json.loads(cached.content)
        return value

    async def get(self, url: str, *, headers: dict[str, str] | None = None) -> AgentCard:
        """The card at ``url`` (a base URL or the card's own URL)."""
        target = card_url(url)
        cached = self._cache.get(target)
        if cached is not None and cached.expires > self.clock():
            return cached.card
        request_headers = dict(headers or {})
        if cached is not None and cached.etag:
            request_headers["If-None-Match"] = cached.etag
        # The URL's userinfo goes as the Basic auth httpx would make of it, out of the URL httpx logs (``_urls``).
        send_url, basic = sendable(target)
        auth: Any = basic if basic is not None and self.http.auth is None else httpx.USE_CLIENT_DEFAULT
        shown = redact_url(target)
        try:
            async with self.http.stream("GET", send_url, headers=request_headers, auth=auth) as response:
                content = await read_body(response, self.max_bytes, target) if response.status_code == 200 else b""
        except httpx.TimeoutException:
            raise A2ATimeoutError(f"{shown} did not answer in time") from None
        except httpx.HTTPError as exc:
            # ``describe``: never the text of a local protocol error, which quotes the offending header's value.
            raise A2AConnectionError(f"cannot fetch the agent card at {shown}: {describe(exc)}") from None
        max_age = _max_age(response.headers.get("cache-control", ""))
        if response.status_code == 304 and cached is not None:
            cached.expires = self.clock() + max_age
            return cached.card
        if response.status_code != 200:
            raise A2AInvalidCardError(f"{shown} answered HTTP {response.status_code}, not an agent card")
        raw = _card_object(content, shown)
        card = _card_model(raw, shown)
        if self.verifier is not None:
            await run_verifier(self.verifier, card, raw, target)
        self._cache[target] = _Cached(card, response.headers.get("etag"), self.clock() + max_age, content)
        return card


def _max_age(cache_control: str) -> float:
    if "no-store" in cache_control or "no-cache" in cache_control:
        return 0.0
    found = _MAX_AGE.search(cache_control)
    return float(found.group(1)) if found else 0.0


def parse_card(data: bytes | str, source: str = "the agent card") -> AgentCard:
    """Validate card JSON; 0.3-style cards (``url`` + ``preferredTransport``) are read as their 1.0 equivalent."""
    return _card_model(_card_object(data, source), source)


def _card_object(data: bytes | str, source: str) -> dict[str, Any]:
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise A2AInvalidCardError(f"{source} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise A2AInvalidCardError(f"{source} is not a JSON object")
    return raw


def _card_model(raw: dict[str, Any], source: str) -> AgentCard:
    # A 0.3 card (top-level url + preferredTransport, 0.3 security shapes) is read as its 1.0 equivalent. Neither
    # ``card_in`` (it rewrites into a new dict) nor validation changes ``raw``: it stays as received, for the verifier.
    try:
        return AgentCard.model_validate(card_in(raw))
    except ValidationError as exc:
        raise A2AInvalidCardError(f"{source} is not a valid agent card: {exc}") from None


def choose_interface(card: AgentCard, preferences: Sequence[str], version: str | None = None) -> AgentInterface:
    """The interface to use: the client's preference order first, the card's order among equals; ``version``
    (``"1.0"``, ``"0.3"``: compared by major version) keeps only the interfaces of that protocol version."""
    wanted = _major(version) if version else None
    if wanted is not None and wanted not in ("0", "1"):
        raise ValueError(f"protocol version {version!r}: this client speaks 1.0 and 0.3")
    ranked: list[tuple[int, int, int, AgentInterface]] = []
    for position, interface in enumerate(card.supported_interfaces):
        binding = interface.protocol_binding.upper()
        if binding not in preferences:
            continue
        offered = interface.protocol_version
        if _major(offered) != "1" and not is_v03(offered):
            continue
        if wanted is not None and _major(offered) != wanted:
            continue
        # 1.0 wherever the card offers it in a binding the client speaks; 0.3 (through the codec) otherwise.
        ranked.append((0 if _major(offered) == "1" else 1, preferences.index(binding), position, interface))
    if not ranked:
        listed = (
            ", ".join(
                f"{i.protocol_binding} {i.protocol_version} at {redact_url(i.url)}" for i in card.supported_interfaces
            )
            or "no interfaces at all"
        )
        spoken = f"A2A {version}" if version else "A2A 1.0 or 0.3"
        raise A2AInvalidCardError(
            f"agent {card.name!r} offers no {spoken} interface this client can use "
            f"(it offers {listed}; this client speaks {', '.join(preferences)})"
        )
    ranked.sort(key=lambda item: (item[0], item[1], item[2]))
    return ranked[0][3]


def _major(version: str) -> str:
    return version.strip().split(".", 1)[0]
