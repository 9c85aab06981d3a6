"""gRPC's hostile-load bounds (``relaykit.grpc._server.GRPC_LIMITS``), on a real socket: oversize request metadata
is refused while the server keeps serving; NaN / Infinity in a Struct and an invalid ``last-event-id`` are
InvalidParams, not INTERNAL."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from relaykit import agent
from relaykit._grpc_gen import a2a_pb2 as pb
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
