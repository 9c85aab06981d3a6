"""``Telemetry``: the instruments the bindings, the handler, the engine, the work queue and push delivery call.

The seam is one optional attribute (``telemetry``) on the server, handler, engine and push sender. ``None`` (the
default) means off: each call site is an ``is None`` test and nothing else, so a server without telemetry pays no
allocation and no call per request. On, a ``Telemetry`` does what is configured: spans (when an OpenTelemetry SDK is
set up: ``_otel`` is imported only then), metrics (``Metrics``, rendered at ``/metrics`` and mirrored into the
OpenTelemetry metrics API when a meter provider is set), and the ids the JSON log lines carry.

Invariants:

* a span never carries message content: only operation, binding, protocol version, task id, context id, final
  state and error code;
* the executor runs inside its execution span, whose parent is the request that admitted the message (in another
  process too: the context travels in the work-queue entry), so spans an instrumented SDK makes in the agent nest
  under it;
* a push delivery attempt is a child of the execution that produced the event, and carries ``traceparent``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from contextvars import ContextVar
from typing import Any

from relaykit._errors import A2AError
from relaykit._methods import OPERATIONS
from relaykit._model import Encoded
from relaykit._state import TERMINAL
from relaykit._types import Message, SendMessageResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from relaykit.telemetry._metrics import Metrics

__all__ = ["Telemetry", "current_ids"]

# The request being served by this task (set at the edge, only when telemetry is on).
_CALL: ContextVar[_Call | None] = ContextVar("relaykit_call", default=None)
# The task an execution works on (for log lines), set inside an execution.
_TASK: ContextVar[tuple[str, str] | None] = ContextVar("relaykit_task", default=None)

_PROPAGATED = frozenset({b"traceparent", b"tracestate", b"baggage"})
# handler method -> operation name (SendMessage, ...)
_OPERATION = {op.handler: op.name for op in OPERATIONS}
_FINAL = frozenset(state.name for state in TERMINAL)
_PARKED_MAX = 65536
_RPC_ERROR = re.compile(rb'"error":\{"code":(-?\d+)')
_REST_REASON = re.compile(rb'"reason":"([A-Z_]{1,80})"')
_TASK_FIELDS = re.compile(rb'"task":\{"id":"([^"]{1,200})","contextId":"([^"]{1,200})","status":\{"state":"(\w+)"')


class _Call:
    """What the edge learns about one request while it is served."""

    __slots__ = (
        "binding",
        "context_id",
        "error",
        "first_at",
        "named",
        "operation",
        "request_id",
        "span",
        "started",
        "state",
        "task_id",
        "trace_id",
    )

    def __init__(self, binding: str, operation: str = "") -> None:
        self.binding = binding
        self.operation = operation
        self.task_id = ""
        self.context_id = ""
        self.state = ""
        self.error = ""
        self.span: Any = None
        self.named = False  # the span has its final name and operation attributes since its start
        self.started = time.perf_counter()
        self.first_at = 0.0
        self.request_id = ""  # the caller's X-Request-Id, for log lines
        self.trace_id = ""  # without a tracer: the trace the caller's traceparent names, for log lines

    def note(self, item: Any) -> None:
        """Take the task id, context id and state from a result or a stream event (never its content)."""
        if isinstance(item, SendMessageResponse):
            item = item.task if item.task is not None else item.message
        if isinstance(item, Task):
            self.task_id, self.context_id, self.state = item.id, item.context_id, item.status.state.name
        elif isinstance(item, TaskStatusUpdateEvent):
            self.task_id, self.context_id, self.state = item.task_id, item.context_id, item.status.state.name
        elif isinstance(item, TaskArtifactUpdateEvent):
            self.task_id, self.context_id = item.task_id, item.context_id
        elif isinstance(item, Message):
            self.context_id = item.context_id
            self.state = "MESSAGE"
        elif isinstance(item, Encoded | bytes):
            found = _TASK_FIELDS.search(item.data if isinstance(item, Encoded) else item)
            if found:
                self.task_id, self.context_id = found.group(1).decode(), found.group(2).decode()
                self.state = found.group(3).decode().removeprefix("TASK_STATE_")


_OTEL: list[Any] = []  # the _otel module, or None without the extra (looked up once: a failed import is not cached)


def _otel_module() -> Any:
    if not _OTEL:
        try:
            from relaykit.telemetry import _otel
        except ImportError:
            _OTEL.append(None)
        else:
            _OTEL.append(_otel)
    return _OTEL[0]


def current_ids() -> dict[str, str]:
    """``task_id``, ``context_id``, ``request_id``, ``trace_id``, ``span_id`` where known (for log lines)."""
    out: dict[str, str] = {}
    task = _TASK.get()
    call = _CALL.get()
    if call is not None and call.request_id:
        out["request_id"] = call.request_id
    if task is not None:
        out["task_id"], out["context_id"] = task
    elif call is not None and call.task_id:
        out["task_id"] = call.task_id
        if call.context_id:
            out["context_id"] = call.context_id
    otel = _otel_module()
    found = otel.ids() if otel is not None else None
    if found is not None:
        out["trace_id"], out["span_id"] = found
    elif call is not None and call.trace_id:
        out["trace_id"] = call.trace_id  # the caller's, from its traceparent: no span of ours to name
    return out


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def _traceparent_trace_id(value: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header value (None when malformed, or the invalid all-zero id)."""
    if not value:
        return None
    found = _TRACEPARENT.fullmatch(value.strip())
    if found is None or found.group(1) == "0" * 32:
        return None
    return found.group(1)


_NO_SPAN = contextlib.nullcontext()


class _Watched:
    """A stream of ``(seq, event, data)`` items, noting its first and last event on the request (``pending`` kept, so
    the SSE writer still batches). Only those two: the first names the task, the last carries the final state, and a
    1,000-chunk stream should not pay 1,000 notes."""

    __slots__ = ("call", "items", "last", "metrics", "telemetry")

    def __init__(self, items: AsyncIterator[Any], call: _Call | None, telemetry: Telemetry) -> None:
        self.items = items
        self.call = call
        self.last: Any = None
        self.metrics = telemetry.metrics
        self.telemetry: Telemetry | None = telemetry
        telemetry.streams += 1

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        call = self.call
        try:
            item = await self.items.__anext__()
        except StopAsyncIteration:
            self._note_last()
            raise
        except A2AError as exc:
            self._note_last()
            if call is not None:
                call.error = str(exc.code) if call.binding == "jsonrpc" else exc.reason
            raise
        if call is not None:
            if not call.first_at:
                call.first_at = time.perf_counter()
                if self.metrics is not None:
                    self.metrics.observe(
                        "a2a.server.stream.time_to_first_event",
                        (call.operation or "stream", call.binding),
                        call.first_at - call.started,
                    )
                call.note(item[1])
            else:
                self.last = item[1]
        return item

    def _note_last(self) -> None:
        if self.last is not None and self.call is not None:
            self.call.note(self.last)
            self.last = None

    def pending(self) -> int:
        pending = getattr(self.items, "pending", None)
        return int(pending()) if pending is not None else 0

    async def aclose(self) -> None:
        self._note_last()
        if self.telemetry is not None:
            self.telemetry.streams -= 1
            self.telemetry = None
        aclose = getattr(self.items, "aclose", None)
        if aclose is not None:
            await aclose()


class Telemetry:
    """Spans (``tracing``: needs OpenTelemetry and an SDK set up) and ``metrics``, for one server.

    ``tracer_provider``: the SDK provider to make spans with (default: the global one, set by the application).
    ``detail``: also a span per store write and per state publish (default: ``RELAYKIT_OTEL_DETAIL``, off).

    >>> t = Telemetry(tracing=False, metrics=Metrics())
    >>> t.tracer is None
    True
    """

    def __init__(
        self, *, tracing: bool, metrics: Metrics | None = None, tracer_provider: Any = None, detail: bool | None = None
    ) -> None:
        self.metrics = metrics
        # Child spans for each store write and state publish: on with ``detail=True`` or RELAYKIT_OTEL_DETAIL=1. Off
        # by default: with the Python SDK each span costs tens of µs, and a send makes several of those writes.
        self.detail = detail if detail is not None else os.environ.get("RELAYKIT_OTEL_DETAIL", "") in ("1", "true")
        self.streams = 0  # open event streams (the subscribers gauge)
        self.tracer: Any = None
        self._otel: Any = None
        self._attributes: dict[tuple[str, str, str], dict[str, str]] = {}
        # task id -> the state it was counted in, for a task this process moved into a state that is not final
        self._parked: dict[str, str] = {}
        if tracing:
            from relaykit.telemetry import _otel

            self._otel = _otel
            self.tracer = _otel.tracer(tracer_provider)

    # --- the edges: one server span and one requests/duration record per request ------------------------------

    def begin(self, binding: str, headers: Any, operation: str = "", version: str = "") -> tuple[_Call, object, object]:
        """Start serving a request: its ``_Call``, made current, and its span (child of the incoming context), with
        what is known now (gRPC knows the operation and version; HTTP learns them while serving) as its start
        attributes."""
        call = _Call(binding, operation)
        span_token: object = None
        if self.tracer is not None:
            otel = self._otel
            parent = otel.extract(headers)
            attributes = self._start_attributes(binding, operation, version)
            call.span = otel.start_span(self.tracer, operation or "A2A", otel.SERVER, parent, attributes)
            call.named = bool(operation and version)
            span_token = otel.attach(call.span, parent)
        else:
            # No span of ours (no SDK, or telemetry off), but the caller's W3C traceparent still names the trace
            # its log lines belong to; its span id is the caller's, so only the trace id is kept.
            call.trace_id = _traceparent_trace_id(headers.get("traceparent")) or ""
        return call, _CALL.set(call), span_token

    def _start_attributes(self, binding: str, operation: str, version: str) -> dict[str, str]:
        key = (binding, operation, version)
        found = self._attributes.get(key)
        if found is None:
            found = {"a2a.binding": binding, "rpc.system": "a2a"}
            if operation:
                found["a2a.operation"] = found["rpc.method"] = operation
            if version:
                found["a2a.protocol.version"] = version
            if len(self._attributes) < 256:  # bounded: operation names come from a fixed table, but be safe
                self._attributes[key] = found
        return found

    def end(self, call: _Call, call_token: object, span_token: object, version: str = "1.0", status: int = 0) -> None:
        operation = call.operation or "unknown"
        outcome = call.error or "ok"
        metrics = self.metrics
        if metrics is not None:
            metrics.add("a2a.server.requests", (operation, call.binding, outcome))
            metrics.observe(
                "a2a.server.request.duration", (operation, call.binding), time.perf_counter() - call.started
            )
        span = call.span
        if span is not None:
            # What the request taught us, in one call (each set_attribute takes the span's lock).
            attributes: dict[str, Any] = {}
            if not call.named:
                span.update_name(operation)
                attributes["a2a.operation"] = attributes["rpc.method"] = operation
                attributes["a2a.protocol.version"] = version
            if status:
                attributes["http.response.status_code"] = status
            if call.task_id:
                attributes["a2a.task.id"] = call.task_id
            if call.context_id:
                attributes["a2a.context.id"] = call.context_id
            if call.state:
                attributes["a2a.task.state"] = call.state
            if call.error:
                attributes["a2a.error.code"] = call.error
                self._otel.fail(span, call.error)
            span.set_attributes(attributes)
            span.end()
            self._otel.detach(span_token)
        _CALL.reset(call_token)  # type: ignore[arg-type]

    async def serve_http(self, binding: str, app: Any, scope: Any, receive: Any, send: Any) -> None:
        """Run an HTTP binding's ASGI app for one request, inside its span."""
        headers: dict[str, str] = {}
        request_id = ""
        for key, value in scope.get("headers", ()):
            if key in _PROPAGATED:  # only what the propagators read (W3C trace context and baggage)
                headers[key.decode("latin-1")] = value.decode("latin-1")
            elif key == b"x-request-id":
                request_id = value.decode("latin-1")[:128]
        call, call_token, span_token = self.begin(binding, headers)
        call.request_id = request_id
        seen: dict[str, Any] = {"status": 0, "head": b""}

        async def watching(message: Any) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body" and not seen["head"]:
                seen["head"] = bytes(message.get("body", b""))[:400]
            await send(message)

        try:
            await app(scope, receive, watching)
        except BaseException:
            call.error = call.error or "INTERNAL_ERROR"
            raise
        finally:
            call.operation = scope.get("relaykit.op", "") or call.operation
            call.task_id = call.task_id or scope.get("relaykit.task", "")
            head: bytes = seen["head"]
            if not call.error:
                error = _RPC_ERROR.search(head) if binding == "jsonrpc" else None
                if error is not None and head.startswith(b'{"jsonrpc"'):
                    call.error = error.group(1).decode()
                elif seen["status"] >= 400:
                    reason = _REST_REASON.search(head)
                    call.error = reason.group(1).decode() if reason else str(seen["status"])
            version = "0.3" if scope.get("relaykit.v03") else "1.0"
            self.end(call, call_token, span_token, version, seen["status"])

    # --- the handler: what the result says about the task ------------------------------------------------------

    async def dispatch(self, method: str, fn: Callable[..., Awaitable[Any]], request: Any, context: Any) -> Any:
        call = _CALL.get()
        if call is not None and not call.operation:
            call.operation = _OPERATION.get(method, method)
        try:
            result = await fn(request, context)
        except A2AError as exc:
            if call is not None:
                call.error = str(exc.code) if call.binding == "jsonrpc" else exc.reason
            raise
        if call is not None:
            if hasattr(result, "__anext__"):
                return self.watch(result, call)
            call.note(result)
        return result

    def watch(self, items: AsyncIterator[Any], call: _Call | None = None, operation: str = "") -> AsyncIterator[Any]:
        """A stream's events pass through, noting the task and its state on the request."""
        call = call or _CALL.get()
        if call is not None and operation and not call.operation:
            call.operation = operation
        return _Watched(items, call, self)

    # --- the engine -------------------------------------------------------------------------------------------

    def capture(self) -> Any:
        """The context a message is admitted in (its execution's parent)."""
        return self._otel.current() if self.tracer is not None else None

    def traceparent(self, ctx: Any) -> str:
        """``ctx``'s W3C traceparent, for a record that outlives the process (a push outbox entry)."""
        return self._otel.traceparent(ctx) if self.tracer is not None and ctx is not None else ""

    async def run_execution(self, execute: Callable[[Any, Any], Awaitable[None]], active: Any, pending: Any) -> None:
        """Run one execution inside its span (parent: the admitting request); count how it ended."""
        span = token = None
        if self.tracer is not None:
            otel = self._otel
            parent = pending.trace
            span = otel.start_span(
                self.tracer,
                "a2a.execute",
                otel.INTERNAL,
                parent,
                {"a2a.task.id": active.task_id, "a2a.context.id": active.context_id},
            )
            token = otel.attach(span, parent)
        task_token = _TASK.set((active.task_id, active.context_id))
        started = time.perf_counter()
        try:
            await execute(active, pending)
        finally:
            task = active.task
            state = task.status.state.name if task is not None else ("MESSAGE" if active.message_mode else "NONE")
            if self.metrics is not None:
                self.metrics.add("a2a.server.executions", (state,))
                self.metrics.observe("a2a.server.execution.duration", (), time.perf_counter() - started)
            _TASK.reset(task_token)
            if span is not None:
                span.set_attribute("a2a.task.state", state)
                span.end()
                self._otel.detach(token)

    def span(self, name: str, task_id: str) -> Any:
        """A child span of the current one (store write, bus publish) with ``detail``; else a shared no-op."""
        if self.tracer is None or not self.detail:
            return _NO_SPAN
        return self._otel.span(self.tracer, name, {"a2a.task.id": task_id})

    def task_state(self, active: Any, state: str) -> None:
        """Move the tasks-by-state gauge when a write changes a task's state: down in the state this process last
        counted it in (on this live task, or parked from an earlier one while not final), up in the new one."""
        metrics = self.metrics
        if metrics is None or active.state_seen == state:
            return
        old = active.state_seen or self._parked.pop(active.task_id, "")
        if old:
            metrics.add("a2a.server.tasks", (old,), -1.0)
        metrics.add("a2a.server.tasks", (state,))
        active.state_seen = state
        if state in _FINAL:
            self._parked.pop(active.task_id, None)
        else:
            # The live task may be dropped from memory (input required, idle) and come back for the next message.
            parked = self._parked
            parked[active.task_id] = state
            if len(parked) > _PARKED_MAX:  # bounded: a task that never comes back is forgotten, oldest first
                del parked[next(iter(parked))]

    # --- the work queue ---------------------------------------------------------------------------------------

    def carrier(self) -> bytes:
        """The current trace context as bytes for a work-queue entry (``b""`` without tracing)."""
        return self._otel.carrier_bytes() if self.tracer is not None else b""

    @contextlib.contextmanager
    def resumed(self, carrier: bytes) -> Iterator[None]:
        """Make the context a work-queue entry carried current (the worker side)."""
        if self.tracer is None or not carrier:
            yield
            return
        ctx = self._otel.from_bytes(carrier)
        if ctx is None:
            yield
            return
        from opentelemetry import context as otel_context

        token = otel_context.attach(ctx)
        try:
            yield
        finally:
            otel_context.detach(token)

    # --- push delivery ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def push_attempt(self, entry: Any, url_host: str, headers: MutableMapping[str, str]) -> Iterator[Any]:
        """One delivery attempt: a client span under the execution that produced the event, its context in
        ``headers`` (``traceparent``)."""
        if self.tracer is None:
            yield None
            return
        otel = self._otel
        parent = entry.trace
        attributes = {"a2a.task.id": entry.task_id, "a2a.push.config.id": entry.config_id, "server.address": url_host}
        if parent is None and entry.traceparent:
            # Resumed from the outbox (after a restart, or taken over from another replica): the stored traceparent
            # keeps the attempt in the trace of the request that produced the event.
            parent = otel.from_traceparent(entry.traceparent)
            attributes["a2a.push.resumed"] = True
        span = otel.start_span(self.tracer, "a2a.push.deliver", otel.CLIENT, parent, attributes)
        token = otel.attach(span, parent)
        try:
            otel.inject(headers)
            yield span
        finally:
            span.end()
            otel.detach(token)

    def push_outcome(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.add("a2a.push.deliveries", (outcome,))
