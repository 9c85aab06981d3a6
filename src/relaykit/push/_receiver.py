"""``WebhookReceiver``: a small ASGI app that receives push notifications (from relaykit or any A2A server).

For each ``POST`` (any path: mount it where the webhook URL points):

1. the body is read (up to ``max_body`` bytes, else 413);
2. credentials: ``token`` must equal ``X-A2A-Notification-Token`` and ``authorization`` must equal the
   ``Authorization`` header, when given (else 401);
3. signature: with ``keys`` or ``jwks_url`` the ``X-A2A-Signature`` JWT must verify (``verify_request``: key,
   algorithm, ``iss`` when ``issuer`` is given, age, body hash) and its ``jti`` must be new (a replay is 401);
   the JWKS is fetched on first use and again when a token names an unknown ``kid`` (key rotation);
4. the body must be a StreamResponse (else 400), and a signed ``taskId`` must be the body's task;
5. duplicates (an ``eventId`` claim, or relaykit's ``X-Relaykit-Event-Id`` header, seen before) are acknowledged
   without calling back; otherwise ``callback(event)`` runs (sync or async). If it raises, the answer is 500 and
   the event is not marked seen, so the sender's retry calls back again.

Answers 200 ``{}`` on success. Without ``keys``/``jwks_url`` (the official SDK does not sign) only the
token/authorization checks apply.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
from pydantic import ValidationError

from relaykit._types import StreamResponse
from relaykit.push._signing import SignatureError, header_value, verify_request

__all__ = ["WebhookReceiver"]

log = logging.getLogger("relaykit.push.receiver")

Scope = MutableMapping[str, Any]
Callback = Callable[[StreamResponse], Awaitable[None] | None]


class _Seen:
    """Ids seen recently: bounded, with an expiry."""

    def __init__(self, size: int, ttl: float) -> None:
        self.size = size
        self.ttl = ttl
        self._items: collections.OrderedDict[str, float] = collections.OrderedDict()

    def __contains__(self, key: str) -> bool:
        expiry = self._items.get(key)
        if expiry is None:
            return False
        if expiry < time.monotonic():
            del self._items[key]
            return False
        return True

    def add(self, key: str) -> None:
        self._items[key] = time.monotonic() + self.ttl
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def _task_id(event: StreamResponse) -> str:
    payload = event.payload
    if event.task is not None:
        return event.task.id
    return str(getattr(payload, "task_id", ""))


class WebhookReceiver:
    """ASGI app: verify, dedupe and hand push notifications to ``callback`` (see the module docstring).

    >>> async def on_event(event):
    ...     print(event.payload)
    >>> app = WebhookReceiver(on_event, token="per-task-secret")   # uvicorn module:app
    """

    def __init__(
        self,
        callback: Callback,
        *,
        jwks_url: str | None = None,
        keys: Any = None,
        token: str | None = None,
        authorization: str | None = None,
        issuer: str | None = None,
        max_age: float = 300.0,
        leeway: float = 5.0,
        max_body: int = 10 * 1024 * 1024,
        dedupe_size: int = 100_000,
        dedupe_ttl: float = 86400.0,
        jwks_refresh: float = 300.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if jwks_url is not None and keys is not None:
            raise ValueError("give keys or jwks_url, not both")
        self.callback = callback
        self.jwks_url = jwks_url
        self.keys = keys
        self.token = token
        self.authorization = authorization
        self.issuer = issuer
        self.max_age = max_age
        self.leeway = leeway
        self.max_body = max_body
        self.jwks_refresh = jwks_refresh
        self.signed = jwks_url is not None or keys is not None
        self._http = http
        self._own_http = http is None
        self._jwks: Any = None
        self._jwks_at = -1e9
        self._forced_at = -1e9  # the last refetch for an unknown kid (rate-limited: unknown kids are cheap to send)
        self._jwks_lock = asyncio.Lock()
        self._jtis = _Seen(dedupe_size, max_age + 2 * leeway)
        self._events = _Seen(dedupe_size, dedupe_ttl)
        self._busy: set[str] = set()
        self.received = 0  # notifications handed to the callback
        self.duplicates = 0  # notifications acknowledged as already seen

    # --- ASGI ----------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await self._answer(send, 405, "only POST is accepted", [(b"allow", b"POST")])
            return
        body = await self._body(scope, receive)
        if body is None:
            await self._answer(send, 413, f"body larger than {self.max_body} bytes")
            return
        status, message = await self.handle(scope["headers"], body)
        await self._answer(send, status, message)

    async def _lifespan(self, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _body(self, scope: Scope, receive: Callable[[], Awaitable[Any]]) -> bytes | None:
        length = header_value(scope["headers"], "content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    async def _answer(send: Any, status: int, error: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
        body = b"{}" if status == 200 else json.dumps({"error": error}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
        await send({"type": "http.response.body", "body": body})

    # --- the checks ----------------------------------------------------------------------------------------

    async def handle(self, headers: Any, body: bytes) -> tuple[int, str]:
        """Check and process one notification; ``(HTTP status, error message)``."""
        if self.token is not None:
            given = header_value(headers, "x-a2a-notification-token") or ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return 401, "wrong or missing X-A2A-Notification-Token"
        if self.authorization is not None:
            given = header_value(headers, "authorization") or ""
            if not hmac.compare_digest(given.encode(), self.authorization.encode()):
                return 401, "wrong or missing Authorization"
        claims: dict[str, Any] = {}
        if self.signed:
            try:
                claims = await self._verify(headers, body)
            except SignatureError as exc:
                log.warning("push notification refused: %s", exc)
                return 401, str(exc)
            jti = str(claims.get("jti", ""))
            if jti in self._jtis:
                return 401, "replayed signature (jti seen before)"
            self._jtis.add(jti)
        try:
            event = StreamResponse.model_validate_json(body)
        except ValidationError as exc:
            return 400, f"the body is not a StreamResponse: {exc.errors()[0].get('msg', 'invalid')}"
        if claims and str(claims.get("taskId", "")) != _task_id(event):
            return 401, "the signed taskId is not the body's task"
        event_id = str(claims.get("eventId") or header_value(headers, "x-relaykit-event-id") or "")
        if event_id and (event_id in self._events or event_id in self._busy):
            self.duplicates += 1
            return 200, ""
        if event_id:
            self._busy.add(event_id)
        try:
            result = self.callback(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("push notification callback failed")
            return 500, "the receiver's callback failed"
        finally:
            self._busy.discard(event_id)
        if event_id:
            self._events.add(event_id)
        self.received += 1
        return 200, ""

    async def _verify(self, headers: Any, body: bytes) -> dict[str, Any]:
        keys = self.keys if self.keys is not None else await self._fetch_jwks(force=False)
        try:
            return verify_request(headers, body, keys, issuer=self.issuer, max_age=self.max_age, leeway=self.leeway)
        except SignatureError as exc:
            if self.jwks_url is None or "no key with kid" not in str(exc):
                raise
        # A kid we don't know yet: the sender may have rotated keys. Refetch (at most every few seconds) and retry.
        keys = await self._fetch_jwks(force=True)
        return verify_request(headers, body, keys, issuer=self.issuer, max_age=self.max_age, leeway=self.leeway)

    async def _fetch_jwks(self, *, force: bool) -> Any:
        assert self.jwks_url is not None
        async with self._jwks_lock:
            now = time.monotonic()
            if self._jwks is not None:
                if force and now - self._forced_at < 5.0:
                    return self._jwks
                if not force and now - self._jwks_at < self.jwks_refresh:
                    return self._jwks
            if force:
                self._forced_at = now
            if self._http is None:
                self._http = httpx.AsyncClient(timeout=10.0)
            try:
                response = await self._http.get(self.jwks_url)
                response.raise_for_status()
                self._jwks = response.json()
                self._jwks_at = time.monotonic()
            except (httpx.HTTPError, ValueError) as exc:
                if self._jwks is None:
                    raise SignatureError(f"cannot fetch the JWKS from {self.jwks_url}: {exc}") from None
                log.warning("cannot refresh the JWKS from %s: %s", self.jwks_url, exc)
            return self._jwks

    async def aclose(self) -> None:
        """Close the HTTP client used for the JWKS."""
        if self._http is not None and self._own_http:
            await self._http.aclose()
            self._http = None
