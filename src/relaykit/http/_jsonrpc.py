"""JSON-RPC 2.0 binding (``POST /``), generated from the operation table.

Wire choices (digest §3.3, §9): errors travel with HTTP 200 except a body over the limit (413, per CONTRACT) and
authentication (401 + ``WWW-Authenticate``) and authorization (403) refusals, which carry the JSON-RPC error body too;
batches are refused with -32600; a streaming call's errors before the first event are plain JSON-RPC responses,
later ones an SSE ``event: error`` frame; ``DeleteTaskPushNotificationConfig`` answers ``{}``
(google.protobuf.Empty; the official SDK sends ``null``, which relaykit's client also accepts).

A2A 0.3's streaming methods (``message/stream``, ``tasks/resubscribe``) are the exception: a 0.3 client reads their
answer as SSE only (a2a-sdk 0.3 reports anything else as an "invalid SSE response" and loses the error), and 0.3
servers send such an error as the stream's one event. So every error after the method is read, whether from the
checks before the handler (params, version, required extensions) or from the handler, goes out that way, with HTTP
200; the 401 / 403 refusals stay plain HTTP responses, which clients and proxies must see as such.
"""

from __future__ import annotations

import logging
from typing import Any

import pydantic_core
from pydantic import ValidationError

from relaykit._errors import (
    A2AError,
    AuthenticationRequiredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    VersionNotSupportedError,
    invalid_params,
)
from relaykit._input import OFF_LOOP_BYTES, decode_json, decode_small_json, parse_event_id
from relaykit._methods import OPERATIONS_BY_NAME, Operation
from relaykit._model import A2AModel, Encoded
from relaykit._principal import ANONYMOUS_PRINCIPAL
from relaykit._v03 import _rpc as v03
from relaykit.http._asgi import (
    Receive,
    Scope,
    Send,
    auth_headers,
    authenticate,
    call_context,
    check_json_content_type,
    extension_headers,
    header,
    query_params,
    read_body,
    request_version,
    retry_after,
    send_bytes,
    stream_sse,
    tag_request,
)
from relaykit.server._context import CallContext
from relaykit.server._handler import RequestHandler

__all__ = ["JSONRPCBinding", "last_event_id"]

log = logging.getLogger("relaykit.jsonrpc")

_JSON = b"application/json"
_EMPTY = b"{}"


def last_event_id(scope: Scope) -> int | None:
    """The resume point of a subscription: ``Last-Event-ID`` header, or ``lastEventId`` query parameter."""
    raw = header(scope, b"last-event-id")
    text = raw.decode("latin-1").strip() if raw is not None else ""
    if text:
        return parse_event_id(text)
    for key, value in query_params(scope):
        if key == "lastEventId":
            text = value.strip()
    return parse_event_id(text, "lastEventId")


class JSONRPCBinding:
    """The ASGI endpoint for JSON-RPC 2.0 requests."""

    def __init__(
        self,
        handler: RequestHandler,
        *,
        max_body: int = 10 * 1024 * 1024,
        keepalive: float = 15.0,
        v03: bool = False,
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        self.keepalive = keepalive
        # Serve A2A 0.3 too: requests without A2A-Version (or with 0.3) go through the 0.3 codec.
        self.v03 = v03

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid: Any = None
        # For the errors only (read there, so an answered request pays nothing for them): the decoded envelope, whose
        # 0.3 streaming method makes them an SSE event (module docstring), unless the request turned out to be 1.0;
        # the 0.3 request's operation, for the 0.3 form of its errors; the call, for the extensions to echo.
        envelope: Any = None
        v10 = False
        op03 = ""
        call: CallContext | None = None
        try:
            auth = self.handler.auth
            if not auth.authenticators and "user" not in scope:
                principal = ANONYMOUS_PRINCIPAL  # no auth configured and no middleware: no coroutine for it
            else:
                # Who is calling is decided before the body is decoded: an unauthenticated caller gets 401 whatever
                # it sends, and never makes the server parse a large body (as on the REST binding).
                try:
                    principal = await authenticate(scope, auth, "JSONRPC")
                except AuthenticationRequiredError:
                    rid = await self._refused_id(scope, receive)
                    raise
            if scope["method"] != "POST":
                raise InvalidRequestError(f"JSON-RPC requests are POSTed (got {scope['method']})")
            check_json_content_type(scope, required=True)
            body = await read_body(scope, receive, self.max_body)
            envelope = decode_small_json(body) if len(body) <= OFF_LOOP_BYTES else await decode_json(body)
            rid = _readable_id(envelope)  # set before the checks, so their errors carry it
            rid, method, params = self._envelope(envelope)
            legacy = request_version(scope, legacy=self.v03) != "1.0"
            v10 = not legacy  # a 1.0 request, whatever it calls its method
            request: A2AModel
            try:
                if legacy:
                    scope["relaykit.v03"] = True  # for the request's span
                    # A2A 0.3 (digest §8): decoded into the 1.0 request (and validated) by the codec here, encoded
                    # back as 0.3 below.
                    op, request = v03_rpc(method, params)
                    op03 = op.name
                else:
                    found = OPERATIONS_BY_NAME.get(method)
                    if found is None:
                        hint = (
                            " (A2A 0.3 method names are not served; use the 1.0 names, e.g. SendMessage)"
                            if "/" in method
                            else ""
                        )
                        raise MethodNotFoundError(f"unknown method {method!r}{hint}", method=method)
                    op = found
                    # The validator itself: model_validate adds a Python-level wrapper (~0.5 µs) and nothing else.
                    request = op.request.__pydantic_validator__.validate_python(params)
            except ValidationError as exc:
                raise invalid_params(exc) from None
            tag_request(scope, op.name, request)
            if auth.interceptors:
                await auth.authorize(op.name, principal, request)
            call = call_context(scope, getattr(request, "tenant", ""), principal)
            if legacy:
                self.handler.negotiate_extensions(call, header=v03.EXTENSIONS_HEADER)
            else:
                self.handler.negotiate_extensions(call)
            if op.streaming:
                await self._stream(scope, receive, send, op.name, op.handler, request, call, rid, legacy)
                return
            result = await self.handler.dispatch(op.handler, request, call)
            if legacy:
                data = v03.encode_result(op.name, result)
            else:
                encoded = type(result) is Encoded or isinstance(result, A2AModel | Encoded)
                data = result.to_json() if encoded else _EMPTY
            await send_bytes(send, 200, _result(rid, data), _JSON, extension_headers(call, v03=legacy))
        except A2AError as exc:
            if op03:
                exc = v03.error_out(op03, exc)
            await self._error(send, rid, exc, not v10 and _stream03(envelope), call)
        except ConnectionError:
            return
        except Exception:
            log.exception("JSON-RPC request failed")
            await self._error(send, rid, InternalError(), not v10 and _stream03(envelope), call)

    async def _refused_id(self, scope: Scope, receive: Receive) -> Any:
        """The id for a 401's JSON-RPC body, so the client can match it to its call: read from a small body only (a
        large one is not decoded for a caller who is refused anyway), else null."""
        try:
            body = await read_body(scope, receive, OFF_LOOP_BYTES)
            return _readable_id(decode_small_json(body))
        except (A2AError, ConnectionError):
            return None

    @staticmethod
    def _envelope(envelope: Any) -> tuple[Any, str, Any]:
        if isinstance(envelope, list):
            raise InvalidRequestError("batch requests are not supported; send one JSON-RPC request per call")
        if not isinstance(envelope, dict):
            raise InvalidRequestError("a JSON-RPC request is a JSON object")
        rid = envelope.get("id")
        if rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int)):
            raise InvalidRequestError("JSON-RPC id must be a string, a number or null")
        if envelope.get("jsonrpc") != "2.0":
            raise InvalidRequestError('"jsonrpc" must be "2.0"', request_id=str(rid))
        method = envelope.get("method")
        if not isinstance(method, str) or not method:
            raise InvalidRequestError('"method" must be a non-empty string')
        params = envelope.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InvalidParamsError('"params" must be a JSON object (the A2A request message)')
        return rid, method, params

    async def _stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        name: str,
        method: str,
        request: Any,
        call: Any,
        rid: Any,
        legacy: bool = False,
    ) -> None:
        if name == "SubscribeToTask":
            items = await self.handler.subscribe_to_task(request, call, last_event_id(scope))
        else:
            items = await self.handler.dispatch(method, request, call)
        # Pull the first event before answering: an error up to here is an ordinary JSON-RPC error response (for 0.3,
        # the stream's one event: __call__ decides).
        first = await anext(items, None)
        prefix = b'{"jsonrpc":"2.0","id":' + pydantic_core.to_json(rid) + b',"result":'

        encode = v03.encode_event if legacy else None

        def frame(seq: int, data: bytes) -> bytes:
            if encode is not None:  # the 0.3 framing of the same stream
                data = encode(data)
            return b"id: %d\ndata: %b%b}\n\n" % (seq, prefix, data)

        def error_frame(exc: A2AError) -> bytes:
            return b"event: error\ndata: " + _error_body(rid, exc) + b"\n\n"

        await stream_sse(
            receive,
            send,
            first,
            items,
            frame,
            error_frame,
            keepalive=self.keepalive,
            extra_headers=extension_headers(call, v03=legacy),
        )

    async def _error(
        self, send: Send, rid: Any, exc: A2AError, stream03: bool = False, call: CallContext | None = None
    ) -> None:
        # JSON-RPC reports errors in the body with HTTP 200; the exceptions are an oversize body (CONTRACT: 413) and
        # auth refusals, which clients and proxies must see at the HTTP layer (401 + WWW-Authenticate, 403).
        status = exc.http_status if exc.http_status in (401, 403, 413) else 200
        extra = [*auth_headers(exc), *retry_after(exc)]
        if stream03 and status == 200:
            # A 0.3 streaming method: the error as the stream's one event (module docstring).
            if call is not None:
                extra += extension_headers(call, v03=True)
            body = b"data: " + _error_body(rid, exc) + b"\n\n"
            await send_bytes(send, 200, body, b"text/event-stream", extra)
            return
        await send_bytes(send, status, _error_body(rid, exc), _JSON, extra)


def v03_rpc(method: str, params: dict[str, Any]) -> tuple[Operation, A2AModel]:
    """A 0.3 request's operation and 1.0 request; a 1.0 method name without A2A-Version keeps the 1.0 answer."""
    if method in OPERATIONS_BY_NAME:
        raise VersionNotSupportedError(
            f"{method} is an A2A 1.0 method: send A2A-Version: 1.0 (a request without it is A2A 0.3)",
            requested="0.3",
            supported="1.0, 0.3",
        )
    return v03.decode_request(method, params)


def _result(rid: Any, data: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + pydantic_core.to_json(rid) + b',"result":' + data + b"}"


def _error_body(rid: Any, exc: A2AError) -> bytes:
    return pydantic_core.to_json({"jsonrpc": "2.0", "id": rid, "error": exc.to_jsonrpc()})


def _stream03(envelope: Any) -> bool:
    """Whether the request names a 0.3 streaming method (a method that is not a string names none)."""
    method = envelope.get("method") if isinstance(envelope, dict) else None
    return isinstance(method, str) and method in v03.STREAMING_METHODS


def _readable_id(envelope: Any) -> Any:
    """The request's id when it can be read, else ``None``. JSON-RPC 2.0 §5: the response id is the request's; null
    only when it cannot be detected (a parse error, a non-object, an id of the wrong type). A request whose id is fine
    but whose ``jsonrpc`` or ``method`` is wrong gets its id back, so the client can match the error to its call (the
    A2A 0.3 conformance kit requires this)."""
    if isinstance(envelope, dict):
        rid = envelope.get("id")
        if isinstance(rid, str | int) and not isinstance(rid, bool):
            return rid
    return None
