"""Raw ASGI plumbing shared by the HTTP bindings: bounded body reads, responses, SSE streaming, call context.

The bindings speak ASGI directly (no Request/Response objects on the hot path): one request costs one body read,
one decode into core models, one handler call, one encode. Rules kept here once for both bindings:

* a body over the limit is refused with 413 before it is buffered (Content-Length checked first, then counted);
* ``A2A-Version`` (header, or ``A2A-Version`` query parameter) must be ``1.0`` (a patch part is ignored); missing
  means 0.3 (digest §1): served through the 0.3 codec (``relaykit._v03``) when the app speaks 0.3, otherwise
  VersionNotSupportedError;
* who is calling is decided by the server's one ``relaykit.auth.Auth`` (``authenticate``): headers, the TLS client
  certificate (``relaykit.http._tls``) and a principal a Starlette authentication middleware put in ``scope["user"]``
  go in; a refusal is 401 with ``WWW-Authenticate`` (``auth_headers``), whatever the protocol version;
* SSE: every event carries ``id:`` (the task's event sequence), keep-alive comments go out while idle, and a client
  disconnect stops the stream and releases its tap, but never cancels the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import Headers

from relaykit._errors import (
    A2AError,
    AuthenticationRequiredError,
    InternalError,
    InvalidRequestError,
    PayloadTooLargeError,
    VersionNotSupportedError,
)
from relaykit._principal import ANONYMOUS_PRINCIPAL, Principal
from relaykit.auth._gate import Auth, AuthRequest
from relaykit.http._tls import peer_certificate
from relaykit.server._context import CallContext

__all__ = [
    "ASGIApp",
    "Receive",
    "Scope",
    "Send",
    "UnsupportedMediaTypeError",
    "auth_headers",
    "authenticate",
    "call_context",
    "check_version",
    "read_body",
    "request_version",
    "retry_after",
    "send_bytes",
    "stream_sse",
    "tag_request",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("relaykit.http")

SUPPORTED_VERSIONS = ("1.0",)
JSON_TYPES = (b"application/json", b"application/a2a+json")


class UnsupportedMediaTypeError(InvalidRequestError):
    """The request's Content-Type is not JSON (HTTP 415)."""

    http_status = 415
    default_message = "Content-Type must be application/json or application/a2a+json"


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (``name`` lower-case)."""
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def query_params(scope: Scope) -> list[tuple[str, str]]:
    """The query string as (name, value) pairs, blank values kept."""
    raw: bytes = scope.get("query_string", b"")
    return parse_qsl(raw.decode("latin-1"), keep_blank_values=True) if raw else []


def check_version(scope: Scope) -> None:
    """Enforce ``A2A-Version`` (header or query parameter): 1.0 only."""
    request_version(scope, legacy=False)


def request_version(scope: Scope, *, legacy: bool) -> str:
    """The A2A version a request speaks: ``"1.0"``, or ``"0.3"`` when ``legacy`` (0.3 served) and the version is
    absent (the 1.0 rule: absent means 0.3) or 0.3. Anything else is ``VersionNotSupportedError``."""
    value = header(scope, b"a2a-version")
    if value == b"1.0":
        return "1.0"  # what every 1.0 client sends
    if value is None and scope.get("query_string"):
        for key, val in query_params(scope):
            if key.lower() == "a2a-version":
                value = val.encode()
                break
    text = (value or b"").decode("latin-1").strip()
    supported = "1.0, 0.3" if legacy else "1.0"
    if not text:
        if legacy:
            return "0.3"
        raise VersionNotSupportedError(
            "missing A2A-Version header: this server speaks A2A 1.0 only (send A2A-Version: 1.0)",
            requested="0.3",
            supported=supported,
        )
    major_minor = ".".join(text.split(".")[:2])
    if major_minor in SUPPORTED_VERSIONS:
        return "1.0"
    if legacy and major_minor == "0.3":
        return "0.3"
    raise VersionNotSupportedError(
        f"A2A version {text} is not supported; this server speaks {supported}", requested=text, supported=supported
    )


def check_json_content_type(scope: Scope, *, required: bool) -> None:
    """Refuse a body whose Content-Type is not JSON; ``required=False`` lets an empty, untyped body through."""
    value = header(scope, b"content-type")
    if value is None:
        if required:
            raise UnsupportedMediaTypeError("missing Content-Type: send application/json")
        return
    media = value.split(b";", 1)[0].strip().lower()
    if media not in JSON_TYPES:
        raise UnsupportedMediaTypeError(
            f"Content-Type {media.decode('latin-1')!r} is not supported: send application/json or application/a2a+json"
        )


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing more than ``limit`` bytes."""
    length = header(scope, b"content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLargeError(f"request body of {int(length)} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("client disconnected while sending the body")
        body: bytes = message.get("body", b"")
        if body:
            size += len(body)
            if size > limit:
                raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
            chunks.append(body)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def retry_after(exc: Exception) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` for an error that says when to retry (a quota's ``retryAfter``), else nothing."""
    value = getattr(exc, "metadata", {}).get("retryAfter")
    return [(b"retry-after", value.encode())] if value else []


async def send_bytes(
    send: Send, status: int, body: bytes, content_type: bytes, extra: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """A complete response."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def tag_request(scope: Scope, operation: str, request: Any) -> None:
    """Note the operation and the task it concerns on the scope, for the access line (never any content)."""
    # The field values straight from the model: getattr of a field the type lacks (``task_id`` of a
    # SendMessageRequest) goes through pydantic's ``__getattr__`` and an AttributeError, several µs per request.
    fields: dict[str, Any] = getattr(request, "__dict__", None) or {}
    task_id = fields.get("id" if operation in _TASK_ID_OPS else "task_id") or ""
    if not task_id:
        message = fields.get("message")
        task_id = getattr(message, "task_id", "") if message is not None else ""
    scope["relaykit.op"] = operation
    scope["relaykit.task"] = task_id


_TASK_ID_OPS = frozenset({"GetTask", "CancelTask", "SubscribeToTask"})


def scope_user(scope: Scope) -> Principal | None:
    """The principal a Starlette authentication middleware established (``scope["user"]``), or None.

    Its id is the user's ``identity``, never its display name (two "Alice Smith"s are two people). A user that says it
    is authenticated but has no identity cannot be told apart from others: refused (401), never a 500, never shared.
    """
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    try:
        identity = user.identity
    except (AttributeError, NotImplementedError):
        identity = None
    if not isinstance(identity, str) or not identity:
        log.warning("scope['user'] is authenticated but has no identity (BaseUser.identity): request refused")
        raise AuthenticationRequiredError("the authenticated user has no stable identity")
    return Principal("user", identity)


async def authenticate(scope: Scope, auth: Auth, binding: str) -> Principal:
    """Who is calling (``relaykit.auth.Auth.authenticate``): raises ``AuthenticationRequiredError`` to refuse."""
    if not auth.authenticators and "user" not in scope:
        return ANONYMOUS_PRINCIPAL  # no auth configured and no middleware: the common, cheap case
    request = AuthRequest(
        Headers(raw=scope["headers"]),
        binding=binding,
        peer_cert=lambda: peer_certificate(scope),
        user=scope_user(scope),
    )
    return await auth.authenticate(request)


def auth_headers(exc: A2AError) -> list[tuple[bytes, bytes]]:
    """``WWW-Authenticate`` for a 401 (one per configured scheme; ``Bearer`` when none is known)."""
    if not isinstance(exc, AuthenticationRequiredError):
        return []
    return [(b"www-authenticate", c.encode("latin-1")) for c in exc.www_authenticate()]


def call_context(scope: Scope, tenant: str = "", principal: Principal = ANONYMOUS_PRINCIPAL) -> CallContext:
    """Who is calling (``principal``, from ``authenticate``), the tenant, the requested extensions."""
    requested: frozenset[str] = frozenset()
    # Every A2A-Extensions (or X-A2A-Extensions) line counts: repeated field lines are one comma-separated list
    # (RFC 9110 §5.3). One walk of the headers (the two first-match lookups this replaces walked them twice when
    # neither name was sent, the usual request), and nothing is allocated unless a line is found.
    raw = b""
    for key, value in scope["headers"]:
        if key == b"a2a-extensions" or key == b"x-a2a-extensions":
            raw = value if not raw else raw + b"," + value
    if raw:
        requested = frozenset(part.strip() for part in raw.decode("latin-1").split(",") if part.strip())
    return CallContext(
        user=principal.id,
        tenant=tenant,
        requested_extensions=requested,
        headers=Headers(raw=scope["headers"]),
        principal=principal,
    )


def extension_headers(call: CallContext, *, v03: bool = False) -> list[tuple[bytes, bytes]]:
    """Echo the activated extensions (A2A-Extensions response header), if any; to an A2A 0.3 request (``v03``) in
    0.3's ``X-A2A-Extensions`` too, the header a 0.3 client reads."""
    if not call.activated_extensions:
        return []
    value = ", ".join(sorted(call.activated_extensions)).encode()
    if v03:
        return [(b"a2a-extensions", value), (b"x-a2a-extensions", value)]
    return [(b"a2a-extensions", value)]


SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]

# (seq, event, encoded StreamResponse) in; one complete SSE frame out.
Framer = Callable[[int, bytes], bytes]
ErrorFramer = Callable[[A2AError], bytes]


def _none_pending() -> int:
    return 0


# How a burst of events becomes a few writes. A producer that awaits between events (a framework whose stream hops
# through its own tasks and locks: pydantic-ai takes 4 loop turns per delta) would otherwise hand the writer one
# event per wake, and every write costs more than the frames it carries. So when nothing more is ready the writer
# first gives the producer a few loop turns; if it published meanwhile (a burst), the next waits are one short timer
# each instead of a turn each. A producer that is really waiting (a model's next token) has its frames flushed after
# those few idle turns; no frame waits more than _HOLD for later ones. Frames and their order are unchanged: only
# how many go in one write.
_GRACE_TURNS = 8
_BURST_WAIT = 0.001
_HOLD = 0.01
_MAX_BATCH = 256


async def stream_sse(
    receive: Receive,
    send: Send,
    first: tuple[int, Any, bytes] | None,
    items: AsyncIterator[tuple[int, Any, bytes]],
    frame: Framer,
    error_frame: ErrorFramer,
    *,
    keepalive: float,
    extra_headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Send an SSE response: ``first`` (already pulled, so errors before it were plain responses), then the rest.

    ``first=None``: the stream has no events at all (a resumed subscription with nothing left): an empty response.

    A watcher task listens for the client's disconnect (and sends keep-alive comments while idle); on disconnect
    it cancels only this response's consumption of ``items``, whose ``finally`` releases the tap.
    """
    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra_headers]})
    if first is None:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        return
    state = {"last": asyncio.get_running_loop().time()}
    consumer = asyncio.current_task()
    disconnected = asyncio.Event()

    async def watch() -> None:
        loop = asyncio.get_running_loop()
        while True:
            timeout = max(0.0, state["last"] + keepalive - loop.time())
            try:
                message = await asyncio.wait_for(receive(), timeout)
            except TimeoutError:
                if loop.time() - state["last"] >= keepalive:
                    state["last"] = loop.time()
                    # A whole frame per send: frames from the two senders never interleave mid-frame.
                    await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
                continue
            if message["type"] == "http.disconnect":
                disconnected.set()
                if consumer is not None:
                    consumer.cancel()
                return

    watcher = asyncio.create_task(watch())
    # Frames already waiting are sent in one write (a burst of chunks is one syscall, not one each); the buffer is
    # flushed once nothing more arrives within a few loop turns, or its oldest frame has waited _HOLD.
    pending: Callable[[], int] = getattr(items, "pending", _none_pending)
    loop = asyncio.get_running_loop()
    try:
        await send({"type": "http.response.body", "body": frame(first[0], first[2]), "more_body": True})
        batch: list[bytes] = []
        since = 0.0
        burst = False
        try:
            async for seq, _event, data in items:
                if not batch:
                    since = loop.time()
                batch.append(frame(seq, data))
                if len(batch) < _MAX_BATCH and not pending() and loop.time() - since < _HOLD:
                    if burst:
                        # The producer kept publishing through the last wait: one timer collects its next events,
                        # instead of a loop turn each.
                        await asyncio.sleep(_BURST_WAIT)
                    else:
                        for _ in range(_GRACE_TURNS):
                            await asyncio.sleep(0)
                            if pending():
                                break
                    burst = pending() > 0
                if len(batch) >= _MAX_BATCH or not pending() or loop.time() - since >= _HOLD:
                    state["last"] = loop.time()
                    body = batch[0] if len(batch) == 1 else b"".join(batch)
                    batch.clear()
                    await send({"type": "http.response.body", "body": body, "more_body": True})
        except A2AError as exc:
            batch.append(error_frame(exc))
        except Exception:
            log.exception("stream failed")
            batch.append(error_frame(InternalError()))
        # What is still buffered (the stream ended, or failed, with frames not yet written) goes out last.
        await send({"type": "http.response.body", "body": b"".join(batch), "more_body": False})
    except asyncio.CancelledError:
        if not disconnected.is_set():
            raise
        # The client went away: stop reading events; the task itself runs on.
        uncancel = getattr(asyncio.current_task(), "uncancel", None)
        if uncancel is not None:
            uncancel()
    except OSError:
        pass
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
