"""Embedded mode's put-off first write (``Recorder._create`` / ``_write_first``).

A new task whose caller waits for the outcome alone is not written apart from its next state: an agent that answers
at once costs one store write, not two. What a user relies on meanwhile, shown here on the memory store and on
SQLite with real executors, events and bounded waits (nothing sleeps to synchronise):

* the answer is never given before the task's final state is stored;
* a task whose agent goes on working is stored within the same loop pass (ListTasks and a restart see it);
* a returnImmediately repeat of the message gets the task as it is, not a wait for the outcome;
* a failed first write is carried by the next one; a first write still in flight is followed, never raced, by the
  execution's next write;
* callers who can see the first state (returnImmediately, a stream) still get it written before they see it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from relaykit._enums import TaskState
from relaykit._requests import SendMessageConfiguration, SendMessageRequest
from relaykit._types import Message, Task, TaskStatus
from relaykit.backends import MemoryTaskStore, TaskQuery, TaskRecord, TaskStore
from relaykit.backends.sqlite import SQLiteTaskStore
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


class Watched:
    """Wraps a real store: counts writes, tells when one has landed, can fail the next write or hold one."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.states: list[TaskState] = []
        self.landed = asyncio.Event()
        self.fail_next = False
        self.hold_next = False
        self.holding, self.release = asyncio.Event(), asyncio.Event()
        self.failed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def save(self, record: TaskRecord) -> None:
        if self.fail_next:
            self.fail_next = False
            self.failed.set()
            raise OSError("disk full")
        if self.hold_next:
            self.hold_next = False
            self.holding.set()
            await asyncio.wait_for(self.release.wait(), WAIT)
        await self.store.save(record)
        self.states.append(record.task.status.state)
        self.landed.set()


@pytest.fixture(params=["memory", "sqlite"])
async def watched(request: pytest.FixtureRequest, tmp_path: Path) -> Watched:
    store: TaskStore = MemoryTaskStore() if request.param == "memory" else SQLiteTaskStore(tmp_path / "t.db")
    return Watched(store)


@pytest.fixture
async def engines() -> AsyncIterator[Callable[..., Awaitable[TaskEngine]]]:
    made: list[TaskEngine] = []

    async def make(run: Script, store: Any, **options: Any) -> TaskEngine:
        engine = TaskEngine(Scripted(run), store=store, **options)
        await engine.start()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await asyncio.wait_for(engine.shutdown(grace=0), WAIT)


def request(message: Message, *, now: bool = False) -> SendMessageRequest:
    config = SendMessageConfiguration(return_immediately=True) if now else None
    # A copy each time: the engine fills in the message's task and context ids on admission.
    return SendMessageRequest(message=message.model_copy(deep=True), configuration=config)


async def stored(engine: TaskEngine, task_id: str) -> Task | None:
    record = await engine.store.get(task_id)
    return record.task if record is not None else None


def chunk_then_complete(gate: asyncio.Event) -> Script:
    """An agent that creates its task with a chunk, works until ``gate`` (an LLM call, say), then completes it."""

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        updater = TaskUpdater(q, ctx)
        await updater.artifact("partial")
        await gate.wait()
        await updater.complete()

    return run


def as_task(result: object) -> Task:
    assert isinstance(result, Task), result
    return result


async def test_a_message_answered_at_once_costs_one_write_and_is_stored_before_the_answer(
    watched: Watched, engines: Any
) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).complete_with_text("done")

    engine = await engines(run, watched)
    task = as_task(await asyncio.wait_for(engine.send(request(Message.user("hi"))), WAIT))
    assert task.status.state is TaskState.COMPLETED
    assert watched.states == [TaskState.COMPLETED]  # no separate write of the SUBMITTED snapshot
    saved = await stored(engine, task.id)
    assert saved is not None
    assert saved.status.state is TaskState.COMPLETED
    assert [m.text for m in saved.history] == ["hi"]


async def test_the_same_holds_for_an_agent_that_starts_with_its_working_task(watched: Watched, engines: Any) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        # As ``@agent`` starts: the task itself, WORKING.
        working = TaskStatus(state=TaskState.WORKING)
        await q.enqueue_event(Task(id=ctx.task_id, context_id=ctx.context_id, status=working))
        await TaskUpdater(q, ctx).complete_with_text("done")

    engine = await engines(run, watched)
    task = as_task(await asyncio.wait_for(engine.send(request(Message.user("hi"))), WAIT))
    assert task.status.state is TaskState.COMPLETED
    assert watched.states == [TaskState.COMPLETED]


@pytest.mark.parametrize("first", ["chunk", "working task"])
async def test_a_task_whose_agent_goes_on_working_is_stored_while_it_works(
    watched: Watched, engines: Any, first: str
) -> None:
    gate = asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        updater = TaskUpdater(q, ctx)
        if first == "chunk":
            await updater.artifact("partial")
        else:
            await q.enqueue_event(
                Task(id=ctx.task_id, context_id=ctx.context_id, status=TaskStatus(state=TaskState.WORKING))
            )
        await gate.wait()  # an LLM call, say
        await updater.complete()

    engine = await engines(run, watched)
    sending = asyncio.ensure_future(engine.send(request(Message.user("long job"))))
    await asyncio.wait_for(watched.landed.wait(), WAIT)  # the put-off first write, with nothing else happening
    (task_id,) = engine.registry
    saved = await stored(engine, task_id)
    assert saved is not None
    assert saved.status.state is (TaskState.SUBMITTED if first == "chunk" else TaskState.WORKING)
    assert [m.text for m in saved.history] == ["long job"]
    if first == "chunk":
        assert [p.text for a in saved.artifacts for p in a.parts] == ["partial"]
    listed = await engine.store.list(TaskQuery())
    assert [t.id for t in listed.tasks] == [task_id]
    assert not sending.done()
    gate.set()
    task = as_task(await asyncio.wait_for(sending, WAIT))
    assert task.status.state is TaskState.COMPLETED
    assert len(watched.states) == 2
    assert watched.states[-1] is TaskState.COMPLETED
    saved = await stored(engine, task_id)
    assert saved is not None
    assert saved.status.state is TaskState.COMPLETED


async def test_a_return_immediately_repeat_gets_the_task_as_it_is(engines: Any) -> None:
    gate = asyncio.Event()
    created = asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        updater = TaskUpdater(q, ctx)
        await updater.artifact("partial")
        created.set()
        await gate.wait()
        await updater.complete()

    engine = await engines(run, MemoryTaskStore())
    message = Message.user("once")
    sending = asyncio.ensure_future(engine.send(request(message)))
    await asyncio.wait_for(created.wait(), WAIT)
    # The same messageId again, returnImmediately: answered now, with the task as it is, not after the outcome.
    now = as_task(await asyncio.wait_for(engine.send(request(message, now=True)), WAIT))
    assert now.status.state is TaskState.SUBMITTED
    assert [p.text for a in now.artifacts for p in a.parts] == ["partial"]
    gate.set()
    done = as_task(await asyncio.wait_for(sending, WAIT))
    assert done.id == now.id
    assert done.status.state is TaskState.COMPLETED


async def test_a_failed_first_write_is_carried_by_the_next(watched: Watched, engines: Any) -> None:
    gate = asyncio.Event()
    run = chunk_then_complete(gate)
    engine = await engines(run, watched)
    watched.fail_next = True
    sending = asyncio.ensure_future(engine.send(request(Message.user("job"))))
    await asyncio.wait_for(watched.failed.wait(), WAIT)  # the first write was tried, and failed
    (task_id,) = engine.registry
    assert await stored(engine, task_id) is None
    gate.set()
    task = as_task(await asyncio.wait_for(sending, WAIT))
    assert task.status.state is TaskState.COMPLETED
    saved = await stored(engine, task_id)
    assert saved is not None
    assert saved.status.state is TaskState.COMPLETED
    assert [p.text for a in saved.artifacts for p in a.parts] == ["partial"]


async def test_the_next_write_follows_a_first_write_in_flight(watched: Watched, engines: Any) -> None:
    proceed, completing = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        updater = TaskUpdater(q, ctx)
        await updater.artifact("partial")
        await proceed.wait()
        completing.set()
        await updater.complete()  # its write comes while the first one is held mid-flight

    engine = await engines(run, watched)
    watched.hold_next = True
    sending = asyncio.ensure_future(engine.send(request(Message.user("job"))))
    await asyncio.wait_for(watched.holding.wait(), WAIT)
    proceed.set()
    (task_id,) = engine.registry
    active = engine.registry[task_id]
    # The test runs again once the agent's task suspends: inside its terminal write, which waits for the first.
    await asyncio.wait_for(completing.wait(), WAIT)
    assert active.emitting
    assert not sending.done()
    watched.release.set()
    task = as_task(await asyncio.wait_for(sending, WAIT))
    assert task.status.state is TaskState.COMPLETED
    assert watched.states == [TaskState.SUBMITTED, TaskState.COMPLETED]  # one after the other, no conflict
    record = await engine.store.get(task_id)
    assert record is not None
    assert record.task.status.state is TaskState.COMPLETED
    assert record.version == 2


@pytest.mark.parametrize("caller", ["returnImmediately", "stream"])
async def test_callers_who_see_the_first_state_get_it_written_first(
    watched: Watched, engines: Any, caller: str
) -> None:
    gate = asyncio.Event()
    run = chunk_then_complete(gate)
    engine = await engines(run, watched)
    if caller == "returnImmediately":
        first = as_task(await asyncio.wait_for(engine.send(request(Message.user("job"), now=True)), WAIT))
        task_id = first.id
    else:
        stream = engine.stream(request(Message.user("job")))
        _, event, _ = await asyncio.wait_for(anext(aiter(stream)), WAIT)
        task_id = as_task(event).id
    # Written before the caller saw it (the write landed before this line ran).
    assert watched.states == [TaskState.SUBMITTED]
    saved = await stored(engine, task_id)
    assert saved is not None
    gate.set()
    if caller == "stream":
        async for _ in stream:
            pass
