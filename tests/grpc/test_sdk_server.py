"""relaykit's gRPC client drives an a2a-sdk (1.3.0) gRPC server through every operation.

The SDK server is ``bench/grpc_sdk_peer.py`` in a subprocess (session-scoped). The relaykit ``Client`` is given a
card that lists an unreachable JSON-RPC interface first and the peer's GRPC interface second, and prefers GRPC:
negotiation must pick gRPC (every call succeeding proves it; the JSON-RPC URL refuses connections).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from relaykit._card import AgentCapabilities, AgentCard, AgentInterface
from relaykit._enums import TaskState
from relaykit._errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from relaykit._types import Message, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from relaykit.client import Client
from relaykit.client._grpc import GrpcTransport

pytestmark = pytest.mark.interop

CALL_TIMEOUT = 20.0
HOOK = "https://hooks.example/a2a"


def peer_card(address: str) -> AgentCard:
    return AgentCard(
        name="sdk peer",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=True),
        supported_interfaces=[
            AgentInterface(url="http://127.0.0.1:9/", protocol_binding="JSONRPC"),  # discard port: refuses
            AgentInterface(url=address, protocol_binding="GRPC"),
        ],
    )


@pytest.fixture
async def client(sdk_peer: str) -> AsyncIterator[Client]:
    async with Client(card=peer_card(sdk_peer), transports=["GRPC", "JSONRPC"], timeout=CALL_TIMEOUT) as c:
        yield c


async def test_negotiation_picks_grpc(client: Client, sdk_peer: str) -> None:
    assert client.interface is not None
    assert client.interface.protocol_binding == "GRPC"
    assert isinstance(client.transport, GrpcTransport)
    assert client.transport.target == sdk_peer


async def test_send_blocking_return_immediately_and_get(client: Client) -> None:
    async with asyncio.timeout(CALL_TIMEOUT):
        task = await client.send("hello")
        assert isinstance(task, Task)
        assert task.status.state is TaskState.COMPLETED
        assert [a.text_content for a in task.artifacts] == ["hello"]

        quick = await client.send("hold", return_immediately=True)
        assert isinstance(quick, Task)
        assert not quick.status.state.is_terminal
        assert (await client.cancel(quick.id)).status.state is TaskState.CANCELED

        got = await client.get_task(task.id)
        assert got.id == task.id
        assert got.history
        assert (await client.get_task(task.id, history_length=0)).history == []
        assert len((await client.get_task(task.id, history_length=1)).history) == 1


async def test_stream(client: Client) -> None:
    async with asyncio.timeout(CALL_TIMEOUT):
        events = [event async for event in client.stream("stream 3")]
    assert isinstance(events[0], Task)
    chunks = [e for e in events if isinstance(e, TaskArtifactUpdateEvent)]
    assert [c.artifact.text_content for c in chunks] == ["chunk 0", "chunk 1", "chunk 2"]
    assert [c.append for c in chunks] == [False, True, True]
    assert chunks[-1].last_chunk
    last = events[-1]
    assert isinstance(last, TaskStatusUpdateEvent)
    assert last.status.state is TaskState.COMPLETED


async def test_multi_turn_and_list(client: Client) -> None:
    async with asyncio.timeout(CALL_TIMEOUT):
        asked = await client.send("ask me")
        assert isinstance(asked, Task)
        assert asked.status.state is TaskState.INPUT_REQUIRED
        assert asked.status.message is not None
        assert "name" in asked.status.message.text
        done = await client.send("Bob", task_id=asked.id, context_id=asked.context_id)
        assert isinstance(done, Task)
        assert done.status.state is TaskState.COMPLETED
        assert done.artifacts[-1].text_content == "got: Bob"

        tasks = [t async for t in client.list_tasks(context_id=asked.context_id)]
        assert [t.id for t in tasks] == [done.id]
        pages = [p async for p in client.list_task_pages(page_size=1)]
        assert len(pages) >= 2
        assert all(len(p.tasks) == 1 for p in pages)


async def test_cancel_and_subscribe(client: Client) -> None:
    async with asyncio.timeout(CALL_TIMEOUT):
        task = await client.send("hold", return_immediately=True)
        assert isinstance(task, Task)
        subscription = client.subscribe(task.id)
        snapshot = await anext(subscription)
        assert isinstance(snapshot, Task)
        assert snapshot.status.state is TaskState.WORKING
        canceled = await client.cancel(task.id)
        assert canceled.status.state is TaskState.CANCELED
        rest = [event async for event in subscription]
    assert isinstance(rest[-1], TaskStatusUpdateEvent)
    assert rest[-1].status.state is TaskState.CANCELED
    with pytest.raises(TaskNotCancelableError):
        await client.cancel(task.id)


async def test_push_config_crud(client: Client) -> None:
    async with asyncio.timeout(CALL_TIMEOUT):
        task = await client.send("hello")
        created = await client.create_push_config(task.id, HOOK, token="tok", config_id="p1")
        assert (created.id, created.task_id, created.url, created.token) == ("p1", task.id, HOOK, "tok")
        assert (await client.get_push_config(task.id, "p1")).url == HOOK
        assert [c.id for c in await client.list_push_configs(task.id)] == ["p1"]
        await client.delete_push_config(task.id, "p1")
        assert await client.list_push_configs(task.id) == []
        with pytest.raises(TaskNotFoundError):
            await client.get_push_config(task.id, "p1")


async def test_extended_card(client: Client) -> None:
    async with asyncio.timeout(CALL_TIMEOUT):
        card = await client.extended_card()
    assert card.name == "sdk-grpc-peer (extended)"


async def test_errors_arrive_as_relaykit_error_classes(client: Client) -> None:
    async with asyncio.timeout(CALL_TIMEOUT):
        with pytest.raises(TaskNotFoundError) as missing:
            await client.get_task("no-such-task")
        assert any(d.get("reason") == "TASK_NOT_FOUND" for d in missing.value.details or [])
        done = await client.send("hello")
        with pytest.raises(UnsupportedOperationError):
            async for _ in client.subscribe(done.id):
                pass
        with pytest.raises(TaskNotFoundError):
            await client.send(Message.user("hi", task_id="no-such-task"))
