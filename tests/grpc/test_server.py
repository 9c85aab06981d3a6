"""relaykit's gRPC server on the wire: metadata rules, error details, event ids and resume, health, reflection.

Raw ``grpc.aio`` calls with relaykit's generated messages against an in-process server on a real socket; every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_test_agents import Interop

from relaykit._card import AgentCapabilities, AgentCard, AgentExtension
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit.grpc import FIRST_EVENT_ID, LAST_EVENT_ID, RESUME_FROM, SERVICE_NAME, GrpcServer

TIMEOUT = 20.0
V1 = (("a2a-version", "1.0"),)
Metadata = Sequence[tuple[str, str]]


class Raw:
    """Raw A2AService calls on one channel."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)

    def unary(self, name: str, response: type[Any]) -> Any:
        return self.channel.unary_unary(
            f"/{SERVICE_NAME}/{name}",
            request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
            response_deserializer=response.FromString,
        )

    def stream(self, name: str) -> Any:
        return self.channel.unary_stream(
            f"/{SERVICE_NAME}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.StreamResponse.FromString,
        )

    async def send(self, text: str, metadata: Metadata = V1, **message: Any) -> Any:
        request = pb.SendMessageRequest(
            message=pb.Message(message_id=f"m-{text}", role=pb.ROLE_USER, parts=[pb.Part(text=text)], **message)
        )
        return await self.unary("SendMessage", pb.SendMessageResponse)(request, metadata=metadata, timeout=TIMEOUT)


@pytest.fixture
async def raw(grpc_agent: Callable[..., Any]) -> AsyncIterator[Raw]:
    _app, address = await grpc_agent(Interop(), grace=0.5)
    client = Raw(address)
    yield client
    await client.channel.close()


def details_of(error: grpc.aio.AioRpcError) -> tuple[status_pb2.Status, list[Any]]:
    """The google.rpc.Status in grpc-status-details-bin, and its unpacked details."""
    blob = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(blob)
    unpacked: list[Any] = []
    for item in status.details:
        for cls in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest):
            if item.Is(cls.DESCRIPTOR):
                message = cls()
                item.Unpack(message)
                unpacked.append(message)
    # The SDK client insists the Status repeats the call's code and message.
    assert status.code == error.code().value[0]
    assert status.message == error.details()
    return status, unpacked


def reason_of(error: grpc.aio.AioRpcError) -> str:
    _, unpacked = details_of(error)
    infos = [d for d in unpacked if isinstance(d, error_details_pb2.ErrorInfo)]
    assert len(infos) == 1
    assert infos[0].domain == "a2a-protocol.org"
    return str(infos[0].reason)


@pytest.mark.parametrize("metadata", [(), (("a2a-version", ""),), (("a2a-version", "0.3"),), (("a2a-version", "2.0"),)])
async def test_missing_or_unsupported_version_is_version_not_supported(raw: Raw, metadata: Metadata) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw.send("hello", metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(caught.value) == "VERSION_NOT_SUPPORTED"


async def test_version_with_patch_part_is_accepted(raw: Raw) -> None:
    reply = await raw.send("hello", metadata=(("a2a-version", "1.0.7"),))
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED


async def test_validation_errors_carry_bad_request_details(raw: Raw) -> None:
    request = pb.SendMessageRequest(message=pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text="x")]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw.unary("SendMessage", pb.SendMessageResponse)(request, metadata=V1, timeout=TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, unpacked = details_of(caught.value)
    assert unpacked[0].reason == "INVALID_PARAMS"
    violations = [v.field for d in unpacked if isinstance(d, error_details_pb2.BadRequest) for v in d.field_violations]
    assert violations == ["message.messageId"]


async def test_undecodable_request_is_invalid_argument(raw: Raw) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw.unary("GetTask", pb.Task)(b"\xff\xff\xff", metadata=V1, timeout=TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(caught.value) == "INVALID_PARAMS"


async def test_error_table_status_codes(raw: Raw) -> None:
    get = raw.unary("GetTask", pb.Task)
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await get(pb.GetTaskRequest(id="nope"), metadata=V1, timeout=TIMEOUT)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert reason_of(missing.value) == "TASK_NOT_FOUND"
    done = (await raw.send("hello")).task
    with pytest.raises(grpc.aio.AioRpcError) as not_cancelable:
        await raw.unary("CancelTask", pb.Task)(pb.CancelTaskRequest(id=done.id), metadata=V1, timeout=TIMEOUT)
    assert not_cancelable.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(not_cancelable.value) == "TASK_NOT_CANCELABLE"
    with pytest.raises(grpc.aio.AioRpcError) as terminal:
        await raw.send("again", task_id=done.id)
    assert terminal.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(terminal.value) == "UNSUPPORTED_OPERATION"


async def test_tenant_partitions_tasks(raw: Raw) -> None:
    request = pb.SendMessageRequest(
        tenant="acme", message=pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="hello")])
    )
    task = (await raw.unary("SendMessage", pb.SendMessageResponse)(request, metadata=V1, timeout=TIMEOUT)).task
    get = raw.unary("GetTask", pb.Task)
    assert (await get(pb.GetTaskRequest(tenant="acme", id=task.id), metadata=V1, timeout=TIMEOUT)).id == task.id
    with pytest.raises(grpc.aio.AioRpcError) as other:
        await get(pb.GetTaskRequest(id=task.id), metadata=V1, timeout=TIMEOUT)
    assert other.value.code() == grpc.StatusCode.NOT_FOUND


async def read_stream(call: Any) -> tuple[int, list[Any], int]:
    """(first event id from initial metadata, messages, last event id from trailing metadata)."""
    async with asyncio.timeout(TIMEOUT):
        initial = dict(await call.initial_metadata())
        messages = []
        while (message := await call.read()) is not grpc.aio.EOF:
            messages.append(message)
        trailing = dict(await call.trailing_metadata())
    assert await call.code() == grpc.StatusCode.OK
    return int(initial[FIRST_EVENT_ID]), messages, int(trailing[LAST_EVENT_ID])


async def test_stream_event_ids_are_consecutive(raw: Raw) -> None:
    request = pb.SendMessageRequest(
        message=pb.Message(message_id="s", role=pb.ROLE_USER, parts=[pb.Part(text="stream 4")])
    )
    first, messages, last = await read_stream(raw.stream("SendStreamingMessage")(request, metadata=V1))
    kinds = [m.WhichOneof("payload") for m in messages]
    assert kinds == ["task", *["artifact_update"] * 4, "status_update"]
    assert last == first + len(messages) - 1


async def test_subscribe_resumes_after_last_event_id(raw: Raw) -> None:
    asked = (await raw.send("ask")).task
    assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    subscribe = raw.stream("SubscribeToTask")
    request = pb.SubscribeToTaskRequest(id=asked.id)
    plain = subscribe(request, metadata=V1)
    async with asyncio.timeout(TIMEOUT):
        snapshot = await plain.read()
        snapshot_id = int(dict(await plain.initial_metadata())[FIRST_EVENT_ID])
    assert snapshot.WhichOneof("payload") == "task"
    assert snapshot.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    # Resuming after the event before the snapshot's: exactly event S (no snapshot), then what follows. Reading S
    # first also proves the subscription is registered before the task moves on.
    resumed = subscribe(request, metadata=(*V1, (RESUME_FROM, str(snapshot_id - 1))))
    async with asyncio.timeout(TIMEOUT):
        replayed = await resumed.read()
        assert int(dict(await resumed.initial_metadata())[FIRST_EVENT_ID]) == snapshot_id
    assert replayed.WhichOneof("payload") != "task"
    answer = await raw.send("Bob", task_id=asked.id, context_id=asked.context_id)
    assert answer.task.status.state == pb.TASK_STATE_COMPLETED
    _, plain_rest, plain_last = await read_stream(plain)
    _, resumed_rest, resumed_last = await read_stream(resumed)
    assert [m.SerializeToString() for m in resumed_rest] == [m.SerializeToString() for m in plain_rest]
    assert plain_last == resumed_last == snapshot_id + len(plain_rest)
    assert plain_rest[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    # The task is terminal now. Resuming from its last event: nothing is left, and the call ends at once (OK, no
    # message). From an older event: exactly the events after it, then the end (the finished task's log is kept for
    # resumes, CONTRACT "SSE and resume"). Without a resume point: refused (the final state is GetTask's).
    leftover = subscribe(request, metadata=(*V1, (RESUME_FROM, str(plain_last))))
    async with asyncio.timeout(TIMEOUT):
        assert [message async for message in leftover] == []
        assert await leftover.code() == grpc.StatusCode.OK
    first, late, last = await read_stream(subscribe(request, metadata=(*V1, (RESUME_FROM, str(snapshot_id)))))
    assert [m.SerializeToString() for m in late] == [m.SerializeToString() for m in plain_rest]
    assert (first, last) == (snapshot_id + 1, plain_last)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await read_stream(subscribe(request, metadata=V1))
    assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_resumed_task_opens_its_own_stream_with_the_task_and_subscribers_get_updates(raw: Raw) -> None:
    # A subscription is one Task, then status and artifact updates (spec §3.1.6): the Task that opens the answer's
    # own stream (§5.5) is not sent to the subscriber too. historyLength bounds that Task's history (§5.6).
    asked = (await raw.send("ask")).task
    assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    subscription = raw.stream("SubscribeToTask")(pb.SubscribeToTaskRequest(id=asked.id), metadata=V1)
    async with asyncio.timeout(TIMEOUT):
        snapshot = await subscription.read()
    assert snapshot.WhichOneof("payload") == "task"
    answer = pb.SendMessageRequest(
        message=pb.Message(message_id="m-answer", role=pb.ROLE_USER, parts=[pb.Part(text="Bob")], task_id=asked.id),
        configuration=pb.SendMessageConfiguration(history_length=1),
    )
    _, own, _ = await read_stream(raw.stream("SendStreamingMessage")(answer, metadata=V1))
    assert own[0].WhichOneof("payload") == "task"
    assert own[0].task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert [m.parts[0].text for m in own[0].task.history] == ["Bob"]
    assert [m.WhichOneof("payload") for m in own[1:]] == ["artifact_update", "status_update"]
    _, rest, _ = await read_stream(subscription)
    assert [m.SerializeToString() for m in rest] == [m.SerializeToString() for m in own[1:]]
    assert rest[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_stream_errors_before_the_first_event_end_the_call_without_messages(raw: Raw) -> None:
    call = raw.stream("SubscribeToTask")(pb.SubscribeToTaskRequest(id="nope"), metadata=V1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_stream(call)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert reason_of(caught.value) == "TASK_NOT_FOUND"
    bad_resume = raw.stream("SubscribeToTask")(pb.SubscribeToTaskRequest(id="x"), metadata=(*V1, (RESUME_FROM, "abc")))
    with pytest.raises(grpc.aio.AioRpcError) as invalid:
        await read_stream(bad_resume)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_client_cancelling_a_stream_leaves_the_task_running(raw: Raw) -> None:
    request = pb.SendMessageRequest(message=pb.Message(message_id="h", role=pb.ROLE_USER, parts=[pb.Part(text="hold")]))
    call = raw.stream("SendStreamingMessage")(request, metadata=V1)
    async with asyncio.timeout(TIMEOUT):
        first = await call.read()
        call.cancel()
        task_id = first.task.id
        get = raw.unary("GetTask", pb.Task)
        assert (await get(pb.GetTaskRequest(id=task_id), metadata=V1)).status.state == pb.TASK_STATE_WORKING
        canceled = await raw.unary("CancelTask", pb.Task)(pb.CancelTaskRequest(id=task_id), metadata=V1)
    assert canceled.status.state == pb.TASK_STATE_CANCELED


async def _extension_agent(grpc_agent: Callable[..., Any]) -> Raw:
    """A client of an agent that requires ``urn:a2a:test:required`` and offers ``urn:opt``."""
    executor = Interop()
    executor.card = AgentCard(  # type: ignore[attr-defined]
        name="ext",
        version="1.0.0",
        capabilities=AgentCapabilities(
            extensions=[AgentExtension(uri="urn:a2a:test:required", required=True), AgentExtension(uri="urn:opt")]
        ),
    )
    _app, address = await grpc_agent(executor, grace=0.5)
    return Raw(address)


async def test_extensions_required_and_echoed(grpc_agent: Callable[..., Any]) -> None:
    client = await _extension_agent(grpc_agent)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.send("hello")
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert reason_of(caught.value) == "EXTENSION_SUPPORT_REQUIRED"
        call = client.unary("SendMessage", pb.SendMessageResponse)(
            pb.SendMessageRequest(message=pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])),
            metadata=(*V1, ("a2a-extensions", "urn:a2a:test:required, urn:opt, urn:unknown")),
            timeout=TIMEOUT,
        )
        reply = await call
        assert reply.task.status.state == pb.TASK_STATE_COMPLETED
        assert dict(await call.initial_metadata())["a2a-extensions"] == "urn:a2a:test:required, urn:opt"
    finally:
        await client.channel.close()


async def test_repeated_extension_entries_are_one_list(grpc_agent: Callable[..., Any]) -> None:
    # gRPC metadata follows HTTP/2 fields (RFC 9110 §5.3): the required extension in the second entry counts.
    client = await _extension_agent(grpc_agent)
    try:
        call = client.unary("SendMessage", pb.SendMessageResponse)(
            pb.SendMessageRequest(message=pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])),
            metadata=(*V1, ("a2a-extensions", "urn:opt"), ("a2a-extensions", "urn:a2a:test:required")),
            timeout=TIMEOUT,
        )
        reply = await call
        assert reply.task.status.state == pb.TASK_STATE_COMPLETED
        assert dict(await call.initial_metadata())["a2a-extensions"] == "urn:a2a:test:required, urn:opt"
    finally:
        await client.channel.close()


async def test_push_config_rules_hold_on_grpc_too(raw: Raw) -> None:
    """An empty authentication scheme and an id that no URL path can hold are refused as on the JSON bindings; an id
    with "/" or ":" is kept as it is (the REST binding can address it too)."""
    task_id = (await raw.send("hello")).task.id
    create = raw.unary("CreateTaskPushNotificationConfig", pb.TaskPushNotificationConfig)
    hook = "https://hooks.example.com/a2a"
    for config, field in (
        (pb.TaskPushNotificationConfig(task_id=task_id, url=hook, authentication=pb.AuthenticationInfo()), "scheme"),
        (pb.TaskPushNotificationConfig(task_id=task_id, url=hook, id=".."), "id"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await create(config, metadata=V1, timeout=TIMEOUT)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        _, unpacked = details_of(caught.value)
        fields = [v.field for d in unpacked if isinstance(d, error_details_pb2.BadRequest) for v in d.field_violations]
        assert any(f.endswith(field) for f in fields), fields
    made = await create(
        pb.TaskPushNotificationConfig(task_id=task_id, url=hook, id="a/b:c"), metadata=V1, timeout=TIMEOUT
    )
    assert made.id == "a/b:c"
    get = raw.unary("GetTaskPushNotificationConfig", pb.TaskPushNotificationConfig)
    fetched = await get(
        pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="a/b:c"), metadata=V1, timeout=TIMEOUT
    )
    assert fetched.url == hook


async def test_health_and_reflection(grpc_agent: Callable[..., Any]) -> None:
    app, address = await grpc_agent(Interop(), grace=0.5)
    channel = grpc.aio.insecure_channel(address)
    try:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)

        async def ask(**request: Any) -> Any:
            async with asyncio.timeout(TIMEOUT):
                responses = [
                    r
                    async for r in reflection.ServerReflectionInfo(
                        iter([reflection_pb2.ServerReflectionRequest(**request)])
                    )
                ]
            return responses[0]

        listed = await ask(list_services="")
        names = {s.name for s in listed.list_services_response.service}
        # The A2A 0.3 service (a2a.v1.A2AService) is served beside 1.0 by default (issue 12).
        expected = {
            SERVICE_NAME,
            "a2a.v1.A2AService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }
        assert names == expected
        for symbol in names:
            found = await ask(file_containing_symbol=symbol)
            assert found.WhichOneof("message_response") == "file_descriptor_response", symbol
        found = await ask(file_containing_symbol=SERVICE_NAME)
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(b)
            for b in found.file_descriptor_response.file_descriptor_proto
        ]
        a2a = next(f for f in files if f.package == "lf.a2a.v1")
        assert [m.name for m in a2a.service[0].method][:2] == ["SendMessage", "SendStreamingMessage"]

        server: GrpcServer = app.state.grpc_server
        await server.drain()
        answer = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=TIMEOUT)
        assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await channel.close()


async def test_a_port_taken_by_another_listener_is_one_clear_oserror() -> None:
    # gRPC binds with SO_REUSEPORT, so a port held by a socket without it (any other server) is refused; grpcio says
    # only "Failed to bind", as a RuntimeError in some versions and a 0 return in others: one OSError either way.
    from relaykit.http import create_app

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        app = create_app(Interop(), store="memory")
        server = GrpcServer(app, host="127.0.0.1", port=port)
        try:
            with pytest.raises(OSError, match=rf"cannot serve gRPC on 127\.0\.0\.1:{port}: the port is in use"):
                await server.start()
            assert server.server is None
        finally:
            await app.state.relaykit.stop()
