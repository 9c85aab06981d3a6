"""Client transports: one ``call`` method and one ``stream`` method per binding, over the one operation table.

Every transport turns wire errors into the core error classes (``TaskNotFoundError``, …), classified by their
``ErrorInfo.reason`` whatever the HTTP status, and transport failures into ``A2AConnectionError`` /
``A2ATimeoutError``; a 502/503/504 whose body is no A2A error (a proxy's page) becomes ``ServiceUnavailableError``,
which the client's retry policy retries. Streams yield ``(event id or None, StreamResponse)``.

A hostile or broken server cannot make the client hold unbounded memory: a response body, and each SSE event (each
line too), may be ``max_response_bytes`` long (counted as the bytes arrive); beyond it the read stops with
``A2AResponseTooLargeError`` and the connection is closed.

Credentials in a URL never reach a message or a log line (``_urls``): an interface URL's userinfo is sent as the
Basic auth httpx would make of it, the URL without it; every error message shows ``redact_url(url)``, and text
quoted from httpx is ``scrub``bed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pydantic_core
from pydantic import ValidationError

from relaykit._errors import (
    A2AConnectionError,
    A2AError,
    A2AResponseTooLargeError,
    A2ATimeoutError,
    InternalError,
    InvalidAgentResponseError,
    InvalidRequestError,
    MethodNotFoundError,
    PayloadTooLargeError,
    ServiceUnavailableError,
    error_from_jsonrpc,
    error_from_status,
)
from relaykit._ids import new_id
from relaykit._methods import Operation
from relaykit._model import A2AModel
from relaykit._types import StreamResponse
from relaykit._v03 import EXTENSIONS_HEADER
from relaykit._v03 import _rest as rest03
from relaykit._v03 import _rpc as rpc03
from relaykit.client._urls import redact_url, scrub, sendable

__all__ = ["MAX_RESPONSE_BYTES", "ClientTransport", "JSONRPCTransport", "RESTTransport", "StreamEvent"]

StreamEvent = tuple[str | None, StreamResponse]
A2A_VERSION = "1.0"
_RETRYABLE_STATUS = frozenset({502, 503, 504})
# The default bound of one response body, agent card or stream event: far above any sane A2A message, far below what
# would exhaust a client's memory.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


@runtime_checkable
class ClientTransport(Protocol):
    """How a client reaches one agent interface."""

    binding: str

    async def call(self, op: Operation, request: A2AModel, *, headers: Mapping[str, str]) -> Any:
        """One unary operation; returns the decoded response model (``None`` for Empty).

        A transport may also have ``call_received`` (same arguments), returning ``(decoded response, its JSON as
        received)``: the client verifies the extended agent card on that (``_card_trust``); relaykit's transports
        have it, a transport without it has the card checked on the decoded model's JSON."""

    def stream(
        self, op: Operation, request: A2AModel, *, headers: Mapping[str, str], last_event_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        """One streaming operation: ``(event id, StreamResponse)`` pairs until the server closes the stream."""

    async def aclose(self) -> None:
        """Release what the transport owns."""


def _decode(op: Operation, data: Any) -> Any:
    if op.response is None:
        return None
    try:
        return op.response.model_validate(data)
    except ValidationError as exc:
        raise InvalidAgentResponseError(f"the agent's {op.name} response is malformed: {exc}") from None


def describe(exc: Exception) -> str:
    """What went wrong with an HTTP exchange, for an error message: never a header value.

    h11 quotes the offending header in its protocol errors (``Illegal header value b'Bearer <token>\\n'`` for a
    token with a newline), and the CLI prints these messages: a local protocol error is named, not quoted.
    """
    if isinstance(exc, httpx.LocalProtocolError):
        return "the request is not valid HTTP (a header name or value with a control character?)"
    # Any URL httpx quotes (a proxy's, an invalid one) is shown redacted.
    return scrub(str(exc)) or type(exc).__name__


def _transport_error(exc: Exception, url: str) -> A2AError:
    if isinstance(exc, httpx.TimeoutException):
        return A2ATimeoutError(f"{redact_url(url)} did not answer in time ({type(exc).__name__})")
    return A2AConnectionError(f"cannot reach {redact_url(url)}: {describe(exc)}")


def _too_large(url: str, limit: int, what: str) -> A2AResponseTooLargeError:
    return A2AResponseTooLargeError(
        f"{redact_url(url)} sent {what} larger than {limit} bytes (the client's max_response_bytes)"
    )


def _answered(url: str, status: int) -> str:
    return f"{redact_url(url)} answered HTTP {status}"


async def read_body(response: httpx.Response, limit: int, url: str) -> bytes:
    """The whole body of a streamed ``response``, or ``A2AResponseTooLargeError`` once it exceeds ``limit`` bytes
    (decoded bytes: a compressed bomb is stopped too). Raised inside the ``client.stream`` block, it closes the
    connection unread."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise _too_large(url, limit, "a response body")
        chunks.append(chunk)
    return b"".join(chunks)


def _unavailable(status: int, message: str, body: bytes = b"", *, jsonrpc: bool = False) -> A2AError:
    """A 502/503/504 answer: the A2A error its body carries, else a ``ServiceUnavailableError`` (retried).

    Digest §9 #2: errors are classified by ``ErrorInfo.reason``, not by the HTTP code (v1.0.0 servers send
    InvalidAgentResponse as 502), so a typed error in the body is kept as it is: a relaykit server draining sends
    UNAVAILABLE (retried), an InvalidAgentResponse is not retried. A proxy's HTML page, an empty body, or an error
    this client cannot classify (``InternalError``: no known reason or code) is the gateway's unavailability.
    """
    if body:
        try:
            decoded = pydantic_core.from_json(body)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
            err = error_from_jsonrpc(decoded["error"]) if jsonrpc else error_from_status(status, decoded)
            if not isinstance(err, InternalError):
                return err
    return ServiceUnavailableError(message)


async def _sse_lines(response: httpx.Response, limit: int, url: str) -> AsyncGenerator[bytes, None]:
    """The lines of an event stream (without their CRLF / LF / CR ends, as the SSE standard splits them), each at most
    ``limit`` bytes: httpx's own line reader would buffer a line without end for ever.

    Bytes, not text: the line ends are ASCII so they never split a UTF-8 sequence, and the JSON decoder reads bytes.
    """
    # The start of a line whose end has not arrived, in pieces: joined once, when its end comes, so a long line sent
    # in many small chunks costs its length, not its length times the number of chunks.
    pending: list[bytes] = []
    pending_size = 0
    after_cr = False  # the last chunk ended with CR: an LF starting the next one completes that CRLF
    async for chunk in response.aiter_bytes():
        if after_cr:
            after_cr = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        if not chunk:
            continue
        lines = chunk.splitlines()  # bytes.splitlines splits at CRLF, LF and CR only (str's would split at U+2028 too)
        last = chunk[-1]
        rest = b""
        if last == 0x0A or last == 0x0D:
            after_cr = last == 0x0D
        else:
            rest = lines.pop()  # an unfinished line (the whole chunk when it holds no line end)
        if lines:
            if pending:
                pending.append(lines[0])
                lines[0] = b"".join(pending)
                pending, pending_size = [], 0
            for line in lines:
                yield line
        if rest:
            pending.append(rest)
            pending_size += len(rest)
            if pending_size > limit:
                raise _too_large(url, limit, "a stream line")


async def _sse_events(
    response: httpx.Response, limit: int, url: str
) -> AsyncGenerator[tuple[str | None, str | None, bytes], None]:
    """Parse ``text/event-stream``: (id, event name, data) per event; comments and keep-alives skipped. An event's
    data may be ``limit`` bytes in all (``A2AResponseTooLargeError`` beyond).

    An event is dispatched only at its terminating blank line: a connection cut in the middle of a frame must not
    hand a truncated ``data:`` line to the decoder (the stream is resumed from the last complete event instead).
    """
    event_id: str | None = None
    name: str | None = None
    data: list[bytes] = []
    size = 0
    async with contextlib.aclosing(_sse_lines(response, limit, url)) as lines:
        async for line in lines:
            if not line:
                if data:
                    yield event_id, name, b"\n".join(data)
                event_id, name, data, size = None, None, [], 0
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            value = value.removeprefix(b" ")
            if field == b"data":
                size += len(value) + 1
                if size > limit:
                    raise _too_large(url, limit, "a stream event")
                data.append(value)
            elif field == b"id":
                event_id = value.decode("utf-8", "replace")
            elif field == b"event":
                name = value.decode("utf-8", "replace")
    # Bug fix: the incomplete event left at the end of the stream used to be dispatched. The SSE standard discards
    # it ("if the file ends in the middle of an event … the incomplete event is not dispatched"); dispatching it
    # handed half a JSON frame to the decoder (a raw ValueError) when a proxy cut the stream mid-frame.


def _frame_json(data: bytes) -> Any:
    """One SSE ``data`` payload as JSON (an object), or ``InvalidAgentResponseError``."""
    try:
        value = pydantic_core.from_json(data)
    except ValueError:
        raise InvalidAgentResponseError(f"malformed stream event (not JSON): {data[:200]!r}") from None
    if not isinstance(value, dict):
        raise InvalidAgentResponseError(f"malformed stream event (not a JSON object): {data[:200]!r}")
    return value


def _rest_error(status: int, payload: Any, url: str) -> A2AError:
    """A REST error answer as its class. A 404 without a google.rpc.Status body did not come from an A2A handler
    (A2A errors MUST carry an ErrorInfo on REST): it means no such route, so MethodNotFoundError (as a2a-sdk maps
    it), not TaskNotFoundError."""
    has_status = isinstance(payload, dict) and isinstance(payload.get("error"), dict)
    if status == 404 and not has_status:
        return MethodNotFoundError(
            f"{redact_url(url)} answered 404 without an A2A error: no such operation at this URL"
        )
    return error_from_status(status, payload)


def _jsonrpc_error(status: int, envelope: Any) -> A2AError:
    """The error a JSON-RPC answer carries: its ``error`` member, else what its HTTP status says."""
    if isinstance(envelope, dict) and isinstance(envelope.get("error"), dict):
        err = error_from_jsonrpc(envelope["error"])
        # The JSON-RPC code of an oversize body is the generic -32600; the 413 status tells the specific class.
        if status == 413 and type(err) is InvalidRequestError:
            oversize = PayloadTooLargeError(err.message, metadata=err.metadata)
            oversize.details = err.details
            return oversize
        return err
    return error_from_status(status, envelope)


class _HTTPTransport:
    binding = ""

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        *,
        tenant: str = "",
        owns_client: bool = False,
        stream_timeout: httpx.Timeout | None = None,
        v03: bool = False,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.url = url
        # What goes to httpx: the URL without userinfo, which becomes the Basic auth httpx would have derived from it
        # (a client-wide ``auth`` wins, as in httpx), so no log line or request repr shows it (module docstring).
        send_url, basic = sendable(url)
        self._send_url = send_url
        self._auth: httpx.Auth | Any = basic if basic is not None and client.auth is None else httpx.USE_CLIENT_DEFAULT
        # The most one response body or stream event may hold (module docstring).
        self.max_response_bytes = max_response_bytes
        # An A2A 0.3 interface: the same calls, through the 0.3 codec (relaykit._v03), with no A2A-Version header.
        self.v03 = v03
        self.client = client
        self.tenant = tenant
        self.owns_client = owns_client
        # Streams of long-running tasks can be quiet for longer than a unary call may take: they get their own
        # timeout (the client's ``stream_timeout``), the HTTP client's default otherwise.
        self.stream_timeout: httpx.Timeout | Any = (
            stream_timeout if stream_timeout is not None else httpx.USE_CLIENT_DEFAULT
        )

    @property
    def secure(self) -> bool:
        """Whether the connection has TLS (an ``https`` URL)."""
        return self.url[:8].lower() == "https://"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_url(self.url)!r})"

    async def aclose(self) -> None:
        if self.owns_client:
            await self.client.aclose()

    def _headers(self, headers: Mapping[str, str], streaming: bool = False) -> dict[str, str]:
        if self.v03:
            out = {**headers}
            # 0.3 agents read the extensions to activate from X-A2A-Extensions (A2A-Extensions is 1.0's name).
            extensions = out.get("A2A-Extensions")
            if extensions is not None:
                out.setdefault(EXTENSIONS_HEADER, extensions)
        else:
            out = {"A2A-Version": A2A_VERSION, **headers}
        if streaming:
            out["Accept"] = "text/event-stream"
        return out

    def _with_tenant(self, request: A2AModel) -> A2AModel:
        # Digest §5.14: the interface's tenant goes into every request.
        if self.tenant and hasattr(request, "tenant") and not getattr(request, "tenant", ""):
            return request.model_copy(update={"tenant": self.tenant})
        return request

    async def call(self, op: Operation, request: A2AModel, *, headers: Mapping[str, str]) -> Any:
        return self._result(op, await self._exchange(op, request, headers))

    async def call_received(self, op: Operation, request: A2AModel, *, headers: Mapping[str, str]) -> tuple[Any, Any]:
        """``call``, with the JSON answer as received as well (JSON-RPC's ``result``, REST's body; before any 0.3
        reading): what a card verifier checks."""
        received = await self._exchange(op, request, headers)
        return self._result(op, received), received

    def _result(self, op: Operation, received: Any) -> Any:
        raise NotImplementedError  # per binding

    async def _exchange(self, op: Operation, request: A2AModel, headers: Mapping[str, str]) -> Any:
        raise NotImplementedError  # per binding


class JSONRPCTransport(_HTTPTransport):
    """JSON-RPC 2.0 over HTTP (``POST`` to the interface URL); streams as SSE."""

    binding = "JSONRPC"

    def _body(self, op: Operation, request: A2AModel) -> bytes:
        if self.v03:
            method = rpc03.method_name(op.name)
            params = pydantic_core.to_json(rpc03.encode_request(op.name, request))
        else:
            method, params = op.name, self._with_tenant(request).to_json()
        return b'{"jsonrpc":"2.0","id":"%b","method":"%b","params":%b}' % (new_id().encode(), method.encode(), params)

    def _result(self, op: Operation, received: Any) -> Any:
        if self.v03:
            return rpc03.decode_result(op, received)
        return _decode(op, received)

    async def _exchange(self, op: Operation, request: A2AModel, headers: Mapping[str, str]) -> Any:
        """One request; the JSON of its ``result``, or the error its answer carries."""
        try:
            async with self.client.stream(
                "POST",
                self._send_url,
                content=self._body(op, request),
                headers={"Content-Type": "application/json", **self._headers(headers)},
                auth=self._auth,
            ) as response:
                content = await read_body(response, self.max_response_bytes, self.url)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, self.url) from None
        if response.status_code in _RETRYABLE_STATUS:
            message = _answered(self.url, response.status_code)
            raise _unavailable(response.status_code, message, content, jsonrpc=True)
        try:
            envelope = pydantic_core.from_json(content)
        except ValueError:
            raise error_from_status(response.status_code, None) from None
        if not isinstance(envelope, dict):
            raise InvalidAgentResponseError("the agent's JSON-RPC response is not an object")
        # An HTTP error status without a JSON-RPC error (an auth middleware's 401 with its own JSON, say) used to be
        # decoded as a missing result: InvalidAgentResponseError. The status says what happened.
        if isinstance(envelope.get("error"), dict) or response.status_code >= 400:
            raise _jsonrpc_error(response.status_code, envelope)
        return envelope.get("result")

    async def stream(
        self, op: Operation, request: A2AModel, *, headers: Mapping[str, str], last_event_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        extra = {"Content-Type": "application/json", **self._headers(headers, streaming=True)}
        if last_event_id is not None:
            extra["Last-Event-ID"] = last_event_id
        try:
            async with self.client.stream(
                "POST",
                self._send_url,
                content=self._body(op, request),
                headers=extra,
                timeout=self.stream_timeout,
                auth=self._auth,
            ) as response:
                limit = self.max_response_bytes
                if response.status_code in _RETRYABLE_STATUS:
                    message = _answered(self.url, response.status_code)
                    body = await read_body(response, limit, self.url)
                    raise _unavailable(response.status_code, message, body, jsonrpc=True)
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    # An error before the first event is an ordinary JSON-RPC response.
                    body = await read_body(response, limit, self.url)
                    try:
                        envelope = pydantic_core.from_json(body)
                    except ValueError:
                        raise error_from_status(response.status_code, None) from None
                    if isinstance(envelope, dict) and (
                        isinstance(envelope.get("error"), dict) or response.status_code >= 400
                    ):
                        raise _jsonrpc_error(response.status_code, envelope)
                    raise InvalidAgentResponseError("the agent answered a stream request without a stream")
                async with contextlib.aclosing(_sse_events(response, limit, self.url)) as events:
                    async for event_id, _name, data in events:
                        envelope = _frame_json(data)
                        if isinstance(envelope.get("error"), dict):
                            raise error_from_jsonrpc(envelope["error"])
                        result = envelope.get("result")
                        yield event_id, rpc03.decode_event(result) if self.v03 else _decode_stream(result)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, self.url) from None


def _decode_stream(data: Any) -> StreamResponse:
    try:
        return StreamResponse.model_validate(data)
    except ValidationError as exc:
        raise InvalidAgentResponseError(f"malformed stream event: {exc}") from None


class RESTTransport(_HTTPTransport):
    """HTTP+JSON: the routes of the operation table under the interface URL (and ``/{tenant}``)."""

    binding = "HTTP+JSON"

    def _route(self, path: str) -> str:
        """The interface URL with ``path`` appended to its path, its query kept after it (an interface URL may carry
        one, e.g. a gateway's key: the routes go before it, not into it), its fragment dropped (never sent)."""
        base = self._send_url
        if "?" not in base and "#" not in base:
            return base.rstrip("/") + path
        parts = urlsplit(base)
        return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, parts.query, ""))

    def _target(self, op: Operation, request: A2AModel) -> tuple[str, str, bytes | None, dict[str, str]]:
        if self.v03:
            method, path, body03, query = rest03.request_target(op.name, request)
            return method, self._route(path), body03, query
        route = op.routes[0]
        data = self._with_tenant(request).to_dict()
        path = route.path
        for name in ("id", "taskId"):
            token = "{" + name + "}"
            if token in path:
                path = path.replace(token, quote(str(data.pop(name, "")), safe=""))
        tenant = data.pop("tenant", "") or self.tenant
        url = self._route(f"/{tenant}{path}" if tenant else path)
        if route.body:
            return route.method, url, pydantic_core.to_json(data), {}
        params = {k: _query_value(v) for k, v in data.items()}
        return route.method, url, None, params

    def _result(self, op: Operation, received: Any) -> Any:
        if self.v03:
            try:
                return rest03.decode_response(op, received)
            except ValidationError as exc:
                raise InvalidAgentResponseError(f"the agent's 0.3 {op.name} response is malformed: {exc}") from None
        return _decode(op, received)

    async def _exchange(self, op: Operation, request: A2AModel, headers: Mapping[str, str]) -> Any:
        """One request; the JSON of its body, or the error its answer carries."""
        method, url, body, params = self._target(op, request)
        extra = self._headers(headers)
        if body is not None:
            extra["Content-Type"] = "application/json" if self.v03 else "application/a2a+json"
        try:
            async with self.client.stream(
                method, url, content=body, params=params or None, headers=extra, auth=self._auth
            ) as response:
                content = await read_body(response, self.max_response_bytes, url)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, url) from None
        if response.status_code in _RETRYABLE_STATUS:
            raise _unavailable(response.status_code, _answered(url, response.status_code), content)
        try:
            payload = pydantic_core.from_json(content) if content else {}
        except ValueError:
            payload = None
        if response.status_code >= 400:
            raise self._error(response.status_code, payload, url)
        return payload

    def _error(self, status: int, payload: Any, url: str) -> A2AError:
        if self.v03:
            err = rest03.decode_error(status, payload)
            if err is not None:
                return err
        return _rest_error(status, payload, url)

    async def stream(
        self, op: Operation, request: A2AModel, *, headers: Mapping[str, str], last_event_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        method, url, body, params = self._target(op, request)
        extra = self._headers(headers, streaming=True)
        if body is not None:
            extra["Content-Type"] = "application/json" if self.v03 else "application/a2a+json"
        if last_event_id is not None:
            extra["Last-Event-ID"] = last_event_id
        try:
            async with self.client.stream(
                method,
                url,
                content=body,
                params=params or None,
                headers=extra,
                timeout=self.stream_timeout,
                auth=self._auth,
            ) as response:
                limit = self.max_response_bytes
                if response.status_code in _RETRYABLE_STATUS:
                    message = _answered(url, response.status_code)
                    raise _unavailable(response.status_code, message, await read_body(response, limit, url))
                if response.status_code >= 400 or not response.headers.get("content-type", "").startswith(
                    "text/event-stream"
                ):
                    raw = await read_body(response, limit, url)
                    try:
                        payload = pydantic_core.from_json(raw) if raw else None
                    except ValueError:
                        payload = None
                    has_error = isinstance(payload, dict) and isinstance(payload.get("error"), dict)
                    if response.status_code < 400 and not has_error:
                        raise InvalidAgentResponseError("the agent answered a stream request without a stream")
                    raise self._error(response.status_code if response.status_code >= 400 else 500, payload, url)
                async with contextlib.aclosing(_sse_events(response, limit, url)) as events:
                    async for event_id, name, data in events:
                        payload = _frame_json(data)
                        if self.v03:
                            if name == "error":
                                raise self._error(500, payload, url)
                            yield event_id, rest03.decode_event(payload)
                            continue
                        if name == "error" or isinstance(payload.get("error"), dict):
                            error = payload.get("error")
                            code = error.get("code") if isinstance(error, dict) else None
                            raise error_from_status(code if isinstance(code, int) else 500, payload)
                        yield event_id, _decode_stream(payload)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, url) from None


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return value
