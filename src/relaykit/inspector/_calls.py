"""What the inspector's API does with an A2A call: unary operations, streams with their SSE ids, raw requests.

Streams and raw answers go back to the page as NDJSON (one JSON object per line, flushed as it comes), which a
``fetch`` reader renders live: a stream line is ``{"id", "time", "event"}`` (``id`` the agent's SSE id, or null when
the agent does not number its events), then ``{"end": true}`` or ``{"error": …}``. The inspector relays; it never
retries or de-duplicates, so the timeline shows exactly what the agent sent, and resuming is the page's explicit
``SubscribeToTask`` with ``Last-Event-ID``. Answers and events carry the binding and protocol version they went over,
and ``wire``: the JSON as the agent sent it (``_wire``), beside the object the client decoded (always 1.0 ProtoJSON,
also for a 0.3 agent).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from relaykit._errors import A2AError, InvalidParamsError
from relaykit._methods import OPERATIONS_BY_NAME, Operation
from relaykit._model import A2AModel
from relaykit.client import Client
from relaykit.inspector._session import SessionError, error_json
from relaykit.inspector._wire import WireTap

__all__ = ["call", "ndjson", "operation", "raw_request", "stream"]

MAX_RAW_BODY = 10 * 1024 * 1024


def operation(name: Any, *, streaming: bool) -> Operation:
    """The table's operation named ``name`` (unary or streaming as asked)."""
    op = OPERATIONS_BY_NAME.get(str(name))
    if op is None or op.streaming != streaming:
        kind = "streaming" if streaming else "unary"
        raise SessionError(f"not a {kind} A2A operation: {name!r}")
    return op


def request_of(op: Operation, params: Any) -> A2AModel:
    """The operation's request model from the page's ProtoJSON params."""
    try:
        return op.request.model_validate(params if params is not None else {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in exc.errors())
        raise InvalidParamsError(f"{op.name} params are invalid: {problems}") from None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def call(client: Client, op: Operation, params: Any, wire: WireTap | None = None) -> dict[str, Any]:
    """One unary operation through the client's transport; the page's answer (result or error, the time, and the
    body the agent sent when ``wire`` saw it)."""
    request = request_of(op, params)
    if wire is not None:
        wire.reset()
    started = time.perf_counter()
    try:
        result = await client.transport.call(op, request, headers=client.headers)
    except A2AError as exc:
        return {"error": error_json(exc), "ms": _ms(started), **_via(client), **_wire(wire, wire and wire.answer())}
    data = result.to_dict() if isinstance(result, A2AModel) else {}
    answer = {"result": data, "ms": _ms(started), "time": _now(), **_via(client)}
    return {**answer, **_wire(wire, wire and wire.answer())}


def _wire(wire: WireTap | None, sent: Any) -> dict[str, Any]:
    # gRPC goes around the HTTP client: no wire copy, the decoded object is all there is.
    return {"wire": sent} if wire is not None and sent is not None else {}


def _via(client: Client) -> dict[str, str]:
    """The binding and protocol version a call went over (the page shows them with the answer)."""
    return {"binding": client.transport.binding, "version": _version(client)}


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


async def stream(
    client: Client, op: Operation, params: Any, last_event_id: str | None, wire: WireTap | None = None
) -> AsyncIterator[dict[str, Any]]:
    """A streaming operation's events as the agent sent them: SSE id, arrival time, decoded event, and the frame's
    JSON as sent when ``wire`` saw it."""
    request = request_of(op, params)
    if wire is not None:
        wire.reset()
    yield {"start": True, **_via(client), "time": _now(), "lastEventId": last_event_id}
    events = client.transport.stream(op, request, headers=client.headers, last_event_id=last_event_id)
    try:
        async for event_id, response in events:
            frame = wire.next_frame() if wire is not None and client.transport.binding != "GRPC" else None
            yield {"id": event_id, "time": _now(), "event": response.to_dict(), **_wire(wire, frame)}
    except A2AError as exc:
        yield {"error": error_json(exc), "time": _now()}
        return
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
    yield {"end": True, "time": _now()}


async def ndjson(items: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Encode each item as one line; an unexpected failure becomes a last error line, not a cut connection."""
    try:
        async for item in items:
            yield json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    except Exception as exc:
        yield json.dumps({"error": error_json(exc)}).encode() + b"\n"


def _version(client: Client) -> str:
    """The protocol version of the interface the client chose (the session's choice)."""
    return client.interface.protocol_version if client.interface is not None else ""


def _raw_url(client: Client, binding: str, path: str) -> str:
    """Where a raw request goes: the interface of ``binding`` and the session's version on the card (JSON-RPC at its
    URL, REST below it)."""
    assert client.card is not None
    major = (client.protocol_version or "1.0").split(".")[0]
    for interface in client.card.supported_interfaces:
        if interface.protocol_binding.upper() == binding and interface.protocol_version.split(".")[0] == major:
            if binding == "JSONRPC":
                return interface.url
            if not path.startswith("/") or "//" in path or urlsplit(path).scheme or "\\" in path:
                raise SessionError(f"a REST path starts with / and stays on the agent: {path!r}")
            return interface.url.rstrip("/") + path
    raise SessionError(f"the card offers no A2A {client.protocol_version or '1.0'} {binding} interface")


async def raw_request(client: Client, http: httpx.AsyncClient, spec: Any) -> AsyncIterator[dict[str, Any]]:
    """A request written by hand on the console, sent to the card's interface as is; the answer streamed back."""
    if not isinstance(spec, dict):
        raise SessionError("the request is missing")
    binding = str(spec.get("binding", "JSONRPC")).upper()
    if binding not in ("JSONRPC", "HTTP+JSON"):
        raise SessionError("the console speaks JSONRPC and HTTP+JSON")
    method = str(spec.get("method") or ("POST" if binding == "JSONRPC" else "GET")).upper()
    if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        raise SessionError(f"method not allowed: {method}")
    url = _raw_url(client, binding, str(spec.get("path") or "/"))
    body = spec.get("body")
    content = body.encode() if isinstance(body, str) and body.strip() else None
    if content is not None and len(content) > MAX_RAW_BODY:
        raise SessionError("the body is too large")
    # A 0.3 client names no version (the 0.3 rule a dual-stack server reads a request by).
    v03 = (client.protocol_version or "1.0").split(".")[0] == "0"
    headers = {**({} if v03 else {"A2A-Version": "1.0"}), **client.headers}
    if content is not None:
        headers.setdefault("Content-Type", "application/json")
    started = time.perf_counter()
    yield {"request": {"method": method, "url": url, "headers": headers}, "time": _now()}
    try:
        async with http.stream(
            method, url, content=content, headers=headers, timeout=httpx.Timeout(None, connect=5.0)
        ) as response:
            yield {
                "status": response.status_code,
                "headers": [[k, v] for k, v in response.headers.items()],
                "ms": _ms(started),
            }
            async for text in response.aiter_text():
                if text:
                    yield {"chunk": text, "time": _now()}
    except httpx.HTTPError as exc:
        yield {"error": {"type": type(exc).__name__, "message": str(exc) or type(exc).__name__}}
        return
    yield {"end": True, "ms": _ms(started)}
