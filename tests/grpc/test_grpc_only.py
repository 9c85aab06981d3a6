"""A gRPC-only agent: the assembly served by ``GrpcServer`` alone, no HTTP app, on a real socket."""

from __future__ import annotations

import asyncio

from relaykit import agent
from relaykit.assembly import assemble
from relaykit.client import Client
from relaykit.client._grpc import GrpcTransport
from relaykit.grpc import GrpcServer

TIMEOUT = 20.0


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    """Echoes text."""
    return context.text


async def test_the_assembly_serves_over_grpc_without_an_http_app() -> None:
    server = assemble(echo, store="memory", grace=0.5)
    grpc_server = GrpcServer(server, host="127.0.0.1", port=0)
    port = await grpc_server.start()  # starts the assembly's engine too
    try:
        assert server.started
        async with asyncio.timeout(TIMEOUT), Client(transport=GrpcTransport(f"127.0.0.1:{port}")) as client:
            task = await client.send("over gRPC only")
        assert task.artifacts[0].text_content == "over gRPC only"
    finally:
        await grpc_server.stop(0.5)
        await server.stop()
    assert not server.started
