"""``InProcessClient`` and ``StreamingASGITransport``: the relaykit client against an app in the same event loop."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from relaykit import Message, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent, agent
from relaykit.http import create_app
from relaykit.server import AgentContext
from relaykit.testing import (
    InProcessClient,
    ScriptedAgent,
    StreamingASGITransport,
    complete,
    message,
    wait_for,
    working,
)
from relaykit.types import Task

BOUND = 10.0  # seconds any awaited step of these tests may take


@agent
async def echo(context: AgentContext) -> str:
    """Repeats your text."""
    return context.text


async def test_round_trip_with_an_executor() -> None:
    harness = InProcessClient(echo)
    async with harness as client:
        assert harness.server.started
        task = await client.send("hello")
        assert isinstance(task, Task)
        assert task.status.state is TaskState.COMPLETED
        assert [a.text_content for a in task.artifacts] == ["hello"]
        assert (await client.get_task(task.id)).status.state is TaskState.COMPLETED
        assert [t.id async for t in client.list_tasks()] == [task.id]
        assert await client.ask("again") == "again"
        assert client.card is not None
        assert client.card.name == "echo"
    assert not harness.server.started  # the engine was stopped on exit


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_streams_over_either_binding(binding: str) -> None:
    async with InProcessClient(echo, transports=(binding,)) as client:
        events = [event async for event in client.stream("streamed")]
    assert isinstance(events[0], Task)
    artifacts = [e for e in events if isinstance(e, TaskArtifactUpdateEvent)]
    assert [a.artifact.text_content for a in artifacts] == ["streamed"]
    last = events[-1]
    assert isinstance(last, TaskStatusUpdateEvent)
    assert last.status.state is TaskState.COMPLETED


async def test_an_app_made_with_create_app_is_used_as_it_is() -> None:
    app = create_app(echo, store="memory", public_url="http://agent.example")
    async with InProcessClient(app) as client:
        assert client.card is not None
        assert client.card.supported_interfaces[0].url == "http://agent.example/"
        assert await client.ask("via my app") == "via my app"
    assert not app.state.relaykit.started


async def test_a_started_app_is_left_running() -> None:
    app = create_app(echo, store="memory")
    await app.state.relaykit.start()
    try:
        async with InProcessClient(app) as client:
            assert await client.ask("hi") == "hi"
        assert app.state.relaykit.started  # not ours to stop
    finally:
        await app.state.relaykit.stop()


async def test_a_foreign_asgi_app_gets_its_lifespan() -> None:
    inner = create_app(echo, store="memory", public_url="http://relaykit.test")
    parent = Starlette(routes=[Mount("/", app=inner)], lifespan=inner.state.relaykit.lifespan)
    async with InProcessClient(parent) as client:
        assert inner.state.relaykit.started  # started by the parent's lifespan, not by a first request
        assert await client.ask("mounted") == "mounted"
    assert not inner.state.relaykit.started


async def test_stream_events_arrive_while_the_task_runs() -> None:
    # With a buffering transport the first event would only arrive after the gate opened: a deadlock, here bounded.
    gate = asyncio.Event()
    agent_ = ScriptedAgent([working("started"), wait_for(gate), complete("finished")])
    async with InProcessClient(agent_) as client:
        states = []
        async with asyncio.timeout(BOUND):
            async for event in client.stream("go"):
                if isinstance(event, TaskStatusUpdateEvent):
                    states.append(event.status.state)
                    if event.status.state is TaskState.WORKING:
                        gate.set()
        assert states == [TaskState.WORKING, TaskState.COMPLETED]


async def test_cancel_while_streaming_and_leave_a_stream_early() -> None:
    gate = asyncio.Event()  # never set: only a cancel ends these tasks
    agent_ = ScriptedAgent([working(), wait_for(gate), complete()])
    async with InProcessClient(agent_) as client:
        async with asyncio.timeout(BOUND):
            final = None
            async for event in client.stream("cancel me"):
                if isinstance(event, TaskStatusUpdateEvent) and event.status.state is TaskState.WORKING:
                    canceled = await client.cancel(event.task_id)
                    assert canceled.status.state is TaskState.CANCELED
                final = event
            assert isinstance(final, TaskStatusUpdateEvent)
            assert final.status.state is TaskState.CANCELED

            # Leaving a stream before its end disconnects it; the task runs on until canceled.
            stream = client.stream("leave me")
            first = await anext(stream)
            assert isinstance(first, Task)
            await stream.aclose()
            assert (await client.get_task(first.id)).status.state in (TaskState.SUBMITTED, TaskState.WORKING)
            assert (await client.cancel(first.id)).status.state is TaskState.CANCELED
        assert len(agent_.canceled_tasks) == 2


async def test_streaming_transport_with_plain_httpx() -> None:
    app = create_app(echo, store="memory")
    await app.state.relaykit.start()
    transport = StreamingASGITransport(app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://relaykit.test") as http:
            card = await http.get("/.well-known/agent-card.json")
            assert card.status_code == 200
            assert card.json()["name"] == "echo"
            health = await http.head("/healthz")
            assert (health.status_code, health.content) == (200, b"")
            missing = await http.get("/tasks/nope", headers={"A2A-Version": "1.0"})
            assert missing.status_code == 404
    finally:
        await transport.aclose()
        await app.state.relaykit.stop()


async def test_an_app_error_surfaces_in_the_test() -> None:
    async def broken(scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] == "http":
            raise RuntimeError("broken app")

    transport = StreamingASGITransport(broken)
    async with httpx.AsyncClient(transport=transport, base_url="http://relaykit.test") as http:
        with pytest.raises(RuntimeError, match="broken app"):
            await http.get("/")


async def test_a_message_reply() -> None:
    async with InProcessClient(ScriptedAgent([message("hello there")])) as client:
        reply = await client.send("hi")
        assert isinstance(reply, Message)
        assert reply.text == "hello there"
