"""The official a2a-sdk (1.3.0) gRPC client drives a relaykit gRPC server through every operation.

The relaykit server runs in the test's event loop on a real socket (127.0.0.1, kernel-chosen port); the SDK client
is built from relaykit's served card with ``supported_protocol_bindings=["GRPC"]``. relaykit's errors must arrive as
the SDK's own error classes (the SDK maps them only from the ErrorInfo in ``grpc-status-details-bin``). Every wait is
bounded with ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from grpc_test_agents import Interop

from relaykit import _card
from relaykit.auth import APIKeyAuthenticator, Auth
from relaykit.grpc import to_proto

pytestmark = pytest.mark.interop

CALL_TIMEOUT = 20.0
HOOK = "https://hooks.example/a2a"
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


def sdk_card(app: Any) -> AgentCard:
    """relaykit's served card, as the SDK's protobuf AgentCard (bytes over, as on the wire)."""
    card = app.state.relaykit.handler.card
    return AgentCard.FromString(to_proto(card).SerializeToString())


def _with_key(details: Any) -> Any:
    return details._replace(metadata=[*(details.metadata or ()), ("x-api-key", SDK_KEY)])


class _APIKey(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Sends the served agent's API key with every unary call (the extended card needs a caller)."""

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_key(details), request)


class _APIKeyStreams(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """The same for streams: one caller, so the tasks it makes are its own on every call."""

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_key(details), request)


SDK_KEY = "sdk-key"


async def sdk_client(app: Any, *, streaming: bool = False) -> Client:
    config = ClientConfig(
        streaming=streaming,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url, interceptors=[_APIKey(), _APIKeyStreams()]),
    )
    return ClientFactory(config).create(sdk_card(app))


def user(text: str, **ids: str) -> Message:
    return Message(message_id=f"m-{text}-{id(ids)}", role=Role.ROLE_USER, parts=[Part(text=text)], **ids)


async def collect(events: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    async with asyncio.timeout(CALL_TIMEOUT):
        return [event async for event in events]


async def send(client: Client, request: SendMessageRequest) -> StreamResponse:
    events = await collect(client.send_message(request))
    assert len(events) == 1
    return events[0]


@pytest.fixture
async def served(grpc_agent: Callable[..., Any]) -> Any:
    extended = _card.AgentCard(name="interop (extended)", description="more skills", version="1.0.0")
    auth = Auth(APIKeyAuthenticator({"sdk": SDK_KEY}), required=False)
    app, _address = await grpc_agent(Interop(), extended_card=extended, grace=0.5, auth=auth)
    return app


async def test_the_card_names_the_grpc_interface(served: Any) -> None:
    card = sdk_card(served)
    bindings = [(i.protocol_binding, i.url) for i in card.supported_interfaces]
    assert bindings[-1][0] == "GRPC"
    assert bindings[-1][1].startswith("127.0.0.1:")


async def test_send_blocking_and_return_immediately(served: Any) -> None:
    client = await sdk_client(served)
    async with client:
        reply = await send(client, SendMessageRequest(message=user("hello")))
        assert reply.WhichOneof("payload") == "task"
        assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert [p.text for a in reply.task.artifacts for p in a.parts] == ["hello"]
        assert reply.task.history[0].parts[0].text == "hello"

        config = SendMessageConfiguration(return_immediately=True)
        quick = await send(client, SendMessageRequest(message=user("hold"), configuration=config))
        assert quick.task.status.state not in TERMINAL
        canceled = await client.cancel_task(CancelTaskRequest(id=quick.task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED

        message = await send(client, SendMessageRequest(message=user("message")))
        assert message.WhichOneof("payload") == "message"
        assert message.message.parts[0].text == "reply to message"
        assert message.message.role == Role.ROLE_AGENT


async def test_stream(served: Any) -> None:
    client = await sdk_client(served, streaming=True)
    async with client:
        events = await collect(client.send_message(SendMessageRequest(message=user("stream 3"))))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    assert kinds.count("artifact_update") == 3
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["chunk 0", "chunk 1", "chunk 2"]
    assert [c.append for c in chunks] == [False, True, True]
    assert chunks[-1].last_chunk
    assert len({c.artifact.artifact_id for c in chunks}) == 1
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_get_with_history_length_and_list(served: Any) -> None:
    client = await sdk_client(served)
    async with client:
        asked = (await send(client, SendMessageRequest(message=user("ask")))).task
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        answer = user("Bob", task_id=asked.id, context_id=asked.context_id)
        done = (await send(client, SendMessageRequest(message=answer))).task
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert done.artifacts[-1].parts[0].text == "got: Bob"

        full = await client.get_task(GetTaskRequest(id=done.id))
        assert len(full.history) >= 2
        assert len((await client.get_task(GetTaskRequest(id=done.id, history_length=0))).history) == 0
        one = await client.get_task(GetTaskRequest(id=done.id, history_length=1))
        assert [m.message_id for m in one.history] == [full.history[-1].message_id]

        page = await client.list_tasks(ListTasksRequest(context_id=asked.context_id, page_size=10))
        assert [task.id for task in page.tasks] == [done.id]
        assert page.total_size == 1
        assert page.next_page_token == ""
        assert not page.tasks[0].artifacts  # includeArtifacts defaults to false
        with_artifacts = await client.list_tasks(
            ListTasksRequest(context_id=asked.context_id, include_artifacts=True, history_length=0)
        )
        assert with_artifacts.tasks[0].artifacts
        assert not with_artifacts.tasks[0].history
        completed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=100))
        assert done.id in [task.id for task in completed.tasks]


async def test_cancel_and_subscribe(served: Any) -> None:
    client = await sdk_client(served, streaming=True)
    async with client:
        config = SendMessageConfiguration(return_immediately=True)
        # With streaming on, the SDK client sends SendStreamingMessage; read its first event (the task) only.
        first: Task | None = None
        async with asyncio.timeout(CALL_TIMEOUT):
            async for event in client.send_message(SendMessageRequest(message=user("hold"), configuration=config)):
                first = event.task if event.HasField("task") else first
                break
        assert first is not None
        subscription = client.subscribe(SubscribeToTaskRequest(id=first.id))
        async with asyncio.timeout(CALL_TIMEOUT):
            snapshot = await anext(subscription)
            assert snapshot.WhichOneof("payload") == "task"
            assert snapshot.task.id == first.id
            assert snapshot.task.status.state == TaskState.TASK_STATE_WORKING
            canceled = await client.cancel_task(CancelTaskRequest(id=first.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            rest = [event async for event in subscription]
        assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED

        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=first.id))
        with pytest.raises(UnsupportedOperationError):
            await collect(client.subscribe(SubscribeToTaskRequest(id=first.id)))


async def test_push_config_crud(served: Any) -> None:
    client = await sdk_client(served)
    async with client:
        task = (await send(client, SendMessageRequest(message=user("hello")))).task
        created = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="p1", url=HOOK, token="tok")
        )
        assert (created.id, created.task_id, created.url, created.token) == ("p1", task.id, HOOK, "tok")
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="p1")
        )
        assert got.url == HOOK
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert [c.id for c in listed.configs] == ["p1"]
        request = DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="p1")
        await client.delete_task_push_notification_config(request)
        await client.delete_task_push_notification_config(request)  # idempotent
        with pytest.raises(TaskNotFoundError):
            await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="p1")
            )


async def test_extended_card(served: Any) -> None:
    client = await sdk_client(served)
    async with client:
        card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert card.name == "interop (extended)"


async def test_extended_card_not_configured(grpc_agent: Callable[..., Any]) -> None:
    declared = _card.AgentCard(
        name="declares", version="1.0.0", capabilities=_card.AgentCapabilities(extended_agent_card=True)
    )
    executor = Interop()
    executor.card = declared  # type: ignore[attr-defined]
    app, _ = await grpc_agent(executor, grace=0.5)
    client = await sdk_client(app)
    async with client:
        with pytest.raises(ExtendedAgentCardNotConfiguredError):
            await client.get_extended_agent_card(GetExtendedAgentCardRequest())


async def test_errors_arrive_as_sdk_error_classes(served: Any) -> None:
    client = await sdk_client(served)
    async with client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(CancelTaskRequest(id="no-such-task"))
        with pytest.raises(InvalidParamsError) as bad:
            await client.get_task(GetTaskRequest(id="x", history_length=-1))
        assert bad.value.data is not None  # the BadRequest field violations reach the SDK
        with pytest.raises(TaskNotFoundError):
            await send(client, SendMessageRequest(message=user("hi", task_id="no-such-task")))
        done = (await send(client, SendMessageRequest(message=user("hello")))).task
        with pytest.raises(UnsupportedOperationError):
            await send(client, SendMessageRequest(message=user("again", task_id=done.id)))
        with pytest.raises(InvalidParamsError):
            await send(client, SendMessageRequest(message=Message(role=Role.ROLE_USER, parts=[Part(text="x")])))
