"""relaykit's client drives an a2a-sdk server and a relaykit server through every operation, over both bindings.

Every test runs four times: {a2a-sdk 1.3.0 server, relaykit server} x {JSON-RPC, HTTP+JSON}. Both servers run the
same agent behaviour (``_sdk_server.py`` / ``_agents.py``), are separate processes, and the client resolves each one's
card and is forced onto one transport with ``Client(url, transports=[binding])``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from support.servers import ServerProcess

from client._agents import KITCHEN_KEY
from relaykit import (
    Message,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from relaykit.client import APIKeyAuth, Client, JSONRPCTransport, RESTTransport
from relaykit.errors import (
    A2ATaskAuthRequiredError,
    A2ATaskFailedError,
    A2ATaskInputRequiredError,
    A2ATaskRejectedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit.types import TaskPushNotificationConfig

pytestmark = pytest.mark.interop

T = 20.0  # bound on every test body
HOOK = "http://127.0.0.1:9/hook"  # a webhook nobody listens on (configs are stored; deliveries fail quietly)
_TRANSPORTS = {"JSONRPC": JSONRPCTransport, "HTTP+JSON": RESTTransport}


@pytest.fixture(params=["relaykit", "a2a-sdk"])
def server(request: pytest.FixtureRequest) -> ServerProcess:
    name = "kitchen_server" if request.param == "relaykit" else "sdk_server"
    server: ServerProcess = request.getfixturevalue(name)
    return server


@pytest.fixture
async def client(server: ServerProcess, binding: str) -> AsyncIterator[Client]:
    async with asyncio.timeout(T):
        # Authenticated: the kitchen serves its extended card only to a caller with its key.
        c = Client(
            server.url, transports=[binding], timeout=15, interceptors=[APIKeyAuth(KITCHEN_KEY, header="X-Api-Key")]
        )
        await c.connect()
    try:
        assert c.interface is not None
        assert c.interface.protocol_binding == binding
        assert isinstance(c.transport, _TRANSPORTS[binding])
        yield c
    finally:
        await c.aclose()


def _texts(task: Task) -> list[str]:
    return [a.text_content for a in task.artifacts]


async def test_send_blocking(client: Client) -> None:
    async with asyncio.timeout(T):
        task = await client.send("hello there")
    assert isinstance(task, Task)
    assert task.status.state is TaskState.COMPLETED
    assert _texts(task) == ["hello there"]
    assert task.context_id
    assert [m.role for m in task.history][:1] == [Role.USER]


async def test_send_return_immediately(client: Client) -> None:
    async with asyncio.timeout(T):
        task = await client.send("slow 2", return_immediately=True)
        assert isinstance(task, Task)
        assert task.status.state in (TaskState.SUBMITTED, TaskState.WORKING)
        events = [e async for e in client.subscribe(task.id)]
        final = await client.get_task(task.id)
    assert isinstance(events[-1], TaskStatusUpdateEvent)
    assert events[-1].status.state is TaskState.COMPLETED
    assert final.status.state is TaskState.COMPLETED
    assert [p.text for a in final.artifacts for p in a.parts] == ["slow 0", "slow 1"]


async def test_stream_events_in_order(client: Client) -> None:
    async with asyncio.timeout(T):
        events = [e async for e in client.stream("stream 5")]
    assert isinstance(events[0], Task)
    task_id = events[0].id
    chunks = [e for e in events if isinstance(e, TaskArtifactUpdateEvent)]
    assert [c.artifact.text_content for c in chunks] == [f"chunk {i}" for i in range(5)]
    assert [c.append for c in chunks] == [False, True, True, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, False, False, True]
    assert {c.artifact.artifact_id for c in chunks} == {"stream"}
    assert all(c.task_id == task_id for c in chunks)
    last = events[-1]
    assert isinstance(last, TaskStatusUpdateEvent)
    assert last.status.state is TaskState.COMPLETED
    # Nothing after the final status, and no other terminal status before it.
    statuses = [e.status.state for e in events if isinstance(e, TaskStatusUpdateEvent)]
    assert statuses.count(TaskState.COMPLETED) == 1


async def test_get_task_history_length(client: Client) -> None:
    async with asyncio.timeout(T):
        task = await client.send("remember me")
        full = await client.get_task(task.id)
        none = await client.get_task(task.id, history_length=0)
        one = await client.get_task(task.id, history_length=1)
    assert full.id == task.id
    assert full.status.state is TaskState.COMPLETED
    assert len(full.history) >= 1
    assert none.history == []
    assert len(one.history) == 1
    assert one.history[0].message_id == full.history[-1].message_id


async def test_list_tasks_paging(client: Client) -> None:
    context_id = str(uuid.uuid4())
    async with asyncio.timeout(T):
        sent = [await client.send(f"item {i}", context_id=context_id) for i in range(3)]
        pages = [p async for p in client.list_task_pages(context_id=context_id, page_size=2)]
        flat = [t async for t in client.list_tasks(context_id=context_id, page_size=2, include_artifacts=True)]
        completed = [
            t async for t in client.list_tasks(context_id=context_id, state=TaskState.COMPLETED, history_length=0)
        ]
    assert all(isinstance(t, Task) and t.context_id == context_id for t in sent)
    assert [len(p.tasks) for p in pages] == [2, 1]
    assert pages[0].total_size == 3
    assert pages[0].next_page_token
    assert not pages[-1].next_page_token
    ids = {t.id for t in sent}
    assert {t.id for p in pages for t in p.tasks} == ids
    assert {t.id for t in flat} == ids
    assert sorted(_texts(t)[0] for t in flat) == ["item 0", "item 1", "item 2"]
    assert all(not t.artifacts for p in pages for t in p.tasks)  # includeArtifacts defaults to false
    assert {t.id for t in completed} == ids
    assert all(t.history == [] for t in completed)


async def test_cancel(client: Client) -> None:
    async with asyncio.timeout(T):
        task = await client.send("slow 100", return_immediately=True)
        assert isinstance(task, Task)
        canceled = await client.cancel(task.id)
        assert canceled.status.state is TaskState.CANCELED
        assert (await client.get_task(task.id)).status.state is TaskState.CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel(task.id)


async def test_subscribe(client: Client) -> None:
    async with asyncio.timeout(T):
        task = await client.send("slow 3", return_immediately=True)
        assert isinstance(task, Task)
        events = [e async for e in client.subscribe(task.id)]
    assert isinstance(events[0], Task)
    assert events[0].id == task.id
    texts = [p.text for e in events if isinstance(e, TaskArtifactUpdateEvent) for p in e.artifact.parts]
    snapshot_texts = [p.text for a in events[0].artifacts for p in a.parts]
    assert snapshot_texts + texts == ["slow 0", "slow 1", "slow 2"]
    assert isinstance(events[-1], TaskStatusUpdateEvent)
    assert events[-1].status.state is TaskState.COMPLETED


async def test_push_config_crud(client: Client) -> None:
    async with asyncio.timeout(T):
        task = await client.send("with webhooks")
        named = await client.create_push_config(task.id, HOOK, token="tok-1", config_id="cfg-1")
        assigned = await client.create_push_config(task.id, HOOK + "2", token="tok-2")
        got = await client.get_push_config(task.id, "cfg-1")
        listed = await client.list_push_configs(task.id)
        await client.delete_push_config(task.id, "cfg-1")
        remaining = await client.list_push_configs(task.id)
        with pytest.raises(TaskNotFoundError):
            await client.get_push_config(task.id, "cfg-1")
        await client.delete_push_config(task.id, assigned.id)
        assert await client.list_push_configs(task.id) == []
        # Inline registration with SendMessage: the server binds the config to the new task.
        inline = await client.send("inline hook", push=TaskPushNotificationConfig(url=HOOK, token="tok-3"))
        assert isinstance(inline, Task)
        inline_configs = await client.list_push_configs(inline.id)
    assert (named.id, named.task_id, named.url, named.token) == ("cfg-1", task.id, HOOK, "tok-1")
    assert assigned.id
    assert assigned.task_id == task.id
    assert assigned.url == HOOK + "2"
    assert got.id == "cfg-1"
    assert got.token == "tok-1"
    assert {c.id for c in listed} == {"cfg-1", assigned.id}
    assert [c.id for c in remaining] == [assigned.id]
    assert [(c.url, c.token) for c in inline_configs] == [(HOOK, "tok-3")]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_ask_with_input_handler(client: Client, kind: str) -> None:
    questions: list[Task] = []

    def sync_handler(task: Task) -> str:
        questions.append(task)
        return "Bob"

    async def async_handler(task: Task) -> str:
        questions.append(task)
        return "Bob"

    client.on_input_required = sync_handler if kind == "sync" else async_handler
    async with asyncio.timeout(T):
        answer = await client.ask("ask me something")
    assert answer == "got: Bob"
    assert len(questions) == 1
    assert questions[0].status.state is TaskState.INPUT_REQUIRED
    assert questions[0].status.message is not None
    assert questions[0].status.message.text == "What is your name?"


async def test_multi_turn_explicit(client: Client) -> None:
    async with asyncio.timeout(T):
        first = await client.send("ask me")
        assert isinstance(first, Task)
        assert first.status.state is TaskState.INPUT_REQUIRED
        assert first.status.message is not None
        assert first.status.message.text == "What is your name?"
        done = await client.send("Ada", task_id=first.id, context_id=first.context_id)
        # Only the task id: the server derives the context.
        again = await client.send("ask again")
        assert isinstance(again, Task)
        done_again = await client.send("Grace", task_id=again.id)
    assert isinstance(done, Task)
    assert done.id == first.id
    assert done.context_id == first.context_id
    assert done.status.state is TaskState.COMPLETED
    assert _texts(done) == ["got: Ada"]
    assert [m.role for m in done.history] == [Role.USER, Role.AGENT, Role.USER]
    assert isinstance(done_again, Task)
    assert _texts(done_again) == ["got: Grace"]


async def test_multi_turn_streamed(client: Client) -> None:
    async with asyncio.timeout(T):
        first = [e async for e in client.stream("ask me")]
        task = first[0]
        assert isinstance(task, Task)
        last = first[-1]
        assert isinstance(last, TaskStatusUpdateEvent)
        assert last.status.state is TaskState.INPUT_REQUIRED
        second = [e async for e in client.stream("Linus", task_id=task.id, context_id=task.context_id)]
    texts = [e.artifact.text_content for e in second if isinstance(e, TaskArtifactUpdateEvent)]
    assert texts == ["got: Linus"]
    final = second[-1]
    assert isinstance(final, TaskStatusUpdateEvent)
    assert final.status.state is TaskState.COMPLETED
    assert final.task_id == task.id


async def test_message_only_reply(client: Client) -> None:
    async with asyncio.timeout(T):
        reply = await client.send("message hi")
        streamed = [e async for e in client.stream("message streamed")]
        answer = await client.ask("message asked")
    assert isinstance(reply, Message)
    assert reply.role is Role.AGENT
    assert reply.text == "you said: hi"
    assert reply.context_id
    assert not reply.task_id
    assert len(streamed) == 1
    assert isinstance(streamed[0], Message)
    assert streamed[0].text == "you said: streamed"
    assert answer == "you said: asked"


async def test_extended_card(client: Client) -> None:
    public = client.card
    assert public is not None
    assert public.capabilities.extended_agent_card
    async with asyncio.timeout(T):
        extended = await client.extended_card()
    assert extended.name.endswith("(extended)")
    assert "secret" in {s.id for s in extended.skills}
    assert "secret" not in {s.id for s in public.skills}
    assert client.card is extended


async def test_ask_terminal_outcomes(client: Client) -> None:
    async with asyncio.timeout(T):
        with pytest.raises(A2ATaskFailedError) as failed:
            await client.ask("fail")
        with pytest.raises(A2ATaskRejectedError) as rejected:
            await client.ask("reject")
        with pytest.raises(A2ATaskAuthRequiredError) as auth:
            await client.ask("auth")
        with pytest.raises(A2ATaskInputRequiredError) as unanswered:
            await client.ask("ask without a handler")
    for info, state, text in [
        (failed, TaskState.FAILED, "it failed"),
        (rejected, TaskState.REJECTED, "rejected"),
        (auth, TaskState.AUTH_REQUIRED, "sign in first"),
        (unanswered, TaskState.INPUT_REQUIRED, "What is your name?"),
    ]:
        task = info.value.task
        assert isinstance(task, Task)
        assert task.status.state is state
        assert task.status.message is not None
        assert task.status.message.text == text
        assert str(info.value) == text


async def test_protocol_errors(client: Client) -> None:
    async with asyncio.timeout(T):
        with pytest.raises(TaskNotFoundError):
            await client.get_task(str(uuid.uuid4()))
        done = await client.send("finished")
        assert isinstance(done, Task)
        with pytest.raises(TaskNotCancelableError):
            await client.cancel(done.id)
        with pytest.raises(UnsupportedOperationError):
            [e async for e in client.subscribe(done.id)]
        with pytest.raises(UnsupportedOperationError):
            await client.send("more", task_id=done.id)
        with pytest.raises(InvalidParamsError):
            [p async for p in client.list_task_pages(page_token="not-a-token-from-this-server")]


async def test_unknown_operation_is_method_not_found(client: Client, binding: str) -> None:
    """An operation the server does not have: JSON-RPC -32601; REST a 404 (a2a-sdk: without an A2A error body)."""
    from relaykit._methods import Operation, Route
    from relaykit.errors import MethodNotFoundError
    from relaykit.types import GetTaskRequest

    unknown = Operation("FrobnicateTask", GetTaskRequest, Task, False, (Route("GET", "/frobnicate/{id}", False),), "")
    async with asyncio.timeout(T):
        with pytest.raises(MethodNotFoundError):
            await client.transport.call(unknown, GetTaskRequest(id="t-1"), headers={})
