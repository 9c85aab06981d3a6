"""HTTP+JSON ("REST") binding, its routes compiled from the operation table (every route also under ``/{tenant}``).

Wire choices (digest §3.3, §9): responses are ``application/a2a+json`` (requests may use it or
``application/json``); errors are google.rpc.Status bodies with the table's HTTP status; path variables win over
the body, and hold any character percent-encoded (a request with a ``%`` in its path is routed on the path as sent,
``raw_path``, so an id's ``%2F`` or ``%3A`` is not a separator; a push config id's ":" may also come unencoded, as
no ":verb" route follows it); GET parameters are camelCase query parameters (repeated or comma-separated lists);
SubscribeToTask is served on POST and GET; ``POST …:cancel`` may have an empty body and no Content-Type, but a
Content-Type that is not JSON is refused (415) even with an empty body, so a cross-site form post cannot change state.
Every request is authenticated (``relaykit.auth``) before its body is read: 401 + ``WWW-Authenticate`` when refused.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import unquote

import pydantic_core
from pydantic import ValidationError

from relaykit._errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    MethodNotFoundError,
    invalid_params,
)
from relaykit._input import decode_json
from relaykit._methods import OPERATIONS, Operation
from relaykit._model import A2AModel, Encoded
from relaykit._v03 import EXTENSIONS_HEADER
from relaykit._v03 import _rest as v03
from relaykit.http._asgi import (
    Receive,
    Scope,
    Send,
    auth_headers,
    authenticate,
    call_context,
    check_json_content_type,
    check_version,
    extension_headers,
    query_params,
    read_body,
    request_version,
    retry_after,
    send_bytes,
    stream_sse,
    tag_request,
)
from relaykit.http._jsonrpc import last_event_id
from relaykit.server._handler import RequestHandler

__all__ = ["RESTBinding"]

log = logging.getLogger("relaykit.rest")

A2A_JSON = b"application/a2a+json"
_JSON = b"application/json"  # 0.3's media type
_SEGMENT = re.compile(r"\{(\w+)\}")
# Fields whose query value is a list (ListTasks has none today; kept general for SendMessage-like GETs).
_LIST_FIELDS: frozenset[str] = frozenset({"acceptedOutputModes"})


def _compile(path: str, tenant: bool, colon_last: bool = False) -> re.Pattern[str]:
    # A variable is one path segment. It never holds ":" where a ":verb" route may follow it ("/tasks/{id}" beside
    # "/tasks/{id}:cancel": the verb must not be swallowed); a template's last variable that no route follows with a
    # verb (``colon_last``: the push config id) takes ":" as data, as RFC 3986 allows in a segment.
    template = re.escape(path).replace(r"\{", "{").replace(r"\}", "}")

    def variable(m: re.Match[str]) -> str:
        last = colon_last and m.end() == len(template)
        return f"(?P<{m.group(1)}>{'[^/]+' if last else '[^/:]+'})"

    pattern = _SEGMENT.sub(variable, template)
    if tenant:
        pattern = r"/(?P<tenant>[^/]+)" + pattern
    return re.compile(f"^{pattern}$")


def _colon_last(path: str, paths: list[str]) -> bool:
    """Whether ``path`` ends in a variable that no other template follows with a ``:verb``."""
    return path.endswith("}") and not any(other.startswith(path + ":") for other in paths)


def _encoded_path(raw: bytes, root: str) -> str | None:
    """The request path below ``root`` as sent, still percent-encoded (``raw_path``); None if it cannot be had.

    Routing on it lets a variable hold any character: an id's "/" or ":" arrives as ``%2F`` / ``%3A`` (the client
    encodes a path variable, as google.api.http transcoding does), which the decoded ``path`` can no longer tell
    apart from the separators. The root is matched by its segment count, then checked against the decoded root.
    """
    try:
        text = raw.split(b"?", 1)[0].decode("ascii")
    except UnicodeDecodeError:
        return None
    root = root.rstrip("/")
    if root:
        depth = root.count("/")
        parts = text.split("/", depth + 1)
        if len(parts) < depth + 1 or unquote("/".join(parts[: depth + 1])) != root:
            return None
        text = "/" + parts[depth + 1] if len(parts) > depth + 1 else "/"
    return text


class _Route:
    __slots__ = ("body", "decode", "method", "op", "pattern")

    def __init__(self, op: Operation, method: str, pattern: re.Pattern[str], body: bool, decode: Any = None) -> None:
        self.op = op
        self.method = method
        self.pattern = pattern
        self.body = body
        # A2A 0.3 routes: (params, path params) -> the 1.0 request dict (relaykit._v03._rest).
        self.decode = decode


def _routes() -> list[_Route]:
    plain: list[_Route] = []
    tenanted: list[_Route] = []
    paths = [route.path for op in OPERATIONS for route in op.routes]
    for op in OPERATIONS:
        for route in op.routes:
            colon = _colon_last(route.path, paths)
            plain.append(_Route(op, route.method, _compile(route.path, False, colon), route.body))
            tenanted.append(_Route(op, route.method, _compile(route.path, True, colon), route.body))
    # Suffix routes (":cancel", ":subscribe") are listed before "/tasks/{id}" by construction of the patterns
    # ([^/:] never swallows the suffix), and un-tenanted paths are tried first.
    return plain + tenanted


def _routes_v03() -> list[_Route]:
    paths = [r.path for r in v03.ROUTES]
    return [
        _Route(r.op, r.method, _compile(r.path, False, _colon_last(r.path, paths)), r.body, r.decode)
        for r in v03.ROUTES
    ]


def _query_to_params(scope: Scope) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, value in query_params(scope):
        if key.lower() == "a2a-version" or key == "lastEventId":
            continue
        if key in _LIST_FIELDS:
            params.setdefault(key, []).extend(v for v in value.split(",") if v)
        else:
            params[key] = value
    return params


class RESTBinding:
    """The ASGI app for the HTTP+JSON binding (mount at the interface's URL)."""

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
        self.routes = _routes()
        # A2A 0.3 too: a request under /v1/ without A2A-Version (or with 0.3) takes the 0.3 routes and codec.
        self.routes_v03 = _routes_v03() if v03 else []

    def match(self, method: str, path: str, routes: list[_Route] | None = None) -> tuple[_Route, dict[str, str]] | None:
        allowed = False
        for route in self.routes if routes is None else routes:
            found = route.pattern.match(path)
            if found is None:
                continue
            if route.method == method:
                return route, found.groupdict()
            allowed = True
        if allowed:
            raise MethodNotFoundError(f"{method} is not allowed on {path}", method=method, path=path)
        return None

    def match_encoded(
        self, method: str, raw: bytes, path: str, root: str, routes: list[_Route] | None = None
    ) -> tuple[_Route, dict[str, str]] | None:
        """``match`` for a request whose path was sent percent-encoded (``raw``: ASGI ``raw_path``), its variables
        decoded: an encoded "/" or ":" inside an id stays inside it. The decoded ``path`` is matched instead when the
        raw path does not decode to it (a middleware rewrote ``path``), or matches no route (an encoded letter in a
        route's literal part)."""
        encoded = _encoded_path(raw, root)
        if encoded is not None and unquote(encoded) == path:
            found = self.match(method, encoded, routes)
            if found is not None:
                return found[0], {name: unquote(value) for name, value in found[1].items()}
        return self.match(method, path, routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        legacy = False
        op03 = ""  # the 0.3 request's operation, for the 0.3 form of its errors
        try:
            path = scope.get("path", "/")
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :] or "/"
            # A 0.3 request (digest §8): a /v1/ path without a 1.0 version; with A2A-Version: 1.0, "v1" is a tenant.
            legacy = bool(self.routes_v03) and path.startswith("/v1/") and request_version(scope, legacy=True) != "1.0"
            routes = self.routes_v03 if legacy else None
            raw: bytes | None = scope.get("raw_path")
            if raw is not None and b"%" in raw:
                found = self.match_encoded(scope["method"], raw, path, root, routes)
            else:  # the usual request: nothing was percent-encoded, the decoded path is the path as sent
                found = self.match(scope["method"], path, routes)
            if legacy:
                scope["relaykit.v03"] = True  # for the request's span
            if found is None:
                raise MethodNotFoundError(f"no A2A operation at {scope['method']} {path}", path=path)
            route, path_params = found
            if legacy:
                op03 = route.op.name
            auth = self.handler.auth
            principal = await authenticate(scope, auth, "HTTP+JSON")
            if not legacy:
                check_version(scope)
            params: dict[str, Any] = _query_to_params(scope) if route.method in ("GET", "DELETE") else {}
            if route.body:
                body = await read_body(scope, receive, self.max_body)
                # An empty body may come without a Content-Type, never with a non-JSON one (a cross-site form post).
                check_json_content_type(scope, required=bool(body.strip()))
                if body.strip():
                    check_json_content_type(scope, required=True)
                    decoded = await decode_json(body)
                    if not isinstance(decoded, dict):
                        raise InvalidParamsError("the request body must be a JSON object")
                    params = decoded
            request: A2AModel
            try:
                if route.decode is not None:  # a 0.3 route: its codec translates and validates
                    request = v03.decode_request(route.op, route.decode, params, path_params)
                else:
                    params.update(path_params)
                    request = route.op.request.__pydantic_validator__.validate_python(params)  # = model_validate
            except ValidationError as exc:
                raise invalid_params(exc) from None
            tag_request(scope, route.op.name, request)
            if auth.interceptors:
                await auth.authorize(route.op.name, principal, request)
            call = call_context(scope, path_params.get("tenant", ""), principal)
            if legacy:
                self.handler.negotiate_extensions(call, header=EXTENSIONS_HEADER)
            else:
                self.handler.negotiate_extensions(call)
            op = route.op
            if op.streaming:
                if op.name == "SubscribeToTask":
                    items = await self.handler.subscribe_to_task(request, call, last_event_id(scope))  # type: ignore[arg-type]
                else:
                    items = await self.handler.dispatch(op.handler, request, call)
                first = await anext(items, None)
                await stream_sse(
                    receive,
                    send,
                    first,
                    items,
                    _frame_v03 if legacy else _frame,
                    _error_frame_v03 if legacy else _error_frame,
                    keepalive=self.keepalive,
                    extra_headers=extension_headers(call, v03=legacy),
                )
                return
            result = await self.handler.dispatch(op.handler, request, call)
            if legacy:
                body = v03.encode_result(op.name, result)
                await send_bytes(send, 200, body, _JSON, extension_headers(call, v03=True))
                return
            data = result.to_json() if isinstance(result, A2AModel | Encoded) else b"{}"
            await send_bytes(send, 200, data, A2A_JSON, extension_headers(call))
        except A2AError as exc:
            await _send_error(send, v03.error_out(op03, exc) if op03 else exc, legacy)
        except ConnectionError:
            return
        except Exception:
            log.exception("REST request failed")
            await _send_error(send, InternalError(), legacy)


def _frame(seq: int, data: bytes) -> bytes:
    return b"id: %d\ndata: %b\n\n" % (seq, data)


def _error_frame(exc: A2AError) -> bytes:
    return b"event: error\ndata: " + pydantic_core.to_json(exc.to_status()) + b"\n\n"


def _frame_v03(seq: int, data: bytes) -> bytes:
    return b"id: %d\ndata: %b\n\n" % (seq, v03.encode_event(data))


def _error_frame_v03(exc: A2AError) -> bytes:
    return b"event: error\ndata: " + v03.error_response(exc)[1] + b"\n\n"


async def _send_error(send: Send, exc: A2AError, legacy: bool = False) -> None:
    if legacy:
        status, body = v03.error_response(exc)
        await send_bytes(send, status, body, _JSON, [*auth_headers(exc), *retry_after(exc)])
        return
    await send_bytes(
        send, exc.http_status, pydantic_core.to_json(exc.to_status()), A2A_JSON, [*auth_headers(exc), *retry_after(exc)]
    )
