"""One inspector session as the browser describes it on every call: target URL, headers, transport and version.

Invariants:

* the browser holds the session; the server keeps nothing of it between calls: headers (credentials) live only in
  the request that carries them and the ``Client`` made for that request (the card cache is keyed by a digest);
* every A2A call goes through ``relaykit.client.Client`` (card negotiation, headers, transports, errors), one client
  per inspector request over its own HTTP connection pool, so sessions never share connections;
* a *locked* inspector (``relaykit serve --inspector``) talks only to the agent it is mounted in, reached at the
  address the request came in on: the browser cannot point the server's HTTP client anywhere else.

The protocol version (1.0 or 0.3) is the page's choice among the card's interfaces; ``open_client`` passes it on to
``Client(protocol_version=…)``, which then uses only that version's interfaces (a dual-stack agent is spoken to as a
0.3 client would).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from relaykit._card import GRPC, AgentCard
from relaykit._errors import A2AClientError, A2AInvalidCardError
from relaykit.client import Client, RetryPolicy, parse_card
from relaykit.client._card import DEFAULT_TRANSPORTS, card_url
from relaykit.inspector._wire import InspectorHTTP

__all__ = [
    "CLIENT_VERSIONS",
    "CardCache",
    "Session",
    "SessionError",
    "Target",
    "error_json",
    "local_interfaces",
    "new_http",
    "open_client",
]

# Header names a session may set: HTTP tokens, minus what the HTTP client owns.
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_RESERVED = frozenset({"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"})
MAX_HEADERS = 50
CARD_TTL = 30.0  # seconds a fetched card is reused by the calls that follow it (the Card page always refetches)
CALL_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0
_SSL: ssl.SSLContext | None = None
CLIENT_VERSIONS = ("1.0", "0.3")  # what relaykit's client speaks (compared by major version)
SPOKEN_MAJORS = frozenset(v.split(".")[0] for v in CLIENT_VERSIONS)


class SessionError(A2AClientError):
    """The session in an inspector request is unusable (bad URL, bad header, a version the client cannot speak)."""

    default_message = "Invalid inspector session"


@dataclass(frozen=True)
class Target:
    """What an inspector app may talk to: any URL (``relaykit inspect``) or only its own agent (mounted)."""

    default_url: str = ""
    locked: bool = False
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Session:
    """The browser's session, as sent with one request (``version`` is "1.0" or "0.3", checked by ``parse``)."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    transport: str = "auto"
    version: str = "1.0"
    locked: bool = False

    @classmethod
    def parse(cls, data: Any, target: Target, local_base: str) -> Session:
        """Validate the ``session`` member of a request body; a locked target ignores the URL it names."""
        if not isinstance(data, Mapping):
            raise SessionError("the request has no session")
        url = local_base if target.locked else str(data.get("url") or target.default_url).strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SessionError(f"not an http(s) URL: {url!r}")
        headers: dict[str, str] = {}
        raw = data.get("headers") or []
        if not isinstance(raw, list) or len(raw) > MAX_HEADERS:
            raise SessionError(f"headers must be a list of at most {MAX_HEADERS} [name, value] pairs")
        for item in raw:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                raise SessionError("each header is a [name, value] pair of strings")
            name, value = item[0].strip(), item[1].strip()
            if not name:
                continue
            if not _TOKEN.match(name) or name.lower() in _RESERVED:
                raise SessionError(f"header name not allowed: {name!r}")
            if "\r" in value or "\n" in value:
                raise SessionError(f"header {name} has a line break in its value")
            headers[name] = value
        transport = str(data.get("transport") or "auto")
        version = str(data.get("version") or "1.0").strip()
        if version.split(".")[0] not in SPOKEN_MAJORS:
            raise SessionError(f"protocol version {version} is not spoken by relaykit's client (1.0 and 0.3 are)")
        return cls(url=url, headers=headers, transport=transport, version=version, locked=target.locked)

    @property
    def key(self) -> str:
        """A digest naming this target and header set (the card cache key; the headers themselves are not kept)."""
        material = "\0".join([self.url, *(f"{k.lower()}:{v}" for k, v in sorted(self.headers.items()))])
        return hashlib.sha256(material.encode()).hexdigest()

    def preferences(self) -> tuple[str, ...]:
        """The transports the client may use, best first."""
        if self.transport == "auto":
            return DEFAULT_TRANSPORTS
        if self.transport not in DEFAULT_TRANSPORTS:
            spoken = ", ".join(DEFAULT_TRANSPORTS)
            raise SessionError(f"transport {self.transport} is not available here (this inspector speaks {spoken})")
        return (self.transport,)


def new_http(timeout: float = CALL_TIMEOUT) -> InspectorHTTP:
    """A fresh HTTP client for one inspector request (one TLS context is shared: building it is the costly part),
    over a ``WireTap`` that keeps what the agent answered."""
    global _SSL
    if _SSL is None:
        _SSL = ssl.create_default_context()
    return InspectorHTTP(verify=_SSL, timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT))


@dataclass
class _Entry:
    card: AgentCard
    expires: float


class CardCache:
    """Parsed cards by session key, for ``CARD_TTL`` seconds: a chat turn does not refetch the card."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._entries: dict[str, _Entry] = {}

    def put(self, session: Session, card: AgentCard) -> None:
        if len(self._entries) >= self.size:
            self._entries.pop(next(iter(self._entries)))
        self._entries[session.key] = _Entry(card, time.monotonic() + CARD_TTL)

    async def get(self, session: Session, http: httpx.AsyncClient) -> AgentCard:
        entry = self._entries.get(session.key)
        if entry is not None and entry.expires > time.monotonic():
            return entry.card
        url = card_url(session.url)
        try:
            response = await http.get(url, headers=session.headers)
        except httpx.HTTPError as exc:
            raise SessionError(f"cannot fetch the agent card at {url}: {exc or type(exc).__name__}") from None
        if response.status_code != 200:
            raise A2AInvalidCardError(f"{url} answered HTTP {response.status_code}, not an agent card")
        card = parse_card(response.content, url)
        self.put(session, card)
        return card


def local_interfaces(card: AgentCard, base: str) -> AgentCard:
    """The card with its HTTP interfaces at ``base``: a mounted inspector reaches its own agent where the request
    came in, whatever public URL (a proxy, a TLS terminator) the card advertises. relaykit serves JSON-RPC at
    ``{base}/`` and HTTP+JSON at ``{base}`` (CONTRACT)."""
    interfaces = []
    for interface in card.supported_interfaces:
        if interface.protocol_binding.upper() == GRPC:
            interfaces.append(interface)
            continue
        url = base.rstrip("/") + ("/" if interface.url.endswith("/") else "")
        interfaces.append(interface.model_copy(update={"url": url}))
    return card.model_copy(update={"supported_interfaces": interfaces})


@contextlib.asynccontextmanager
async def open_client(session: Session, http: httpx.AsyncClient, cards: CardCache) -> AsyncIterator[Client]:
    """A connected ``Client`` for this session (its card from the cache, or fetched), closed on exit (a gRPC
    transport owns a channel; the HTTP ones use ``http``, which the caller owns)."""
    card = await cards.get(session, http)
    if session.locked:
        card = local_interfaces(card, session.url)
    client = Client(
        session.url,
        card=card,
        http=http,
        headers=session.headers,
        transports=session.preferences(),
        protocol_version=session.version,
        timeout=CALL_TIMEOUT,
        connect_timeout=CONNECT_TIMEOUT,
        # The inspector shows what happened: no silent retries.
        retry=RetryPolicy(attempts=1),
        # The inspector sends the headers its user typed to the URL they typed, as curl does (its card and
        # OpenAPI fetches too): the client's refusal of credentials in clear protects programs whose credentials
        # come from configuration, not a person at the page, who sees the URL they are sending to.
        allow_insecure_credentials=True,
    )
    try:
        await client.connect()
        yield client
    finally:
        await client.aclose()


def error_json(exc: BaseException) -> dict[str, Any]:
    """An exception as the page shows it: class, message, and the A2A wire identity when it has one."""
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc) or type(exc).__name__}
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(exc, A2AClientError):
        out["code"] = code
        out["reason"] = getattr(exc, "reason", "")
        out["httpStatus"] = getattr(exc, "http_status", None)
    details = getattr(exc, "details", None)
    if isinstance(details, list):
        out["details"] = details
    task = getattr(exc, "task", None)
    if task is not None and hasattr(task, "to_dict"):
        out["task"] = task.to_dict()
    return out
