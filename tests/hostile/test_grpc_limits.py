"""gRPC's hostile-load bounds (``relaykit.grpc._server.GRPC_LIMITS``, ``relaykit.grpc._bounds``), on a real socket:
oversize request metadata is refused while the server keeps serving; NaN / Infinity in a Struct and an invalid
``last-event-id`` are InvalidParams, not INTERNAL; a 10 MB message of millions of parts is refused at once, on both
services, while the same server keeps answering."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from relaykit import agent
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit._grpc_gen import a2a_v0_3_pb2 as pb03
from relaykit.assembly import assemble
from relaykit.grpc import GrpcServer

TIMEOUT = 20.0
SEND = "/lf.a2a.v1.A2AService/SendMessage"
SUBSCRIBE = "/lf.a2a.v1.A2AService/SubscribeToTask"


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    """Echoes text."""
    return context.text


def send_request(text: str) -> bytes:
    message = pb.Message(message_id="m-" + text, role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    return pb.SendMessageRequest(message=message).SerializeToString()


async def test_oversize_metadata_is_refused_and_the_server_keeps_serving() -> None:
    server = assemble(echo, store="memory", grace=0.5)
    grpc_server = GrpcServer(server, host="127.0.0.1", port=0)
    port = await grpc_server.start()
    try:
        async with asyncio.timeout(TIMEOUT), grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(SEND)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(send_request("big"), metadata=(("a2a-version", "1.0"), ("x-pad", "x" * 64 * 1024)))
            assert refused.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL)
            answer = await call(send_request("ok"), metadata=(("a2a-version", "1.0"),))
            assert pb.SendMessageResponse.FromString(answer).task.status.state == pb.TASK_STATE_COMPLETED

            # NaN / Infinity in a Struct: refused, as the JSON bindings refuse them (not stored as null).
            for number in (float("nan"), float("inf")):
                message = pb.Message(message_id="m-nan", role=pb.ROLE_USER, parts=[pb.Part(text="x")])
                message.metadata.update({"x": number})
                with pytest.raises(grpc.aio.AioRpcError) as nan:
                    await call(
                        pb.SendMessageRequest(message=message).SerializeToString(), metadata=(("a2a-version", "1.0"),)
                    )
                assert nan.value.code() == grpc.StatusCode.INVALID_ARGUMENT, nan.value.details()

            stream = channel.unary_stream(SUBSCRIBE)
            task_id = pb.SendMessageResponse.FromString(answer).task.id
            for bad in ("9" * 4301, "-1", "9223372036854775808"):  # gRPC clients send ASCII metadata only
                with pytest.raises(grpc.aio.AioRpcError) as invalid:
                    async for _ in stream(
                        pb.SubscribeToTaskRequest(id=task_id).SerializeToString(),
                        metadata=(("a2a-version", "1.0"), ("last-event-id", bad)),
                    ):
                        pass
                assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT, invalid.value.details()
    finally:
        await grpc_server.stop(0.5)
        await server.stop()


async def test_non_finite_numbers_in_a_struct_are_invalid_argument_on_both_services() -> None:
    """What a JSON body cannot carry (a number no double holds reads as infinity there), a protobuf Struct can: NaN
    and ±infinity in metadata or a data part are INVALID_ARGUMENT on the 1.0 and the 0.3 service, and nothing is
    stored. (1.0 goes through relaykit._proto's check; on main 0.3's json_format error was answered INTERNAL.)"""
    server = assemble(echo, store="memory", grace=0.5)
    grpc_server = GrpcServer(server, host="127.0.0.1", port=0, v03=True)
    port = await grpc_server.start()
    try:
        async with asyncio.timeout(TIMEOUT), grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for number in (float("nan"), float("inf"), float("-inf")):
                requests: list[tuple[str, bytes, tuple[tuple[str, str], ...]]] = []
                for where in ("metadata", "data"):
                    message = pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="x")])
                    old = pb03.Message(message_id="m", role=pb03.ROLE_USER, content=[pb03.Part(text="x")])
                    if where == "metadata":
                        message.metadata.update({"x": [1, number]})
                        old.metadata.update({"x": [1, number]})
                    else:
                        message.parts.add().data.struct_value.update({"x": number})
                        old.content.add().data.data.update({"x": number})
                    requests.append((SEND, pb.SendMessageRequest(message=message).SerializeToString(), V1_META))
                    requests.append(
                        ("/a2a.v1.A2AService/SendMessage", pb03.SendMessageRequest(request=old).SerializeToString(), ())
                    )
                for method, request, metadata in requests:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await channel.unary_unary(method)(request, metadata=metadata)
                    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, refused.value.details())
            listed = await channel.unary_unary("/lf.a2a.v1.A2AService/ListTasks")(
                pb.ListTasksRequest().SerializeToString(), metadata=V1_META
            )
            assert list(pb.ListTasksResponse.FromString(listed).tasks) == []
    finally:
        await grpc_server.stop(0.5)
        await server.stop()


V1_META = (("a2a-version", "1.0"),)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(message: Any, name: str, payload: bytes) -> bytes:
    """``payload`` as the length-delimited field ``name`` of a ``message`` class, on the wire."""
    number = message.DESCRIPTOR.fields_by_name[name].number
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def many_parts(v03: bool, count: int) -> bytes:
    """A SendMessageRequest of ``count`` parts ``{text: ""}`` (4 bytes each), built on the wire: ~10 MB for 2.5 M."""
    if v03:
        head = pb03.Message(message_id="m-many", role=pb03.ROLE_USER).SerializeToString()
        part = _field(pb03.Message, "content", pb03.Part(text="").SerializeToString())
        return _field(pb03.SendMessageRequest, "request", head + part * count)
    head = pb.Message(message_id="m-many", role=pb.ROLE_USER).SerializeToString()
    part = _field(pb.Message, "parts", pb.Part(text="").SerializeToString())
    return _field(pb.SendMessageRequest, "message", head + part * count)


def violations(error: grpc.aio.AioRpcError) -> list[str]:
    details = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin")
    assert isinstance(details, bytes), error.trailing_metadata()
    fields: list[str] = []
    for packed in status_pb2.Status.FromString(details).details:
        bad = error_details_pb2.BadRequest()
        if packed.Unpack(bad):
            fields += [v.field for v in bad.field_violations]
    return fields


STALL_BOUND = 1.0  # seconds: main held the loop 9.5 s (1.0) and ~10 s (0.3) decoding this request
PARTS = 2_500_000


@pytest.mark.parametrize(
    ("v03", "method"),
    [
        (False, "/lf.a2a.v1.A2AService/SendMessage"),
        (False, "/lf.a2a.v1.A2AService/SendStreamingMessage"),
        (True, "/a2a.v1.A2AService/SendMessage"),
        (True, "/a2a.v1.A2AService/SendStreamingMessage"),
    ],
)
async def test_a_message_of_millions_of_parts_is_refused_without_stalling_the_server(v03: bool, method: str) -> None:
    """10 MB of 2.5 M empty parts: INVALID_ARGUMENT naming the field, at once, without decoding the parts on the
    event loop, so a GetTask sent meanwhile is answered; a large message of a few big parts is still served."""
    big = many_parts(v03, PARTS)
    assert 9_000_000 < len(big) < 10 * 1024 * 1024
    server = assemble(echo, store="memory", grace=0.5)
    grpc_server = GrpcServer(server, host="127.0.0.1", port=0, v03=True)
    port = await grpc_server.start()
    metadata = () if v03 else (("a2a-version", "1.0"),)
    try:
        async with asyncio.timeout(TIMEOUT), grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            send = channel.unary_unary(SEND)
            first = await send(send_request("first"), metadata=(("a2a-version", "1.0"),))
            answer = pb.SendMessageResponse.FromString(first)
            get_task = channel.unary_unary("/lf.a2a.v1.A2AService/GetTask")
            probe_request = pb.GetTaskRequest(id=answer.task.id).SerializeToString()

            async def call_big() -> None:
                if method.endswith("Streaming"):
                    async for _ in channel.unary_stream(method)(big, metadata=metadata):
                        pass
                else:
                    await channel.unary_unary(method)(big, metadata=metadata)

            async def refused() -> grpc.aio.AioRpcError:
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await call_big()
                return error.value

            started = time.monotonic()
            big_call = asyncio.ensure_future(refused())
            latencies: list[float] = []
            for _ in range(10_000):  # GetTask back to back while the big request is being refused
                if big_call.done():
                    break
                t = time.monotonic()
                await get_task(probe_request, metadata=(("a2a-version", "1.0"),))
                latencies.append(time.monotonic() - t)
            error = await big_call
            took = time.monotonic() - started

            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
            field = "request.content" if v03 else "message.parts"  # the parts, as each version's client names them
            assert field in error.details(), error.details()
            [named] = violations(error)
            assert named.startswith(field), named  # the field read past the cap: message.parts.text, say
            assert took < STALL_BOUND * 2, f"refused after {took:.2f} s"
            assert latencies, "no GetTask was sent while the big request was in flight"
            assert max(latencies) < STALL_BOUND, f"GetTask waited {max(latencies):.2f} s"

            # A large request of one big part takes the same path (a thread) and is served as before.
            text = "x" * (1024 * 1024)  # the answer holds it twice (history, artifact): under the client's 4 MiB
            large = pb.Message(message_id="m-large", role=pb.ROLE_USER, parts=[pb.Part(text=text)])
            request = pb.SendMessageRequest(message=large).SerializeToString()
            ok = pb.SendMessageResponse.FromString(await send(request, metadata=(("a2a-version", "1.0"),)))
            assert ok.task.artifacts[0].parts[0].text == text
    finally:
        await grpc_server.stop(0.5)
        await server.stop()
