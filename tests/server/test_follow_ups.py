"""Follow-up messages (to an existing task): what one costs, and the history limit for a message that waited.

Every follow-up costs time in proportion to the whole task, so none of that work is done for nothing: a blocking
follow-up encodes the task only to store it (the agent's copy is decoded from the bytes the store read, not from a
fresh encoding of the live task). And ``max_history_bytes`` holds for a follow-up admitted while another execution
ran: it is checked again against the history it actually joins when its turn comes. Real engine, memory store, real
executors driven through asyncio Events, every wait bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest

from relaykit._enums import TaskState
from relaykit._errors import InvalidParamsError
from relaykit._requests import SendMessageRequest
from relaykit._types import Message, Task
from relaykit.server import AgentExecutor, EventQueue, RequestContext, TaskEngine, TaskUpdater

WAIT = 5.0

Script = Callable[[RequestContext, EventQueue], Awaitable[None]]


class Scripted(AgentExecutor):
    def __init__(self, run: Script) -> None:
        self.run = run

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        await self.run(context, queue)

    async def cancel(self, context: RequestContext, queue: EventQueue) -> None:
        return None


def req(text: str, task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(message=Message.user(text, task_id=task_id))


async def admitted(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Run a send in its own task; returns once it has been admitted (the memory store never suspends, so the send
    runs up to its wait for the outcome in its first step)."""
    entered = asyncio.Event()

    async def wrapper() -> Any:
        entered.set()
        return await coro

    task = asyncio.create_task(wrapper())
    await entered.wait()
    return task


@pytest.fixture
async def engines() -> AsyncIterator[Callable[..., Awaitable[TaskEngine]]]:
    made: list[TaskEngine] = []

    async def make(run: Script, **options: Any) -> TaskEngine:
        engine = TaskEngine(Scripted(run), **options)
        await engine.start()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await asyncio.wait_for(engine.shutdown(grace=0), WAIT)


async def test_a_blocking_follow_up_encodes_the_task_only_to_store_it(
    engines: Callable[..., Awaitable[TaskEngine]], monkeypatch: pytest.MonkeyPatch
) -> None:
    given: list[Task | None] = []

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        given.append(ctx.task)
        await TaskUpdater(q, ctx).requires_input("next?")

    engine = await engines(run)
    first = await asyncio.wait_for(engine.send(req("x" * 100_000)), WAIT)
    assert isinstance(first, Task)

    # Every whole-task encoding and decoding from here on (the engine holds this one task only).
    counts = {"encode": 0, "decode": 0}
    encode, decode = Task.to_json, Task.model_validate_json

    def counted_encode(self: Task) -> bytes:
        counts["encode"] += 1
        return encode(self)

    def counted_decode(cls: type[Task], data: str | bytes, **options: Any) -> Task:
        counts["decode"] += 1
        return decode(data, **options)

    monkeypatch.setattr(Task, "to_json", counted_encode)
    monkeypatch.setattr(Task, "model_validate_json", classmethod(counted_decode))
    answer = await asyncio.wait_for(engine.send_raw(req("an answer", first.id)), WAIT)
    monkeypatch.undo()

    # One encoding: the task's one write (INPUT_REQUIRED), whose bytes are also the answer. Two decodings: the
    # stored task read back, and the agent's own copy (before, the live task was encoded once more to be decoded).
    assert counts == {"encode": 1, "decode": 2}
    assert isinstance(answer, bytes)
    # The agent's copy is the task as the execution starts, the message in it, and its own to change.
    copy = given[-1]
    assert copy is not None
    assert [m.text[:9] for m in copy.history] == ["xxxxxxxxx", "next?", "an answer"]
    assert copy.status.state is TaskState.INPUT_REQUIRED
    copy.history.clear()
    record = await engine.store.get(first.id)
    assert record is not None
    assert [m.text[:9] for m in record.task.history] == ["xxxxxxxxx", "next?", "an answer", "next?"]
    assert Task.model_validate_json(answer) == record.task


async def test_a_follow_up_that_waited_is_checked_against_the_history_it_joins(
    engines: Callable[..., Awaitable[TaskEngine]],
) -> None:
    reached, gate = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        updater = TaskUpdater(q, ctx)
        if ctx.text == "hold":
            await updater.working()
            reached.set()
            await asyncio.wait_for(gate.wait(), WAIT)
        await updater.requires_input("next?")

    engine = await engines(run, max_history_bytes=30_000)
    task = await asyncio.wait_for(engine.send(req("start")), WAIT)
    assert isinstance(task, Task)
    running = await admitted(engine.send(req("hold", task.id)))
    await asyncio.wait_for(reached.wait(), WAIT)
    # Both fit the history as it is now, so both are admitted; each waits for the execution before it.
    fits = await admitted(engine.send(req("b" * 15_000, task.id)))
    too_many = await admitted(engine.send(req("c" * 15_000, task.id)))
    gate.set()

    for send in (running, fits):
        outcome = await asyncio.wait_for(send, WAIT)
        assert isinstance(outcome, Task)
        assert outcome.status.state is TaskState.INPUT_REQUIRED
    with pytest.raises(InvalidParamsError, match="limit of 30000 bytes"):
        await asyncio.wait_for(too_many, WAIT)
    record = await engine.store.get(task.id)
    assert record is not None
    users = [m.text[:5] for m in record.task.history if m.role.name == "USER"]
    assert users == ["start", "hold", "bbbbb"]
    assert record.task.status.state is TaskState.INPUT_REQUIRED
