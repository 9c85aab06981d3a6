"""The official a2a-sdk client (PyPI, 1.3.0) drives relaykit servers running as separate processes.

Every test runs twice: over JSON-RPC and over HTTP+JSON. The SDK client is built from the relaykit agent card with the
transport forced through ``ClientConfig.supported_protocol_bindings``, and ``test_transport_is_forced`` checks on
the wire that the requested binding is the one used. relaykit's errors must arrive as the SDK's own error types.

The SDK's default per-client httpx timeout is 5 s (notes §3), so each client gets its own ``httpx.AsyncClient`` with a
longer timeout; every wait in the tests is bounded with ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
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
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

pytestmark = [
    pytest.mark.interop,
    pytest.mark.parametrize("binding", [pytest.param("JSONRPC", id="jsonrpc"), pytest.param("HTTP+JSON", id="rest")]),
]

T = TypeVar("T")

CALL_TIMEOUT = 20.0  # bound on any single SDK call
# Never called: push configs are only stored on tasks that are already terminal. A public name: the SSRF guard
# refuses loopback webhooks unless the server allows them (--push-allow).
HOOK_URL = "https://hooks.example.com/a2a"
SUBSCRIBE_SLOW_SECONDS = 3
FUNCTION_AGENT_SECONDS = 3
PROMPT = 2.0  # seconds: a returnImmediately answer arrives well within this
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


# --- servers (one process each, shared by the session) --------------------------------------------------------


@pytest.fixture(scope="session")
def echo_url(relaykit_server: Callable[..., str], sqlite_store: str) -> str:
    # One server on SQLite, so the SDK also talks to a persisting store.
    return relaykit_server("examples/echo.py", store=sqlite_store)


@pytest.fixture(scope="session")
def stream_url(relaykit_server: Callable[..., str]) -> str:
    return relaykit_server("examples/stream.py")


@pytest.fixture(scope="session")
def slow_url(relaykit_server: Callable[..., str]) -> str:
    """slow.py working for 60 s: stays non-terminal for the whole test (each test cancels what it starts)."""
    return relaykit_server("examples/slow.py", env={"SLOW_SECONDS": "60"})


@pytest.fixture(scope="session")
def short_slow_url(relaykit_server: Callable[..., str]) -> str:
    """slow.py working for a few seconds: long enough to subscribe while WORKING, short enough to watch it end."""
    return relaykit_server("examples/slow.py", env={"SLOW_SECONDS": str(SUBSCRIBE_SLOW_SECONDS)})


@pytest.fixture(scope="session")
def function_agent_url(relaykit_server: Callable[..., str]) -> str:
    """An ``@agent`` function (``-> str``) that sleeps before answering (tests/http/_apps.py)."""
    return relaykit_server("tests/http/_apps.py:function_app", env={"SLOW_SECONDS": str(FUNCTION_AGENT_SECONDS)})


@pytest.fixture(scope="session")
def ask_url(relaykit_server: Callable[..., str]) -> str:
    return relaykit_server("examples/ask.py")


@pytest.fixture(scope="session")
def message_only_url(relaykit_server: Callable[..., str]) -> str:
    return relaykit_server("examples/message_only.py")


# --- SDK clients --------------------------------------------------------------------------------------------


@dataclass
class SdkClients:
    """Builds SDK clients for one binding and records every HTTP request they send."""

    binding: str
    requests: list[httpx.Request] = field(default_factory=list)
    opened: list[tuple[Client, httpx.AsyncClient]] = field(default_factory=list)

    async def __call__(self, base_url: str, *, streaming: bool = False) -> Client:
        async def record(request: httpx.Request) -> None:
            self.requests.append(request)

        http = httpx.AsyncClient(timeout=30.0, event_hooks={"request": [record]})
        config = ClientConfig(streaming=streaming, supported_protocol_bindings=[self.binding], httpx_client=http)
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                client = await ClientFactory(config).create_from_url(base_url)
        except BaseException:
            await http.aclose()
            raise
        self.opened.append((client, http))
        return client

    async def close(self) -> None:
        for client, http in self.opened:
            await client.close()
            await http.aclose()


@pytest.fixture
async def sdk(binding: str) -> AsyncIterator[SdkClients]:
    clients = SdkClients(binding)
    try:
        yield clients
    finally:
        await clients.close()


# --- helpers ------------------------------------------------------------------------------------------------


def user_message(text: str, *, task_id: str = "", context_id: str = "") -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


async def bounded(awaitable: Awaitable[T], seconds: float = CALL_TIMEOUT) -> T:
    async with asyncio.timeout(seconds):
        return await awaitable


async def collect(events: AsyncIterator[StreamResponse], seconds: float = CALL_TIMEOUT) -> list[StreamResponse]:
    async with asyncio.timeout(seconds):
        return [event async for event in events]


async def send(client: Client, text: str, seconds: float = CALL_TIMEOUT, **kwargs: Any) -> list[StreamResponse]:
    """Send one message; returns every StreamResponse the SDK yields (one for a unary send)."""
    configuration = kwargs.pop("configuration", None)
    request = SendMessageRequest(message=user_message(text, **kwargs), configuration=configuration)
    return await collect(client.send_message(request), seconds)


async def send_task(client: Client, text: str, **kwargs: Any) -> Task:
    events = await send(client, text, **kwargs)
    assert len(events) == 1, events
    assert events[0].WhichOneof("payload") == "task", events[0]
    return events[0].task


async def start_slow(client: Client, text: str = "work") -> Task:
    """A slow.py task, started with returnImmediately (the answer does not wait for the work)."""
    return await send_task(client, text, configuration=SendMessageConfiguration(return_immediately=True))


def artifact_texts(task: Task) -> list[str]:
    return [part.text for artifact in task.artifacts for part in artifact.parts]


def state_name(state: int) -> str:
    return TaskState.Name(state)


# --- the tests ----------------------------------------------------------------------------------------------


async def test_transport_is_forced(sdk: SdkClients, binding: str, echo_url: str) -> None:
    client = await sdk(echo_url)
    await send_task(client, "which wire?")
    calls = [r for r in sdk.requests if r.url.path != "/.well-known/agent-card.json"]
    assert calls, "the SDK sent no A2A request"
    for request in calls:
        assert request.headers.get("a2a-version") == "1.0"
        if binding == "JSONRPC":
            assert (request.method, request.url.path) == ("POST", "/")
        else:
            assert (request.method, request.url.path) == ("POST", "/message:send")


async def test_blocking_send_returns_completed_echo(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    text = f"hello relaykit {uuid.uuid4()}"
    task = await send_task(client, text)
    assert task.id
    assert task.context_id
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, state_name(task.status.state)
    assert len(task.artifacts) == 1
    assert [p.WhichOneof("content") for p in task.artifacts[0].parts] == ["text"]
    assert artifact_texts(task) == [text]
    # The user's message is in the history the server keeps.
    assert any(m.role == Role.ROLE_USER and m.parts[0].text == text for m in task.history)


async def test_return_immediately_answers_before_the_work_is_done(sdk: SdkClients, slow_url: str) -> None:
    client = await sdk(slow_url)
    started = time.monotonic()
    task = await start_slow(client)
    elapsed = time.monotonic() - started
    try:
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING), state_name(
            task.status.state
        )
        assert elapsed < PROMPT, f"returnImmediately took {elapsed:.1f}s against a 60 s task"
        again = await bounded(client.get_task(GetTaskRequest(id=task.id)))
        assert again.status.state not in TERMINAL
    finally:
        await bounded(client.cancel_task(CancelTaskRequest(id=task.id)))


async def test_return_immediately_with_a_function_agent(sdk: SdkClients, function_agent_url: str) -> None:
    client = await sdk(function_agent_url)
    started = time.monotonic()
    task = await start_slow(client)
    elapsed = time.monotonic() - started
    assert elapsed < PROMPT, f"returnImmediately took {elapsed:.1f}s against a {FUNCTION_AGENT_SECONDS} s agent"
    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


async def test_stream_yields_task_then_chunks_then_completed(sdk: SdkClients, stream_url: str) -> None:
    client = await sdk(stream_url, streaming=True)
    events = await send(client, "5")
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task", kinds
    task_id = events[0].task.id
    chunks = [e.artifact_update for e in events if e.WhichOneof("payload") == "artifact_update"]
    assert len(chunks) == 5, kinds
    assert len({c.artifact.artifact_id for c in chunks}) == 1, "all chunks belong to ONE artifact"
    assert [c.artifact.parts[0].text for c in chunks] == [f"chunk {i}" for i in range(5)]
    assert [c.append for c in chunks] == [False, True, True, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, False, False, True]
    assert all(c.task_id == task_id for c in chunks)
    # The chunks come before the end, and the stream ends at COMPLETED.
    last_chunk_index = max(i for i, k in enumerate(kinds) if k == "artifact_update")
    final = events[-1]
    assert final.WhichOneof("payload") in ("status_update", "task")
    final_state = final.status_update.status.state if final.HasField("status_update") else final.task.status.state
    assert final_state == TaskState.TASK_STATE_COMPLETED, state_name(final_state)
    assert last_chunk_index < len(events) - 1

    # The stored task holds the reassembled artifact.
    plain = await sdk(stream_url)
    stored = await bounded(plain.get_task(GetTaskRequest(id=task_id)))
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED
    assert "".join(artifact_texts(stored)) == "".join(f"chunk {i}" for i in range(5))


async def test_get_task_history_length(sdk: SdkClients, ask_url: str) -> None:
    client = await sdk(ask_url)
    first = await send_task(client, "hi")
    done = await send_task(client, "Ada", task_id=first.id, context_id=first.context_id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED

    full = await bounded(client.get_task(GetTaskRequest(id=first.id)))
    assert len(full.history) >= 3, [m.parts[0].text for m in full.history]  # user, agent question, user answer
    none = await bounded(client.get_task(GetTaskRequest(id=first.id, history_length=0)))
    assert len(none.history) == 0
    one = await bounded(client.get_task(GetTaskRequest(id=first.id, history_length=1)))
    assert len(one.history) == 1
    assert one.history[0] == full.history[-1], "historyLength N keeps the N most recent messages"
    two = await bounded(client.get_task(GetTaskRequest(id=first.id, history_length=2)))
    assert list(two.history) == list(full.history[-2:])
    # historyLength trims only the history.
    assert one.status.state == full.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifact_texts(one) == artifact_texts(full)


async def test_list_tasks_pages_through_one_context(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    context_id = f"ctx-{uuid.uuid4()}"
    created = [await send_task(client, f"item {i}", context_id=context_id) for i in range(5)]
    assert all(t.context_id == context_id for t in created)

    seen: list[str] = []
    token = ""
    pages = 0
    async with asyncio.timeout(CALL_TIMEOUT):
        while True:
            page = await client.list_tasks(ListTasksRequest(context_id=context_id, page_size=2, page_token=token))
            pages += 1
            assert page.total_size == 5
            assert page.page_size == 2
            assert len(page.tasks) <= 2
            for task in page.tasks:
                assert task.context_id == context_id
                assert len(task.artifacts) == 0, "artifacts are left out unless includeArtifacts"
            seen.extend(t.id for t in page.tasks)
            token = page.next_page_token
            if not token:
                break
            assert pages < 10, "pagination does not end"
    assert pages == 3
    assert len(seen) == len(set(seen)) == 5
    assert set(seen) == {t.id for t in created}

    # Newest status first: the last created task leads.
    assert seen[0] == created[-1].id
    with_artifacts = await bounded(
        client.list_tasks(ListTasksRequest(context_id=context_id, page_size=100, include_artifacts=True))
    )
    assert with_artifacts.next_page_token == ""
    assert sorted(artifact_texts(t)[0] for t in with_artifacts.tasks) == [f"item {i}" for i in range(5)]


async def test_cancel_running_task_then_cancel_again(sdk: SdkClients, slow_url: str) -> None:
    client = await sdk(slow_url)
    task = await start_slow(client)
    canceled = await bounded(client.cancel_task(CancelTaskRequest(id=task.id)), 10)
    assert canceled.id == task.id
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED, state_name(canceled.status.state)
    stored = await bounded(client.get_task(GetTaskRequest(id=task.id)))
    assert stored.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        await bounded(client.cancel_task(CancelTaskRequest(id=task.id)))


async def test_subscribe_to_running_task(sdk: SdkClients, short_slow_url: str) -> None:
    client = await sdk(short_slow_url, streaming=True)
    plain = await sdk(short_slow_url)
    task = await start_slow(plain)
    events = await collect(client.subscribe(SubscribeToTaskRequest(id=task.id)), SUBSCRIBE_SLOW_SECONDS + 15)
    assert events, "subscribe yielded nothing"
    assert events[0].WhichOneof("payload") == "task", "the first event of SubscribeToTask is the Task"
    assert events[0].task.id == task.id
    assert events[0].task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    final = events[-1]
    final_state = final.status_update.status.state if final.HasField("status_update") else final.task.status.state
    assert final_state == TaskState.TASK_STATE_COMPLETED, [e.WhichOneof("payload") for e in events]
    stored = await bounded(plain.get_task(GetTaskRequest(id=task.id)))
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED


async def test_multi_turn_input_required(sdk: SdkClients, ask_url: str) -> None:
    client = await sdk(ask_url)
    first = await send_task(client, "hello")
    assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, state_name(first.status.state)
    question = first.status.message
    assert question.role == Role.ROLE_AGENT
    assert "name" in question.parts[0].text.lower()

    answer = f"Grace-{uuid.uuid4().hex[:6]}"
    done = await send_task(client, answer, task_id=first.id, context_id=first.context_id)
    assert done.id == first.id
    assert done.context_id == first.context_id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, state_name(done.status.state)
    assert any(answer in text for text in artifact_texts(done)), artifact_texts(done)


async def test_multi_turn_input_required_streaming(sdk: SdkClients, ask_url: str) -> None:
    client = await sdk(ask_url, streaming=True)
    events = await send(client, "hello")
    assert events[0].WhichOneof("payload") == "task"
    task_id, context_id = events[0].task.id, events[0].task.context_id
    last = events[-1]
    assert last.HasField("status_update"), "the stream ends at the interrupted state"
    assert last.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    events = await send(client, "Linus", task_id=task_id, context_id=context_id)
    assert events[0].WhichOneof("payload") == "task"
    assert events[0].task.id == task_id
    final = events[-1]
    assert final.HasField("status_update")
    assert final.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    texts = [p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts]
    assert any("Linus" in t for t in texts), texts


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
async def test_message_only_reply(sdk: SdkClients, message_only_url: str, streaming: bool) -> None:
    client = await sdk(message_only_url, streaming=streaming)
    text = f"ping {uuid.uuid4().hex[:8]}"
    events = await send(client, text)
    assert [e.WhichOneof("payload") for e in events] == ["message"]
    reply = events[0].message
    assert reply.role == Role.ROLE_AGENT
    assert reply.context_id
    assert reply.task_id == ""
    assert text in "".join(p.text for p in reply.parts)


async def test_get_unknown_task_is_task_not_found(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    with pytest.raises(TaskNotFoundError):
        await bounded(client.get_task(GetTaskRequest(id=f"no-such-task-{uuid.uuid4()}")))


async def test_send_to_unknown_task_is_task_not_found(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    with pytest.raises(TaskNotFoundError):
        await send(client, "hello?", task_id=f"no-such-task-{uuid.uuid4()}")


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
async def test_message_to_terminal_task_is_unsupported_operation(
    sdk: SdkClients, echo_url: str, streaming: bool
) -> None:
    client = await sdk(echo_url)
    done = await send_task(client, "finish")
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    sender = await sdk(echo_url, streaming=streaming)
    with pytest.raises(UnsupportedOperationError):
        await send(sender, "more", task_id=done.id, context_id=done.context_id)
    # The task is unchanged.
    stored = await bounded(client.get_task(GetTaskRequest(id=done.id)))
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifact_texts(stored) == ["finish"]


async def test_cancel_terminal_task_is_not_cancelable(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    done = await send_task(client, "finish")
    with pytest.raises(TaskNotCancelableError):
        await bounded(client.cancel_task(CancelTaskRequest(id=done.id)))


async def test_subscribe_to_terminal_task_is_unsupported_operation(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url, streaming=True)
    done = await send_task(await sdk(echo_url), "finish")
    with pytest.raises(UnsupportedOperationError):
        await collect(client.subscribe(SubscribeToTaskRequest(id=done.id)))


async def test_negative_history_length_is_invalid_params(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    done = await send_task(client, "finish")
    with pytest.raises(InvalidParamsError):
        await bounded(client.get_task(GetTaskRequest(id=done.id, history_length=-1)))


async def test_push_config_create_get_list_delete(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    task = await send_task(client, "push me")

    created = await bounded(
        client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="p1", url=HOOK_URL, token="tok-1")
        )
    )
    assert (created.task_id, created.id, created.url, created.token) == (task.id, "p1", HOOK_URL, "tok-1")
    assigned = await bounded(
        client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=task.id, url=HOOK_URL))
    )
    assert assigned.id, "the server assigns an id when none is given"
    assert assigned.id != "p1"

    got = await bounded(
        client.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=task.id, id="p1"))
    )
    assert (got.task_id, got.id, got.url, got.token) == (task.id, "p1", HOOK_URL, "tok-1")

    listed = await bounded(
        client.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task.id))
    )
    assert sorted(c.id for c in listed.configs) == sorted(["p1", assigned.id])

    deleted = await bounded(
        client.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="p1"))
    )
    assert deleted is None
    listed = await bounded(
        client.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task.id))
    )
    assert [c.id for c in listed.configs] == [assigned.id]
    with pytest.raises(TaskNotFoundError):
        await bounded(
            client.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=task.id, id="p1"))
        )
    # Delete is idempotent.
    await bounded(
        client.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="p1"))
    )


async def test_push_config_on_unknown_task_is_task_not_found(sdk: SdkClients, echo_url: str) -> None:
    client = await sdk(echo_url)
    with pytest.raises(TaskNotFoundError):
        await bounded(
            client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=f"no-such-task-{uuid.uuid4()}", url=HOOK_URL)
            )
        )
