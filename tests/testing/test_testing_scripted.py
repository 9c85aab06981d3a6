"""``ScriptedAgent``: every step does what it says, turn by turn, checked through the in-process client."""

from __future__ import annotations

import asyncio

import pytest

from relaykit import Message, Part, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent
from relaykit.errors import A2ATaskFailedError, A2ATaskRejectedError
from relaykit.testing import (
    InProcessClient,
    ScriptedAgent,
    Turn,
    artifact,
    auth_required,
    call,
    canceled,
    chunks,
    complete,
    fail,
    input_required,
    raise_error,
    reject,
    status,
    wait_for,
    working,
)
from relaykit.types import Task

BOUND = 10.0


def describe(event: object) -> tuple[str, ...]:
    """A compact, comparable view of a stream event."""
    if isinstance(event, Task):
        return ("task", event.status.state.name)
    if isinstance(event, TaskStatusUpdateEvent):
        text = event.status.message.text if event.status.message is not None else ""
        return ("status", event.status.state.name, text)
    if isinstance(event, TaskArtifactUpdateEvent):
        flags = ("append" if event.append else "") + ("last" if event.last_chunk else "")
        return ("artifact", event.artifact.text_content, flags)
    assert isinstance(event, Message)
    return ("message", event.text)


async def test_the_stream_is_the_script() -> None:
    agent = ScriptedAgent([working("thinking"), artifact("hi", name="answer"), complete("done")])
    async with InProcessClient(agent) as client, asyncio.timeout(BOUND):
        events = [describe(e) async for e in client.stream("hello")]
    assert events == [
        ("task", "SUBMITTED"),
        ("status", "WORKING", "thinking"),
        ("artifact", "hi", ""),
        ("status", "COMPLETED", "done"),
    ]
    assert [m.text for m in agent.received] == ["hello"]


async def test_chunks_are_one_appended_artifact() -> None:
    agent = ScriptedAgent([chunks("Hel", "lo", " world", name="greeting"), complete()])
    async with InProcessClient(agent) as client, asyncio.timeout(BOUND):
        events = [e async for e in client.stream("x")]
        updates = [e for e in events if isinstance(e, TaskArtifactUpdateEvent)]
        assert [describe(u) for u in updates] == [
            ("artifact", "Hel", ""),
            ("artifact", "lo", "append"),
            ("artifact", " world", "appendlast"),
        ]
        assert len({u.artifact.artifact_id for u in updates}) == 1
        task = await client.get_task(updates[0].task_id)
        assert [(a.name, a.text_content) for a in task.artifacts] == [("greeting", "Hello world")]


async def test_append_continues_the_previous_artifact() -> None:
    agent = ScriptedAgent([artifact("a"), artifact("b", append=True), artifact([Part(text="c")]), complete()])
    async with InProcessClient(agent) as client:
        task = await client.send("x")
    assert isinstance(task, Task)
    assert [a.text_content for a in task.artifacts] == ["ab", "c"]


async def test_input_required_turns_resume_the_script() -> None:
    agent = ScriptedAgent(
        [input_required("Your name?"), input_required("Your quest?"), artifact("Welcome!"), complete()]
    )
    async with InProcessClient(agent) as client:
        task = await client.send("hi")
        assert isinstance(task, Task)
        assert task.status.state is TaskState.INPUT_REQUIRED
        assert task.status.message is not None
        assert task.status.message.text == "Your name?"
        task = await client.send("Arthur", task_id=task.id)
        assert isinstance(task, Task)
        assert task.status.message is not None
        assert task.status.message.text == "Your quest?"
        task = await client.send("the Grail", task_id=task.id)
        assert isinstance(task, Task)
        assert task.status.state is TaskState.COMPLETED
        assert [a.text_content for a in task.artifacts] == ["Welcome!"]
        # A new task plays the script from the top again.
        again = await client.send("hi again")
        assert isinstance(again, Task)
        assert again.status.state is TaskState.INPUT_REQUIRED
    assert [m.text for m in agent.received] == ["hi", "Arthur", "the Grail", "hi again"]


async def test_ask_with_an_input_handler() -> None:
    agent = ScriptedAgent([input_required("Your name?"), call(greet), complete()])
    async with InProcessClient(agent, on_input_required=lambda task: "Ada") as client:
        assert await client.ask("hi") == "Hello, Ada"


async def greet(turn: Turn) -> None:
    await turn.updater.artifact(f"Hello, {turn.context.text}")


async def test_auth_required_interrupts() -> None:
    agent = ScriptedAgent([auth_required("Sign in first"), complete("thanks")])
    async with InProcessClient(agent) as client:
        task = await client.send("x")
        assert isinstance(task, Task)
        assert task.status.state is TaskState.AUTH_REQUIRED
        task = await client.send("token", task_id=task.id)
        assert isinstance(task, Task)
        assert task.status.state is TaskState.COMPLETED


@pytest.mark.parametrize(
    ("step", "state", "error"),
    [
        (fail("no luck"), TaskState.FAILED, A2ATaskFailedError),
        (reject("not today"), TaskState.REJECTED, A2ATaskRejectedError),
        (raise_error(ValueError("boom")), TaskState.FAILED, A2ATaskFailedError),
    ],
)
async def test_unhappy_endings(step: object, state: TaskState, error: type[Exception]) -> None:
    agent = ScriptedAgent([working(), step])  # type: ignore[list-item]
    async with InProcessClient(agent) as client:
        task = await client.send("x")
        assert isinstance(task, Task)
        assert task.status.state is state
        with pytest.raises(error):
            await client.ask("y")


async def test_the_agent_may_cancel_its_own_task_and_publish_any_status() -> None:
    agent = ScriptedAgent([status(TaskState.WORKING, "custom"), canceled("gave up")])
    async with InProcessClient(agent) as client:
        task = await client.send("x")
    assert isinstance(task, Task)
    assert task.status.state is TaskState.CANCELED
    assert [m.text for m in task.history][-2:] == ["custom", "gave up"]


async def test_wait_for_holds_the_task_until_the_test_says_so() -> None:
    gate = asyncio.Event()
    agent = ScriptedAgent([working(), wait_for(gate), artifact("released"), complete()])
    async with InProcessClient(agent) as client, asyncio.timeout(BOUND):
        task = await client.send("x", return_immediately=True)
        assert isinstance(task, Task)
        assert (await client.get_task(task.id)).status.state in (TaskState.SUBMITTED, TaskState.WORKING)
        events = []
        async for event in client.subscribe(task.id):
            events.append(event)
            gate.set()  # subscribed (the snapshot came first): let the task finish
        assert describe(events[-1]) == ("status", "COMPLETED", "")
        final = await client.get_task(task.id)
        assert [a.text_content for a in final.artifacts] == ["released"]


async def test_a_script_that_stops_early_fails_the_task() -> None:
    async with InProcessClient(ScriptedAgent([working()])) as client:
        task = await client.send("x")
    assert isinstance(task, Task)
    assert task.status.state is TaskState.FAILED


def test_steps_are_checked() -> None:
    with pytest.raises(TypeError, match="not a script step"):
        ScriptedAgent(["complete"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one chunk"):
        chunks()
    assert "COMPLETED" in repr(ScriptedAgent([complete()]))
