"""Agent Card discovery and transport negotiation (digest §1, §4.5, §7.5).

* ``CardResolver`` fetches ``/.well-known/agent-card.json``, keeps it for its ``Cache-Control: max-age`` and
  revalidates with ``If-None-Match`` (a 304 keeps the cached card); a card over ``max_bytes`` is refused
  (``A2AResponseTooLargeError``) without being read whole.
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
from urllib.parse import unquote, urlsplit

import httpx
from pydantic import ValidationError

from relaykit._card import AgentCard, AgentInterface
from relaykit._errors import A2AConnectionError, A2AInvalidCardError, A2ATimeoutError
from relaykit._jws import canonical_card, sign_card, verify_card
from relaykit._v03 import card_in, is_v03
from relaykit.client._transport import MAX_RESPONSE_BYTES, describe, read_body

__all__ = [
    "CARD_PATH",
    "DEFAULT_TRANSPORTS",
    "CardResolver",
    "canonical_card",
    "card_keys",
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
    """The card URL for a base URL (a URL that already names a JSON document is used as is)."""
    if url.endswith(".json"):
        return url
    return url.rstrip("/") + CARD_PATH


@dataclass
class _Cached:
    card: AgentCard
    etag: str | None
    expires: float


class CardResolver:
    """Fetches and caches agent cards (RFC 9111 freshness + ETag revalidation)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.http = http
        # Freshness is judged by this clock (monotonic seconds); tests pass their own to step past max-age.
        self.clock = clock
        self.max_bytes = max_bytes
        self._cache: dict[str, _Cached] = {}

    async def get(self, url: str, *, headers: dict[str, str] | None = None) -> AgentCard:
        """The card at ``url`` (a base URL or the card's own URL)."""
        target = card_url(url)
        cached = self._cache.get(target)
        if cached is not None and cached.expires > self.clock():
            return cached.card
        request_headers = dict(headers or {})
        if cached is not None and cached.etag:
            request_headers["If-None-Match"] = cached.etag
        try:
            async with self.http.stream("GET", target, headers=request_headers) as response:
                content = await read_body(response, self.max_bytes, target) if response.status_code == 200 else b""
        except httpx.TimeoutException as exc:
            raise A2ATimeoutError(f"{target} did not answer in time") from exc
        except httpx.HTTPError as exc:
            # ``describe``: never the text of a local protocol error, which quotes the offending header's value.
            raise A2AConnectionError(f"cannot fetch the agent card at {target}: {describe(exc)}") from None
        max_age = _max_age(response.headers.get("cache-control", ""))
        if response.status_code == 304 and cached is not None:
            cached.expires = self.clock() + max_age
            return cached.card
        if response.status_code != 200:
            raise A2AInvalidCardError(f"{target} answered HTTP {response.status_code}, not an agent card")
        card = parse_card(content, target)
        self._cache[target] = _Cached(card, response.headers.get("etag"), self.clock() + max_age)
        return card


def _max_age(cache_control: str) -> float:
    if "no-store" in cache_control or "no-cache" in cache_control:
        return 0.0
    found = _MAX_AGE.search(cache_control)
    return float(found.group(1)) if found else 0.0


def parse_card(data: bytes | str, source: str = "the agent card") -> AgentCard:
    """Validate card JSON; 0.3-style cards (``url`` + ``preferredTransport``) are read as their 1.0 equivalent."""
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise A2AInvalidCardError(f"{source} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise A2AInvalidCardError(f"{source} is not a JSON object")
    # A 0.3 card (top-level url + preferredTransport, 0.3 security shapes) is read as its 1.0 equivalent.
    raw = card_in(raw)
    try:
        return AgentCard.model_validate(raw)
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
            ", ".join(f"{i.protocol_binding} {i.protocol_version} at {i.url}" for i in card.supported_interfaces)
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


async def card_keys(
    card: AgentCard, trusted: Sequence[str], *, http: httpx.AsyncClient | None = None
) -> dict[str, object]:
    """The ``{kid: key}`` of the JWKS the card's signatures name in ``jku``, for ``verify_card``; only a ``jku`` under
    one of ``trusted`` (e.g. ``"https://agent.example/"``) is fetched, never one the card alone vouches for. A ``jku``
    is under a trusted URL when its scheme, host and port are the same and its path is that URL's path or below it.

    >>> # verify_card(card, await card_keys(card, ["https://agent.example/"]), algorithms=["ES256"])
    """
    import jwt

    urls: list[str] = []
    for signature in card.signatures:
        jku = _jku(signature.protected)
        if jku and any(_under(jku, prefix) for prefix in trusted) and jku not in urls:
            urls.append(jku)
    keys: dict[str, object] = {}
    client = http or httpx.AsyncClient(timeout=10.0)
    try:
        for url in urls:
            try:
                document = (await client.get(url)).json()
            except (httpx.HTTPError, ValueError) as exc:
                raise A2AConnectionError(f"cannot fetch the card's keys at {url}: {exc}") from exc
            for entry in document.get("keys", []) if isinstance(document, dict) else []:
                if isinstance(entry, dict) and entry.get("kid"):
                    try:
                        keys[str(entry["kid"])] = jwt.PyJWK(entry).key
                    except jwt.PyJWTError:
                        continue  # a key this client cannot use verifies nothing
    finally:
        if http is None:
            await client.aclose()
    return keys


def _jku(protected: str) -> str | None:
    import base64

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
