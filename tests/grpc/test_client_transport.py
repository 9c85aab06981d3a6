"""relaykit's gRPC client transport against relaykit's gRPC server: event ids, resume, metadata, tenants, failures."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest
from grpc_test_agents import Interop

from relaykit._card import AgentCapabilities, AgentCard, AgentExtension, AgentInterface
from relaykit._enums import TaskState
from relaykit._errors import (
    A2AConnectionError,
    A2AError,
    A2AResponseTooLargeError,
    A2ATimeoutError,
    ExtensionSupportRequiredError,
    TaskNotFoundError,
)
from relaykit._methods import OPERATIONS_BY_NAME
from relaykit._requests import GetTaskRequest, SendMessageRequest, SubscribeToTaskRequest
from relaykit._types import Message, Task
from relaykit.client import BearerAuth, Client, RetryPolicy
from relaykit.client._grpc import GrpcTransport

TIMEOUT = 20.0


async def test_stream_yields_the_task_event_ids_and_resumes(grpc_agent: Callable[..., Any]) -> None:
    _app, address = await grpc_agent(Interop(), grace=0.5)
    transport = GrpcTransport(address)
    try:
        async with asyncio.timeout(TIMEOUT):
            events = [
                item
                async for item in transport.stream(
                    OPERATIONS_BY_NAME["SendStreamingMessage"],
                    SendMessageRequest(message=Message.user("stream 3")),
                    headers={},
                )
            ]
            ids = [int(event_id or 0) for event_id, _ in events]
            assert ids == list(range(ids[0], ids[0] + len(events)))
            assert events[-1][1].status_update is not None

            asked = await transport.call(
                OPERATIONS_BY_NAME["SendMessage"], SendMessageRequest(message=Message.user("ask")), headers={}
            )
            task = asked.task
            assert task.status.state is TaskState.INPUT_REQUIRED
            subscribe = OPERATIONS_BY_NAME["SubscribeToTask"]
            plain = transport.stream(subscribe, SubscribeToTaskRequest(id=task.id), headers={})
            snapshot_id, snapshot = await anext(plain)
            assert snapshot.task is not None
            # Resume after the event before the snapshot's: event S comes first (proving the subscription is
            # registered), then exactly what the plain subscription sees.
            before = str(int(snapshot_id or 0) - 1)
            resumed = transport.stream(subscribe, SubscribeToTaskRequest(id=task.id), headers={}, last_event_id=before)
            replayed_id, replayed = await anext(resumed)
            assert replayed_id == snapshot_id
            assert replayed.task is None
            answer = Message.user("Bob", task_id=task.id, context_id=task.context_id)
            await transport.call(OPERATIONS_BY_NAME["SendMessage"], SendMessageRequest(message=answer), headers={})
            after_snapshot = [item async for item in plain]
            after_resume = [item async for item in resumed]
        assert after_resume == after_snapshot
        assert after_resume[0][0] == str(int(snapshot_id or 0) + 1)
    finally:
        await transport.aclose()


async def test_tenant_goes_into_every_request(grpc_agent: Callable[..., Any]) -> None:
    _app, address = await grpc_agent(Interop(), grace=0.5)
    async with (
        Client(transport=GrpcTransport(address, tenant="acme")) as acme,
        Client(transport=GrpcTransport(address)) as default,
    ):
        task = await acme.send("hello")
        assert isinstance(task, Task)
        assert (await acme.get_task(task.id)).id == task.id
        with pytest.raises(TaskNotFoundError):
            await default.get_task(task.id)
        # An explicit tenant in the request wins over the transport's.
        explicit = await default.transport.call(
            OPERATIONS_BY_NAME["GetTask"], GetTaskRequest(id=task.id, tenant="acme"), headers={}
        )
        assert explicit.id == task.id


async def test_headers_travel_as_metadata(grpc_agent: Callable[..., Any]) -> None:
    executor = Interop()
    executor.card = AgentCard(  # type: ignore[attr-defined]
        name="ext",
        version="1.0.0",
        capabilities=AgentCapabilities(extensions=[AgentExtension(uri="urn:a2a:test:required", required=True)]),
    )
    _app, address = await grpc_agent(executor, grace=0.5)
    async with Client(transport=GrpcTransport(address)) as plain:
        with pytest.raises(ExtensionSupportRequiredError):
            await plain.send("hello")
    async with Client(transport=GrpcTransport(address), extensions=["urn:a2a:test:required"]) as activated:
        assert isinstance(await activated.send("hello"), Task)


async def test_unreachable_and_deadline(grpc_agent: Callable[..., Any]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"
    nobody = GrpcTransport(closed, timeout=5.0)
    try:
        with pytest.raises(A2AConnectionError):
            await nobody.call(OPERATIONS_BY_NAME["GetTask"], GetTaskRequest(id="x"), headers={})
    finally:
        await nobody.aclose()
    _app, address = await grpc_agent(Interop(), grace=0.5)
    impatient = GrpcTransport(address, timeout=0.2)
    try:
        with pytest.raises(A2ATimeoutError):
            await impatient.call(
                OPERATIONS_BY_NAME["SendMessage"], SendMessageRequest(message=Message.user("hold")), headers={}
            )
    finally:
        await impatient.aclose()


@pytest.mark.parametrize(
    ("card_url", "interface", "tls"),
    [
        ("HTTPS://127.0.0.1:1", "127.0.0.1:{port}", True),  # a card over HTTPS (scheme in capitals) gives TLS
        ("http://127.0.0.1:1", "grpcs://127.0.0.1:{port}", True),  # the interface's scheme decides
        ("https://127.0.0.1:1", "grpc://127.0.0.1:{port}", False),
    ],
    ids=["https-card", "grpcs-interface", "grpc-interface"],
)
async def test_tls_is_decided_by_the_interface_then_the_card(card_url: str, interface: str, tls: bool) -> None:
    """What the client's first bytes are: a TLS handshake record (0x16) or HTTP/2's plaintext preface. A card URL
    spelled ``HTTPS://`` used to give a plaintext channel, the bearer token in clear; an explicit ``grpc://``
    interface got TLS when the card came over HTTPS (and could not connect)."""
    first: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(64)
        if not first.done():
            first.set_result(data)
        writer.transport.abort()

    async with asyncio.timeout(TIMEOUT):
        listener = await asyncio.start_server(accept, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        grpc_interface = AgentInterface(
            protocol_binding="GRPC", url=interface.format(port=port), protocol_version="1.0"
        )
        card = AgentCard(
            name="tls", description="a gRPC interface", version="1.0.0", supported_interfaces=[grpc_interface]
        )
        client = Client(
            card_url,
            card=card,
            transports=["GRPC"],
            interceptors=[BearerAuth("s3cret")],
            timeout=5.0,
            retry=RetryPolicy(attempts=1),
        )
        try:
            async with client:
                with pytest.raises(A2AError):
                    await client.get_task("t-1")
            sent = await first
        finally:
            listener.close()
            await listener.wait_closed()
    if tls:
        assert sent[:1] == b"\x16", sent
    else:
        assert sent.startswith(b"PRI * HTTP/2.0"), sent


async def test_the_response_bound_applies_to_grpc_unary_and_stream(grpc_agent: Callable[..., Any]) -> None:
    """``max_response_bytes`` bounds a gRPC message as it bounds an HTTP body or an SSE event: the channel's receive
    limit (grpc's own 64 MiB until then), and grpc's RESOURCE_EXHAUSTED for it is ``A2AResponseTooLargeError``."""
    _app, address = await grpc_agent(Interop(), grace=0.5)
    card = AgentCard(
        name="big",
        version="1.0.0",
        supported_interfaces=[AgentInterface(protocol_binding="GRPC", url=address, protocol_version="1.0")],
    )
    big = "x" * 8192  # Interop echoes it: the answer (the task, its history and artifact) is larger still
    async with asyncio.timeout(TIMEOUT):
        async with Client(card=card, transports=["GRPC"], max_response_bytes=4096) as client:
            with pytest.raises(A2AResponseTooLargeError, match="4096"):
                await client.send(big)
            with pytest.raises(A2AResponseTooLargeError):
                async for _ in client.stream(big):
                    pass
            assert isinstance(await client.send("small"), Task)  # under the bound: as before
        async with Client(card=card, transports=["GRPC"]) as roomy:
            assert isinstance(await roomy.send(big), Task)
