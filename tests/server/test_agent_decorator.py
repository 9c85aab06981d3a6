"""CONTRACT "@agent": plain async functions and async generators become executors, run through the real engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest

from relaykit import agent
from relaykit._enums import Role, TaskState
from relaykit._requests import SendMessageRequest
from relaykit._types import Message, Part, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from relaykit.server import AgentContext, FunctionAgent, StreamItem, TaskEngine

WAIT = 5.0


async def within(aw: Awaitable[Any], limit: float = WAIT) -> Any:
    return await asyncio.wait_for(aw, limit)


def req(text: str = "hi", *, task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(message=Message.user(text, task_id=task_id))


async def run_send(fn: FunctionAgent, *texts: str) -> list[Task | Message]:
    """Send ``texts`` in turn (each continuing the previous task, if any) and return every answer."""
    engine = TaskEngine(fn)
    await engine.start()
    try:
        out: list[Task | Message] = []
        task_id = ""
        for text in texts or ("hi",):
            result = await within(engine.send(req(text, task_id=task_id)))
            out.append(result)
            if isinstance(result, Task):
                task_id = result.id
        return out
    finally:
        await within(engine.shutdown(grace=0))


async def run_stream(fn: FunctionAgent, text: str = "hi") -> tuple[list[StreamItem], Task]:
    engine = TaskEngine(fn)
    await engine.start()
    try:

        async def collect() -> list[StreamItem]:
            return [item async for item in engine.stream(req(text))]

        items: list[StreamItem] = await within(collect())
        task = await engine.get_task(items[0][1].id)
        return items, task
    finally:
        await within(engine.shutdown(grace=0))


def as_task(result: Task | Message) -> Task:
    assert isinstance(result, Task), result
    return result


def test_the_decorator_makes_an_executor() -> None:
    @agent
    async def plain(context: AgentContext) -> str:
        return context.text

    @agent()
    async def with_parens(context: AgentContext) -> str:
        return context.text

    assert isinstance(plain, FunctionAgent)
    assert isinstance(with_parens, FunctionAgent)
    assert plain.name == "plain"


async def test_returning_str_completes_with_one_text_artifact() -> None:
    @agent
    async def echo(context: AgentContext) -> str:
        return f"echo: {context.text}"

    (result,) = await run_send(echo, "hello")
    task = as_task(result)
    assert task.status.state is TaskState.COMPLETED
    assert len(task.artifacts) == 1
    assert [p.text for p in task.artifacts[0].parts] == ["echo: hello"]


async def test_returning_none_completes_without_artifacts() -> None:
    @agent
    async def quiet(context: AgentContext) -> None:
        return None

    (result,) = await run_send(quiet)
    task = as_task(result)
    assert task.status.state is TaskState.COMPLETED
    assert task.artifacts == []


async def test_returning_parts_completes_with_that_artifact() -> None:
    @agent
    async def parts(context: AgentContext) -> list[Part]:
        return [Part(text="a"), Part(data={"k": 1})]

    task = as_task((await run_send(parts))[0])
    assert task.status.state is TaskState.COMPLETED
    (artifact,) = task.artifacts
    assert artifact.parts == [Part(text="a"), Part(data={"k": 1})]


async def test_returning_a_message_replies_with_a_bare_message() -> None:
    @agent
    async def reply(context: AgentContext) -> Message:
        return Message.agent(f"just saying {context.text}")

    (result,) = await run_send(reply, "hi")
    assert isinstance(result, Message)
    assert result.role is Role.AGENT
    assert result.text == "just saying hi"
    assert result.context_id
    assert result.task_id == ""


async def test_an_async_generator_streams_one_artifact_in_appended_chunks() -> None:
    @agent
    async def count(context: AgentContext) -> AsyncIterator[str]:
        for word in ("one ", "two ", "three"):
            yield word

    items, task = await run_stream(count)
    events = [event for _, event, _ in items]
    assert isinstance(events[0], Task)
    chunks = [e for e in events if isinstance(e, TaskArtifactUpdateEvent)]
    assert [c.artifact.text_content for c in chunks] == ["one ", "two ", "three"]
    assert [c.append for c in chunks] == [False, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, True]
    assert len({c.artifact.artifact_id for c in chunks}) == 1
    last = events[-1]
    assert isinstance(last, TaskStatusUpdateEvent)
    assert last.status.state is TaskState.COMPLETED
    assert all(not isinstance(e, TaskStatusUpdateEvent) for e in events[1:-1])
    (artifact,) = task.artifacts
    assert artifact.text_content == "one two three"
    assert task.status.state is TaskState.COMPLETED


async def test_a_single_chunk_generator_sends_one_first_and_last_chunk() -> None:
    @agent
    async def once(context: AgentContext) -> AsyncIterator[str]:
        yield "only"

    items, task = await run_stream(once)
    chunks = [e for _, e, _ in items if isinstance(e, TaskArtifactUpdateEvent)]
    assert [(c.append, c.last_chunk) for c in chunks] == [(False, True)]
    assert task.artifacts[0].text_content == "only"


async def test_an_empty_generator_completes_without_artifacts() -> None:
    @agent
    async def nothing(context: AgentContext) -> AsyncIterator[str]:
        return
        yield  # pragma: no cover - makes this an async generator

    _, task = await run_stream(nothing)
    assert task.status.state is TaskState.COMPLETED
    assert task.artifacts == []


async def test_raising_fails_the_task_without_leaking_the_error() -> None:
    @agent
    async def broken(context: AgentContext) -> str:
        raise RuntimeError("internal detail: token=abc123")

    (result,) = await run_send(broken)
    task = as_task(result)
    assert task.status.state is TaskState.FAILED
    assert b"abc123" not in task.to_json()


async def test_a_generator_raising_midway_fails_the_task() -> None:
    @agent
    async def flaky(context: AgentContext) -> AsyncIterator[str]:
        yield "partial "
        yield "more "
        raise RuntimeError("upstream token=abc123")

    items, task = await run_stream(flaky)
    assert task.status.state is TaskState.FAILED
    assert all(b"abc123" not in data for _, _, data in items)
    last = items[-1][1]
    assert isinstance(last, TaskStatusUpdateEvent)
    assert last.status.state is TaskState.FAILED


async def test_requires_input_pauses_and_the_follow_up_completes() -> None:
    seen: list[tuple[bool, list[str]]] = []

    @agent
    async def greeter(context: AgentContext) -> str:
        seen.append((context.is_continuation, [m.text for m in context.history]))
        if not context.is_continuation:
            context.requires_input("What is your name?")
        return f"Hello, {context.text}!"

    first, second = await run_send(greeter, "hi", "Ada")
    paused = as_task(first)
    assert paused.status.state is TaskState.INPUT_REQUIRED
    question = paused.status.message
    assert question is not None
    assert question.role is Role.AGENT
    assert question.text == "What is your name?"
    done = as_task(second)
    assert done.id == paused.id
    assert done.status.state is TaskState.COMPLETED
    assert [a.text_content for a in done.artifacts] == ["Hello, Ada!"]
    assert seen == [(False, []), (True, ["hi", "What is your name?", "Ada"])]


async def test_an_answer_resumes_the_task_with_updates_and_keeps_its_artifacts() -> None:
    # The task exists: WORKING is a status update. A Task would replace the snapshot (dropping the draft the first
    # turn made) and reach the subscriber as a second Task, where a subscription carries only updates after its first.
    @agent
    async def drafter(context: AgentContext) -> str:
        if not context.is_continuation:
            await context.updater.artifact("draft", artifact_id="draft")
            context.requires_input("Shall I finish it?")
        return f"final: {context.text}"

    engine = TaskEngine(drafter)
    await engine.start()
    try:
        paused = as_task(await within(engine.send(req("write"))))
        assert [a.text_content for a in paused.artifacts] == ["draft"]
        subscription = await within(engine.subscribe(paused.id))
        _, snapshot, _ = await within(anext(subscription))
        assert isinstance(snapshot, Task)

        async def collect(items: Any) -> list[StreamItem]:
            return [item async for item in items]

        own = await within(collect(engine.stream(req("yes", task_id=paused.id))))
        rest = await within(collect(subscription))
        done = await engine.get_task(paused.id)
    finally:
        await within(engine.shutdown(grace=0))
    assert isinstance(own[0][1], Task)
    assert [type(event) for _, event, _ in own[1:]] == [
        TaskStatusUpdateEvent,
        TaskArtifactUpdateEvent,
        TaskStatusUpdateEvent,
    ]
    assert [(s, d) for s, _, d in rest] == [(s, d) for s, _, d in own[1:]]
    assert [event.status.state for _, event, _ in rest if isinstance(event, TaskStatusUpdateEvent)] == [
        TaskState.WORKING,
        TaskState.COMPLETED,
    ]
    assert done.status.state is TaskState.COMPLETED
    assert [a.text_content for a in done.artifacts] == ["draft", "final: yes"]


async def test_a_message_answer_to_an_interrupted_task_is_its_final_status_message() -> None:
    # A function that may reply with a bare Message creates no task up front; once its task exists (it asked for
    # input), a Message it returns ends the task with it, rather than failing it as a reply after the task.
    @agent
    async def chat(context: AgentContext) -> Message | str:
        if not context.is_continuation:
            context.requires_input("Name?")
        return Message.agent(f"Hi {context.text}")

    first, second = await run_send(chat, "hello", "Ada")
    assert as_task(first).status.state is TaskState.INPUT_REQUIRED
    done = as_task(second)
    assert done.status.state is TaskState.COMPLETED
    assert done.status.message is not None
    assert done.status.message.text == "Hi Ada"


async def test_requires_input_inside_a_generator() -> None:
    @agent
    async def asker(context: AgentContext) -> AsyncIterator[str]:
        if not context.is_continuation:
            context.requires_input("Which language?")
        yield f"Using {context.text}"

    first, second = await run_send(asker, "translate", "French")
    assert as_task(first).status.state is TaskState.INPUT_REQUIRED
    done = as_task(second)
    assert done.status.state is TaskState.COMPLETED
    assert done.artifacts[0].text_content == "Using French"


@pytest.mark.parametrize("with_message", [True, False], ids=["text", "message"])
async def test_requires_auth_pauses_in_auth_required(with_message: bool) -> None:
    @agent
    async def guarded(context: AgentContext) -> str:
        if with_message:
            context.requires_auth("Please sign in at https://example.test/login")
        context.requires_auth(Message.agent("Please sign in at https://example.test/login"))

    (result,) = await run_send(guarded)
    task = as_task(result)
    assert task.status.state is TaskState.AUTH_REQUIRED
    message = task.status.message
    assert message is not None
    assert message.role is Role.AGENT
    assert "sign in" in message.text
