"""The span tree of send, stream, cancel and a push delivery on every binding (JSON-RPC, HTTP+JSON, gRPC; A2A 1.0 and
0.3), read from the OpenTelemetry SDK's in-memory exporter; and telemetry off means no span and no hook at all."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from otel_helpers import LLM_TRACER, Served, Spans, demo, new_telemetry, serve_agent, webhook

from relaykit.assembly import assemble
from relaykit.client import Client, TraceContext
from relaykit.types import Task, TaskPushNotificationConfig, TaskState

BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
BINDING_NAME = {"JSONRPC": "jsonrpc", "HTTP+JSON": "rest", "GRPC": "grpc"}
SECRET_TEXT = "top-secret-prompt"


def _one(spans: list[ReadableSpan], name: str, **attributes: Any) -> ReadableSpan:
    found = [s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())]
    assert len(found) == 1, (name, attributes, [(s.name, dict(s.attributes)) for s in spans])
    return found[0]


def _children(spans: list[ReadableSpan], parent: ReadableSpan, name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id and s.name == name]


def _no_content(spans: list[ReadableSpan]) -> None:
    for span in spans:
        for value in span.attributes.values():
            assert SECRET_TEXT not in str(value), span.name


async def _client(served: Served, binding: str) -> Client:
    client = Client(served.url, transports=[binding], interceptors=[TraceContext()])
    await client.connect()
    return client


@pytest.mark.parametrize("binding", BINDINGS)
async def test_send_is_one_trace_from_the_client_span(spans: Spans, binding: str) -> None:
    tracer = spans.provider.get_tracer("test")
    async with serve_agent(new_telemetry(spans)) as served:
        client = await _client(served, binding)
        try:
            with tracer.start_as_current_span("caller", kind=SpanKind.CLIENT) as caller:
                task = await client.send(SECRET_TEXT)
        finally:
            await client.aclose()
    assert isinstance(task, Task)
    finished = spans.finished()
    _no_content(finished)
    server = _one(finished, "SendMessage")
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None
    assert server.parent.span_id == caller.get_span_context().span_id
    assert server.context.trace_id == caller.get_span_context().trace_id
    assert server.attributes["a2a.operation"] == "SendMessage"
    assert server.attributes["a2a.binding"] == BINDING_NAME[binding]
    assert server.attributes["a2a.protocol.version"] == "1.0"
    assert server.attributes["a2a.task.id"] == task.id
    assert server.attributes["a2a.context.id"] == task.context_id
    assert server.attributes["a2a.task.state"] == "COMPLETED"
    [execute] = _children(finished, server, "a2a.execute")
    assert execute.attributes["a2a.task.id"] == task.id
    assert execute.attributes["a2a.task.state"] == "COMPLETED"
    assert _children(finished, execute, "a2a.store.write")
    assert _children(finished, execute, "a2a.bus.publish")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_stream_span_covers_the_stream(spans: Spans, binding: str) -> None:
    async with serve_agent(new_telemetry(spans)) as served:
        client = await _client(served, binding)
        try:
            events = [event async for event in client.stream("stream 20")]
        finally:
            await client.aclose()
    assert len(events) >= 21
    finished = spans.finished()
    server = _one(finished, "SendStreamingMessage")
    assert server.kind is SpanKind.SERVER
    assert server.attributes["a2a.binding"] == BINDING_NAME[binding]
    assert server.attributes["a2a.task.state"] == "COMPLETED"
    [execute] = _children(finished, server, "a2a.execute")
    assert execute.end_time is not None
    assert server.end_time is not None
    assert execute.end_time <= server.end_time  # the stream's span ends after the execution's last event
    # artifact chunks get no span each: the publishes traced are the state changes
    assert len(_children(finished, execute, "a2a.bus.publish")) < 10


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_span_and_the_canceled_execution(spans: Spans, binding: str) -> None:
    async with serve_agent(new_telemetry(spans)) as served:
        client = await _client(served, binding)
        try:
            task = await client.send("slow", return_immediately=True)
            assert isinstance(task, Task)
            canceled = await client.cancel(task.id)
        finally:
            await client.aclose()
    assert canceled.status.state is TaskState.CANCELED
    finished = spans.finished()
    cancel = _one(finished, "CancelTask")
    assert cancel.attributes["a2a.task.id"] == task.id
    assert cancel.attributes["a2a.task.state"] == "CANCELED"
    send = _one(finished, "SendMessage")
    [execute] = _children(finished, send, "a2a.execute")
    assert execute.attributes["a2a.task.state"] == "CANCELED"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_push_delivery_is_a_child_of_the_execution_and_carries_traceparent(spans: Spans, binding: str) -> None:
    async with webhook() as hook, serve_agent(new_telemetry(spans)) as served:
        client = await _client(served, binding)
        try:
            config = TaskPushNotificationConfig(url=hook.url, token="tok-123")
            task = await client.send("hello", push=config)
        finally:
            await client.aclose()
        received = await hook.wait_for(1)
        await served.server.push_sender.drained()
    assert isinstance(task, Task)
    finished = spans.finished()
    server = _one(finished, "SendMessage")
    [execute] = _children(finished, server, "a2a.execute")
    deliveries = [s for s in finished if s.name == "a2a.push.deliver"]
    assert deliveries, [(s.name, dict(s.attributes)) for s in finished]
    for span in deliveries:
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None
        assert span.parent.span_id == execute.context.span_id
        assert span.attributes["a2a.task.id"] == task.id
    headers, _body = received[0]
    _version, trace_id, span_id, _flags = headers["traceparent"].split("-")
    assert int(trace_id, 16) == server.context.trace_id
    assert int(span_id, 16) in {s.context.span_id for s in deliveries}


async def test_v03_requests_are_spans_of_the_same_operations(spans: Spans) -> None:
    async with serve_agent(new_telemetry(spans)) as served, httpx.AsyncClient() as http:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {"message": {"role": "user", "messageId": "m-1", "parts": [{"kind": "text", "text": "hi"}]}},
        }
        reply = await http.post(served.url + "/", json=body)
        assert reply.status_code == 200, reply.text
        missing = await http.post(
            served.url + "/", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "nope"}}
        )
        assert "error" in missing.json()
    finished = spans.finished()
    send = _one(finished, "SendMessage")
    assert send.attributes["a2a.protocol.version"] == "0.3"
    assert send.attributes["a2a.task.state"] == "COMPLETED"
    get = _one(finished, "GetTask")
    assert get.attributes["a2a.error.code"] == "-32001"


async def test_v03_grpc_calls_are_the_same_server_spans(spans: Spans) -> None:
    """The 0.3 gRPC service (``a2a.v1.A2AService``) is served inside the same spans as 1.0: one SERVER span per
    call, named by the operation, with binding ``grpc`` and protocol version ``0.3``, the execution under it, and
    the caller's trace continued (the client's TraceContext interceptor speaks gRPC metadata on 0.3 too)."""
    tracer = spans.provider.get_tracer("test")
    async with serve_agent(new_telemetry(spans)) as served:
        client = Client(served.url, transports=["GRPC"], protocol_version="0.3", interceptors=[TraceContext()])
        async with client:
            with tracer.start_as_current_span("caller", kind=SpanKind.CLIENT) as caller:
                task = await client.send(SECRET_TEXT)
            events = [event async for event in client.stream("stream 3")]
            slow = await client.send("slow", return_immediately=True)
            assert isinstance(slow, Task)
            subscription = client.subscribe(slow.id)
            first = await anext(subscription)  # the task as it stands: the subscription is open
            canceled = await client.cancel(slow.id)
            rest = [event async for event in subscription]
    assert isinstance(first, Task)
    assert rest
    assert isinstance(task, Task)
    assert len(events) >= 4
    assert canceled.status.state is TaskState.CANCELED
    finished = spans.finished()
    _no_content(finished)
    server = [s for s in finished if s.kind is SpanKind.SERVER]
    assert {s.attributes["a2a.binding"] for s in server} == {"grpc"}
    assert {s.attributes["a2a.protocol.version"] for s in server} == {"0.3"}
    send = _one(finished, "SendMessage", **{"a2a.task.id": task.id})
    assert send.kind is SpanKind.SERVER
    assert send.attributes["a2a.operation"] == send.attributes["rpc.method"] == "SendMessage"
    assert send.attributes["rpc.system"] == "a2a"
    assert send.attributes["a2a.task.state"] == "COMPLETED"
    assert send.parent is not None
    assert send.parent.span_id == caller.get_span_context().span_id
    [execute] = _children(finished, send, "a2a.execute")
    assert execute.attributes["a2a.task.state"] == "COMPLETED"
    stream = _one(finished, "SendStreamingMessage")
    assert stream.attributes["a2a.task.state"] == "COMPLETED"
    assert _children(finished, stream, "a2a.execute")
    cancel = _one(finished, "CancelTask")
    assert cancel.attributes["a2a.task.id"] == slow.id
    assert cancel.attributes["a2a.task.state"] == "CANCELED"
    # 0.3's TaskSubscription rpc is the SubscribeToTask operation
    subscribe = _one(finished, "SubscribeToTask")
    assert subscribe.attributes["a2a.operation"] == "SubscribeToTask"
    assert subscribe.attributes["a2a.task.state"] == "CANCELED"


@pytest.mark.parametrize("option", [None, False])
def test_off_means_no_telemetry_anywhere(option: bool | None) -> None:
    # No SDK is set up in this process (the tests use providers of their own): the default is off, as is False.
    server = assemble(demo, telemetry=option)
    assert server.telemetry is None
    assert server.handler.telemetry is None
    assert server.engine.telemetry is None
    assert server.push_sender is not None
    assert server.push_sender.telemetry is None
    assert server.metrics_endpoint is False


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_client_makes_client_spans_and_injects_them(spans: Spans, binding: str) -> None:
    # No TraceContext given: with a tracer provider (or a global SDK) the client adds it itself.
    async with (
        serve_agent(new_telemetry(spans)) as served,
        Client(served.url, transports=[binding], tracer_provider=spans.provider) as client,
    ):
        task = await client.send("hello")
        events = [event async for event in client.stream("stream 3")]
    assert isinstance(task, Task)
    assert events
    finished = spans.finished()
    for operation in ("SendMessage", "SendStreamingMessage"):
        [caller] = [s for s in finished if s.name == operation and s.kind is SpanKind.CLIENT]
        [server] = [s for s in finished if s.name == operation and s.kind is SpanKind.SERVER]
        assert caller.attributes["a2a.binding"] == binding.lower()
        assert server.parent is not None
        assert server.parent.span_id == caller.context.span_id
        assert server.context.trace_id == caller.context.trace_id
        assert caller.end_time is not None
        assert server.end_time is not None


def test_a_client_without_an_sdk_makes_no_spans() -> None:
    client = Client("http://127.0.0.1:9")
    assert client._tracer is None
    assert not client.interceptors


async def test_spans_made_inside_the_agent_nest_under_its_execution(spans: Spans) -> None:
    LLM_TRACER[:] = [spans.provider.get_tracer("some-llm-sdk")]
    try:
        async with serve_agent(new_telemetry(spans)) as served, Client(served.url, transports=["JSONRPC"]) as client:
            task = await client.send("llm")
    finally:
        LLM_TRACER.clear()
    assert isinstance(task, Task)
    finished = spans.finished()
    [execute] = [s for s in finished if s.name == "a2a.execute"]
    [llm] = [s for s in finished if s.name == "llm.call"]
    assert llm.parent is not None
    assert llm.parent.span_id == execute.context.span_id
