"""TaskEngine: every guarantee of ARCHITECTURE §3-4 and CONTRACT "Engine defaults" / "SSE and resume".

Executors here are small real ``AgentExecutor`` s driven by the test through asyncio Events; nothing is mocked and
nothing sleeps to synchronise. Every wait is bounded (``within``) on top of pytest-timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest

from relaykit._enums import TaskState
from relaykit._errors import (
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    ResourceExhaustedError,
    ServiceUnavailableError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit._model import utc_now
from relaykit._requests import SendMessageConfiguration, SendMessageRequest
from relaykit._types import Message, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent
from relaykit.backends import MemoryTaskStore, TaskQuery, TaskRecord
from relaykit.backends.memory import LocalEventBus
from relaykit.server import (
    AgentExecutor,
    CallContext,
    EventQueue,
    QueueClosedError,
    RequestContext,
    StreamItem,
    TaskEngine,
    TaskUpdater,
)

WAIT = 5.0  # the most any single step of a test may take

Script = Callable[[RequestContext, EventQueue], Awaitable[None]]


# --- helpers ---------------------------------------------------------------------------------------------


class Scripted(AgentExecutor):
    """An executor whose ``execute`` (and optionally ``cancel``) are the test's own coroutines."""

    def __init__(self, run: Script, cancel: Script | None = None) -> None:
        self.run = run
        self.on_cancel = cancel
        self.shutdowns = 0

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        await self.run(context, queue)

    async def cancel(self, context: RequestContext, queue: EventQueue) -> None:
        if self.on_cancel is not None:
            await self.on_cancel(context, queue)

    async def on_shutdown(self) -> None:
        self.shutdowns += 1


class CountingStore(MemoryTaskStore):
    """A real memory store that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0

    async def save(self, record: TaskRecord) -> None:
        self.saves += 1
        await super().save(record)


async def within(aw: Awaitable[Any], limit: float = WAIT) -> Any:
    return await asyncio.wait_for(aw, limit)


async def launch(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Run ``coro`` in its own task and return once it has run up to its first real suspension.

    The wrapper sets ``entered`` and goes straight on into ``coro`` in the same step, so when this returns the
    call has been admitted by the engine (the memory store never suspends).
    """
    entered = asyncio.Event()

    async def wrapper() -> Any:
        entered.set()
        return await coro

    task = asyncio.create_task(wrapper())
    # Not under wait_for: its extra task hop would let tasks the call created run before we resume. The wrapper's
    # first step always runs, so this wait is bounded anyway.
    await entered.wait()
    return task


def req(
    text: str = "hi", *, task_id: str = "", context_id: str = "", now: bool = False, tenant: str = ""
) -> SendMessageRequest:
    config = SendMessageConfiguration(return_immediately=True) if now else None
    return SendMessageRequest(
        tenant=tenant, message=Message.user(text, task_id=task_id, context_id=context_id), configuration=config
    )


def as_task(result: Task | Message) -> Task:
    assert isinstance(result, Task), result
    return result


async def collect(items: AsyncIterator[StreamItem]) -> list[StreamItem]:
    async def run() -> list[StreamItem]:
        return [item async for item in items]

    out: list[StreamItem] = await within(run())
    return out


async def settle(engine: TaskEngine) -> None:
    """Wait until every runner of the engine has finished."""
    runners = {a.runner for a in engine.registry.values() if a.runner is not None}
    if runners:
        await within(asyncio.wait(runners))
    assert not engine.registry


async def stored(engine: TaskEngine, task_id: str, *, user: str = "anonymous", tenant: str = "") -> Task:
    record = await engine.store.get(task_id, tenant=tenant, owner=user)
    assert record is not None, f"task {task_id} is not stored"
    return record.task


def only_task_id(engine: TaskEngine) -> str:
    (task_id,) = engine.registry
    return task_id


def texts(task: Task) -> list[str]:
    return [p.text or "" for a in task.artifacts for p in a.parts]


def strictly_increasing(seqs: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(seqs))


def fold(events: list[Any]) -> tuple[str, TaskState | None]:
    """What a client folding one single-artifact stream ends up with: the artifact text and the last state."""
    parts: list[str] = []
    state: TaskState | None = None
    for event in events:
        if isinstance(event, Task):
            parts = texts(event)
            state = event.status.state
        elif isinstance(event, TaskArtifactUpdateEvent):
            chunk = [p.text or "" for p in event.artifact.parts]
            parts = [*parts, *chunk] if event.append else chunk
        elif isinstance(event, TaskStatusUpdateEvent):
            state = event.status.state
    return "".join(parts), state


Factory = Callable[..., Awaitable[TaskEngine]]


@pytest.fixture
async def engines() -> AsyncIterator[Factory]:
    made: list[TaskEngine] = []

    async def make(executor: AgentExecutor, *, start: bool = True, **options: Any) -> TaskEngine:
        engine = TaskEngine(executor, **options)
        if start:
            await engine.start()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await within(engine.shutdown(grace=0))


def forever() -> Awaitable[bool]:
    """Something an executor can wait on that never happens (only cancellation ends it)."""
    return asyncio.Event().wait()


# --- one message at a time per task, many tasks at once --------------------------------------------------


async def test_messages_to_one_task_are_processed_one_at_a_time(engines: Factory) -> None:
    order: list[str] = []
    a_started, release_a = asyncio.Event(), asyncio.Event()
    history_seen_by_b: list[str] = []

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        if ctx.task is None:
            await u.requires_input("first question?")
            return
        order.append(f"start {ctx.text}")
        await u.working()
        if ctx.text == "a":
            a_started.set()
            await release_a.wait()
            order.append("end a")
            await u.requires_input("second question?")
        else:
            history_seen_by_b.extend(m.text for m in ctx.task.history)
            order.append("end b")
            await u.complete_with_text("done")

    engine = await engines(Scripted(run))
    task = as_task(await within(engine.send(req("start"))))
    assert task.status.state is TaskState.INPUT_REQUIRED

    send_a = await launch(engine.send(req("a", task_id=task.id)))
    send_b = await launch(engine.send(req("b", task_id=task.id)))
    await within(a_started.wait())
    # b was admitted and waits in the task's queue; its execute has not started while a's runs.
    assert len(engine.registry[task.id].requests) == 1
    assert order == ["start a"]
    assert not send_b.done()

    release_a.set()
    result_a, result_b = await within(asyncio.gather(send_a, send_b))
    assert order == ["start a", "end a", "start b", "end b"]
    assert as_task(result_a).status.state is TaskState.INPUT_REQUIRED
    assert as_task(result_b).status.state is TaskState.COMPLETED
    # b ran on the task as a left it.
    assert history_seen_by_b == ["start", "first question?", "a", "second question?", "b"]


async def test_many_tasks_execute_concurrently(engines: Factory) -> None:
    n = 50
    running = 0
    all_running, go = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        nonlocal running
        u = TaskUpdater(q, ctx)
        await u.working()
        running += 1
        if running == n:
            all_running.set()
        await go.wait()
        await u.complete_with_text(ctx.text.upper())

    engine = await engines(Scripted(run))
    sends = [asyncio.create_task(engine.send(req(f"m{i}"))) for i in range(n)]
    await within(all_running.wait())
    assert engine.running_executions == n
    assert len(engine.registry) == n
    go.set()
    results = [as_task(r) for r in await within(asyncio.gather(*sends))]
    assert {r.status.state for r in results} == {TaskState.COMPLETED}
    assert [texts(r) for r in results] == [[f"M{i}"] for i in range(n)]
    assert len({r.id for r in results}) == n
    await settle(engine)
    assert engine.running_executions == 0


# --- blocking and returnImmediately -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "final",
    [TaskState.COMPLETED, TaskState.FAILED, TaskState.REJECTED, TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED],
)
async def test_blocking_send_waits_for_a_terminal_or_interrupted_state(engines: Factory, final: TaskState) -> None:
    reached, gate = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working("on it")
        reached.set()
        await gate.wait()
        await u.artifact("result")
        await u.update(final, "the end" if final in (TaskState.COMPLETED, TaskState.FAILED) else "need more")

    engine = await engines(Scripted(run))
    send = await launch(engine.send(req()))
    await within(reached.wait())
    assert not send.done()
    gate.set()
    task = as_task(await within(send))
    assert task.status.state is final
    assert texts(task) == ["result"]
    assert (await stored(engine, task.id)).status.state is final


async def test_return_immediately_answers_at_the_first_event(engines: Factory) -> None:
    reached, gate, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working()
        reached.set()
        await gate.wait()
        await u.complete_with_text("late")
        finished.set()

    engine = await engines(Scripted(run))
    task = as_task(await within(engine.send(req(now=True))))
    assert task.status.state in (TaskState.SUBMITTED, TaskState.WORKING)
    # The executor is still blocked: the answer did not wait for it.
    assert not finished.is_set()
    assert engine.running_executions == 1
    await within(reached.wait())
    gate.set()
    await within(finished.wait())
    await settle(engine)
    final = await engine.get_task(task.id)
    assert final.status.state is TaskState.COMPLETED
    assert texts(final) == ["late"]


async def test_return_immediately_with_a_message_agent_answers_with_the_message(engines: Factory) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await q.enqueue_event(Message.agent(f"echo {ctx.text}"))

    engine = await engines(Scripted(run))
    reply = await within(engine.send(req("x", now=True)))
    assert isinstance(reply, Message)
    assert reply.text == "echo x"


# --- multi-turn ------------------------------------------------------------------------------------------


def _asker() -> Script:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        if ctx.task is None:
            await u.requires_input("What is your name?")
        else:
            await u.complete_with_text(f"Hello {ctx.text}")

    return run


async def test_input_required_continues_on_the_same_task(engines: Factory) -> None:
    engine = await engines(Scripted(_asker()))
    first = as_task(await within(engine.send(req("hi", context_id="ctx-1"))))
    assert first.status.state is TaskState.INPUT_REQUIRED
    assert first.context_id == "ctx-1"
    assert first.status.message is not None
    assert first.status.message.text == "What is your name?"

    # The follow-up carries only the task id: it inherits the task's context.
    second = as_task(await within(engine.send(req("Ada", task_id=first.id))))
    assert second.id == first.id
    assert second.context_id == "ctx-1"
    assert second.status.state is TaskState.COMPLETED
    assert texts(second) == ["Hello Ada"]
    for task in (second, await stored(engine, first.id)):
        assert [(m.role.name, m.text) for m in task.history] == [
            ("USER", "hi"),
            ("AGENT", "What is your name?"),
            ("USER", "Ada"),
        ]
        assert {(m.task_id, m.context_id) for m in task.history} == {(first.id, "ctx-1")}


async def test_continuation_errors(engines: Factory) -> None:
    engine = await engines(Scripted(_asker()))
    paused = as_task(await within(engine.send(req("hi", context_id="ctx-1"))))

    with pytest.raises(InvalidParamsError):
        await within(engine.send(req("x", task_id=paused.id, context_id="another-context")))
    with pytest.raises(TaskNotFoundError):
        await within(engine.send(req("x", task_id="no-such-task")))

    done = as_task(await within(engine.send(req("Ada", task_id=paused.id, context_id="ctx-1"))))
    assert done.status.state is TaskState.COMPLETED
    with pytest.raises(UnsupportedOperationError):
        await within(engine.send(req("again", task_id=paused.id)))
    # None of the refused messages reached the task.
    assert [m.text for m in (await stored(engine, paused.id)).history] == ["hi", "What is your name?", "Ada"]


# --- cancel ----------------------------------------------------------------------------------------------


async def test_cancel_order_flag_then_cancelled_error_then_cancel_then_persisted(engines: Factory) -> None:
    order: list[tuple[Any, ...]] = []
    running = asyncio.Event()
    store = MemoryTaskStore()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).working()
        running.set()
        try:
            await forever()
        except asyncio.CancelledError:
            order.append(("CancelledError in execute", ctx.cancelled))
            raise

    async def cancel(ctx: RequestContext, q: EventQueue) -> None:
        record = await store.get(ctx.task_id)
        assert record is not None
        order.append(("cancel()", ctx.cancelled, record.task.status.state))

    engine = await engines(Scripted(run, cancel), store=store)
    send = await launch(engine.send(req()))
    await within(running.wait())
    task_id = only_task_id(engine)

    result = await within(engine.cancel(task_id))
    record = await store.get(task_id)
    assert record is not None
    order.append(("cancel returned", record.task.status.state))

    assert order == [
        ("CancelledError in execute", True),
        ("cancel()", True, TaskState.WORKING),
        ("cancel returned", TaskState.CANCELED),
    ]
    assert result.status.state is TaskState.CANCELED
    assert as_task(await within(send)).status.state is TaskState.CANCELED


async def test_cancel_grace_lets_a_cooperative_executor_stop_itself(engines: Factory) -> None:
    got_cancelled_error = False

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        nonlocal got_cancelled_error
        u = TaskUpdater(q, ctx)
        await u.working()
        try:
            await ctx.cancel_event.wait()
        except asyncio.CancelledError:
            got_cancelled_error = True
            raise
        await u.cancel("stopped at a clean point")

    engine = await engines(Scripted(run), cancel_grace=WAIT)
    await within(engine.send(req(now=True)))
    task = await within(engine.cancel(only_task_id(engine)))
    assert task.status.state is TaskState.CANCELED
    assert task.status.message is not None
    assert task.status.message.text == "stopped at a clean point"
    assert not got_cancelled_error


async def test_concurrent_cancels_of_one_task_both_answer_canceled(engines: Factory) -> None:
    running, in_cancel, release_cancel = asyncio.Event(), asyncio.Event(), asyncio.Event()
    cancel_calls: list[str] = []

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).working()
        running.set()
        await forever()

    async def cancel(ctx: RequestContext, q: EventQueue) -> None:
        cancel_calls.append("enter")
        in_cancel.set()
        try:
            await release_cancel.wait()  # e.g. releasing an upstream job
        except asyncio.CancelledError:
            cancel_calls.append("interrupted")
            raise
        cancel_calls.append("done")

    engine = await engines(Scripted(run, cancel))
    await within(engine.send(req(now=True)))
    await within(running.wait())
    task_id = only_task_id(engine)
    first = await launch(engine.cancel(task_id))
    await within(in_cancel.wait())
    second = await launch(engine.cancel(task_id))  # a client retrying its cancel
    release_cancel.set()
    results = await within(asyncio.gather(first, second))
    assert [r.status.state for r in results] == [TaskState.CANCELED, TaskState.CANCELED]
    assert cancel_calls == ["enter", "done"]
    assert (await stored(engine, task_id)).status.state is TaskState.CANCELED


async def test_cancel_of_a_terminal_task_is_refused(engines: Factory) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).complete_with_text("ok")

    engine = await engines(Scripted(run))
    task = as_task(await within(engine.send(req())))
    with pytest.raises(TaskNotCancelableError):
        await within(engine.cancel(task.id))
    with pytest.raises(TaskNotFoundError):
        await within(engine.cancel("no-such-task"))
    assert (await stored(engine, task.id)).status.state is TaskState.COMPLETED


async def test_cancel_of_an_input_required_task(engines: Factory) -> None:
    cancel_contexts: list[RequestContext] = []

    async def cancel(ctx: RequestContext, q: EventQueue) -> None:
        cancel_contexts.append(ctx)

    engine = await engines(Scripted(_asker(), cancel))
    paused = as_task(await within(engine.send(req())))
    assert paused.status.state is TaskState.INPUT_REQUIRED
    assert not engine.registry

    result = await within(engine.cancel(paused.id))
    assert result.status.state is TaskState.CANCELED
    assert (await stored(engine, paused.id)).status.state is TaskState.CANCELED
    (ctx,) = cancel_contexts
    assert ctx.cancelled
    assert ctx.task_id == paused.id
    assert ctx.message is None
    assert ctx.task is not None
    assert ctx.task.status.state is TaskState.INPUT_REQUIRED
    # The task is terminal now: it takes no more messages, and nothing of it lingers on the bus.
    with pytest.raises(UnsupportedOperationError):
        await within(engine.send(req("late answer", task_id=paused.id)))
    assert engine.bus.log_count() == 0
    assert not engine.registry


# --- failures --------------------------------------------------------------------------------------------

SECRET = "db-password=hunter2"


async def _raise_after_working(ctx: RequestContext, q: EventQueue) -> None:
    await TaskUpdater(q, ctx).working()
    raise RuntimeError(SECRET)


async def _raise_before_any_event(ctx: RequestContext, q: EventQueue) -> None:
    raise ValueError(SECRET)


async def _raise_own_timeout(ctx: RequestContext, q: EventQueue) -> None:
    # The agent's own timeout (e.g. an upstream call under asyncio.timeout) is a plain agent failure, not the
    # engine's executor_timeout (which is off here).
    await TaskUpdater(q, ctx).working()
    raise TimeoutError(SECRET)


@pytest.mark.parametrize("script", [_raise_after_working, _raise_before_any_event, _raise_own_timeout])
async def test_an_unhandled_exception_fails_the_task_with_a_safe_message(engines: Factory, script: Script) -> None:
    engine = await engines(Scripted(script))
    task = as_task(await within(engine.send(req())))
    assert task.status.state is TaskState.FAILED
    assert task.status.message is not None
    assert task.status.message.text
    saved = await stored(engine, task.id)
    assert saved.status.state is TaskState.FAILED
    for body in (task.to_json(), saved.to_json()):
        assert b"hunter2" not in body
    await settle(engine)


async def test_an_unhandled_exception_in_a_stream_ends_it_failed(engines: Factory) -> None:
    engine = await engines(Scripted(_raise_before_any_event))
    items = await collect(engine.stream(req()))
    assert items, "the stream must report the failure"
    _text, state = fold([event for _, event, _ in items])
    assert state is TaskState.FAILED
    assert all(b"hunter2" not in data for _, _, data in items)


async def test_executor_timeout_fails_the_task(engines: Factory) -> None:
    interrupted = asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).working()
        try:
            await forever()
        except asyncio.CancelledError:
            interrupted.set()
            raise

    engine = await engines(Scripted(run), executor_timeout=0.05)
    task = as_task(await within(engine.send(req())))
    assert task.status.state is TaskState.FAILED
    assert task.status.message is not None
    assert "0.05" in task.status.message.text
    assert interrupted.is_set()
    assert (await stored(engine, task.id)).status.state is TaskState.FAILED


async def test_executor_timeout_does_not_touch_a_fast_executor(engines: Factory) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).complete_with_text("quick")

    engine = await engines(Scripted(run), executor_timeout=WAIT)
    for _ in range(3):
        assert as_task(await within(engine.send(req()))).status.state is TaskState.COMPLETED


@pytest.mark.parametrize("outcome", ["return", "raise"])
async def test_the_queue_is_closed_after_execute_returns(engines: Factory, outcome: str) -> None:
    leaked: list[EventQueue] = []

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        leaked.append(q)
        await TaskUpdater(q, ctx).complete_with_text("ok")
        if outcome == "raise":
            raise RuntimeError("boom")

    engine = await engines(Scripted(run))
    task = as_task(await within(engine.send(req())))
    (queue,) = leaked
    assert queue.is_closed
    late = TaskStatusUpdateEvent(
        task_id=task.id, context_id=task.context_id, status=TaskStatus(state=TaskState.WORKING)
    )
    with pytest.raises(QueueClosedError):
        await queue.enqueue_event(late)
    assert (await stored(engine, task.id)).status.state is TaskState.COMPLETED


# --- invalid agent output --------------------------------------------------------------------------------


async def _message_after_task(ctx: RequestContext, q: EventQueue) -> None:
    await TaskUpdater(q, ctx).working()
    await q.enqueue_event(Message.agent("hello", context_id=ctx.context_id))


async def _event_for_another_task(ctx: RequestContext, q: EventQueue) -> None:
    await TaskUpdater(q, ctx).working()
    await q.enqueue_event(
        TaskStatusUpdateEvent(
            task_id="someone-elses-task", context_id=ctx.context_id, status=TaskStatus(state=TaskState.COMPLETED)
        )
    )


async def _append_to_unknown_artifact(ctx: RequestContext, q: EventQueue) -> None:
    u = TaskUpdater(q, ctx)
    await u.working()
    await u.artifact("x", artifact_id="never-started", append=True)


async def _returns_while_working(ctx: RequestContext, q: EventQueue) -> None:
    await TaskUpdater(q, ctx).working()


async def _working_after_completed(ctx: RequestContext, q: EventQueue) -> None:
    u = TaskUpdater(q, ctx)
    await u.complete_with_text("done")
    await u.working()


@pytest.mark.parametrize(
    ("script", "final", "logged"),
    [
        (_message_after_task, TaskState.FAILED, "invalid agent output"),
        (_event_for_another_task, TaskState.FAILED, "invalid agent output"),
        (_append_to_unknown_artifact, TaskState.FAILED, "invalid agent output"),
        (_returns_while_working, TaskState.FAILED, "still WORKING"),
        # A terminal task never changes again (not even to FAILED): the bad event is refused and logged.
        (_working_after_completed, TaskState.COMPLETED, "invalid agent output"),
    ],
)
async def test_invalid_agent_output_fails_the_task_and_logs_why(
    engines: Factory, caplog: pytest.LogCaptureFixture, script: Script, final: TaskState, logged: str
) -> None:
    refused: list[BaseException] = []

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        try:
            await script(ctx, q)
        except InvalidAgentResponseError as exc:
            refused.append(exc)
            raise

    engine = await engines(Scripted(run))
    with caplog.at_level(logging.ERROR, logger="relaykit.engine"):
        task = as_task(await within(engine.send(req())))
    assert task.status.state is final
    assert (await stored(engine, task.id)).status.state is final
    reasons = [r.getMessage() for r in caplog.records if r.name == "relaykit.engine" and r.levelno >= logging.ERROR]
    assert any(logged in reason and task.id in reason for reason in reasons), reasons
    if script is not _returns_while_working:
        assert len(refused) == 1  # the agent's enqueue_event raised
    if final is TaskState.FAILED:
        assert task.status.message is not None
        assert task.status.message.text
    if script is _event_for_another_task:
        assert await engine.store.get("someone-elses-task") is None


# --- message-only agents ---------------------------------------------------------------------------------


async def test_a_message_only_agent_replies_with_a_bare_message_and_stores_nothing(engines: Factory) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await q.enqueue_event(Message.agent(f"you said {ctx.text}"))

    engine = await engines(Scripted(run))
    reply = await within(engine.send(req("hi")))
    assert isinstance(reply, Message)
    assert reply.text == "you said hi"
    assert reply.context_id
    assert reply.task_id == ""

    in_context = await within(engine.send(req("again", context_id="ctx-7")))
    assert isinstance(in_context, Message)
    assert in_context.context_id == "ctx-7"

    items = await collect(engine.stream(req("streamed")))
    assert len(items) == 1
    assert isinstance(items[0][1], Message)
    assert items[0][1].task_id == ""

    assert (await engine.store.list(TaskQuery())).total_size == 0
    await settle(engine)
    assert engine.bus.log_count() == 0
    assert engine.bus.tap_count() == 0


# --- subscribers are bounded taps ------------------------------------------------------------------------

CHUNKS = 50


def _chunker(created: asyncio.Event, go: asyncio.Event) -> Script:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working()
        created.set()
        await go.wait()
        for i in range(CHUNKS):
            await u.artifact(f"{i},", artifact_id="out", append=i > 0, last_chunk=i == CHUNKS - 1)
        await u.complete()

    return run


EXPECTED = "".join(f"{i}," for i in range(CHUNKS))


@pytest.mark.parametrize("replay", [1000, 8], ids=["refill-from-replay", "restart-from-snapshot"])
async def test_a_subscriber_that_never_reads_does_not_block_the_executor(engines: Factory, replay: int) -> None:
    created, go = asyncio.Event(), asyncio.Event()
    bus = LocalEventBus(tap_limit=4, replay=replay)
    engine = await engines(Scripted(_chunker(created, go)), bus=bus)
    send = await launch(engine.send(req()))
    await within(created.wait())
    task_id = only_task_id(engine)
    sub = await within(engine.subscribe(task_id))  # opened, never read while the task runs
    go.set()

    final = as_task(await within(send))
    assert final.status.state is TaskState.COMPLETED
    saved = await stored(engine, task_id)
    assert "".join(texts(saved)) == EXPECTED
    assert len(saved.artifacts[0].parts) == CHUNKS

    # The slow subscriber reads at last: a consistent stream, ending at the terminal state.
    items = await collect(sub)
    assert strictly_increasing([seq for seq, _, _ in items])
    assert isinstance(items[0][1], Task)
    assert fold([event for _, event, _ in items]) == (EXPECTED, TaskState.COMPLETED)
    if replay < CHUNKS:
        assert any(isinstance(event, Task) for _, event, _ in items[1:]), "expected a snapshot after the overflow"
    assert engine.bus.tap_count() == 0
    assert engine.bus.log_count() == engine.bus.ended_count() == 1  # only its log, kept for resumes


@pytest.mark.parametrize("replay", [1000, 8], ids=["refill-from-replay", "restart-from-snapshot"])
async def test_a_slow_stream_reader_does_not_block_the_executor(engines: Factory, replay: int) -> None:
    created, go = asyncio.Event(), asyncio.Event()
    engine = await engines(Scripted(_chunker(created, go)), bus=LocalEventBus(tap_limit=4, replay=replay))
    items = engine.stream(req())
    first = await within(anext(items))
    await within(created.wait())
    go.set()
    await settle(engine)  # the execution ends although the stream was not read
    task_id = first[1].id
    assert (await stored(engine, task_id)).status.state is TaskState.COMPLETED
    rest = await collect(items)
    seqs = [first[0], *(seq for seq, _, _ in rest)]
    assert strictly_increasing(seqs)
    assert fold([first[1], *(event for _, event, _ in rest)]) == (EXPECTED, TaskState.COMPLETED)
    assert engine.bus.tap_count() == 0
    assert engine.bus.log_count() == engine.bus.ended_count() == 1  # only its log, kept for resumes


# --- a client going away never cancels the task ----------------------------------------------------------


def _gated(gate: asyncio.Event, reached: asyncio.Event | None = None) -> Script:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working()
        if reached is not None:
            reached.set()
        await gate.wait()
        await u.complete_with_text("finished")

    return run


async def test_closing_a_stream_does_not_cancel_the_task(engines: Factory) -> None:
    gate = asyncio.Event()
    engine = await engines(Scripted(_gated(gate)))
    items = engine.stream(req())
    _seq, first, _ = await within(anext(items))
    assert isinstance(first, Task)
    await items.aclose()
    assert engine.bus.tap_count() == 0
    assert first.id in engine.registry
    gate.set()
    await settle(engine)
    assert (await stored(engine, first.id)).status.state is TaskState.COMPLETED
    assert engine.bus.log_count() == engine.bus.ended_count() == 1  # only its log, kept for resumes


async def test_a_stream_never_read_admits_nothing(engines: Factory) -> None:
    # The message is admitted at the first read, as when the stream was an async generator.
    engine = await engines(Scripted(_gated(asyncio.Event())))
    items = engine.stream(req())
    await items.aclose()
    assert not engine.registry
    assert (await engine.store.list(TaskQuery())).total_size == 0


async def test_a_stream_whose_admission_failed_is_over(engines: Factory) -> None:
    engine = await engines(Scripted(_gated(asyncio.Event())))
    items = engine.stream(req(task_id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await anext(items)
    with pytest.raises(StopAsyncIteration):
        await anext(items)


async def test_cancelling_the_stream_consumer_does_not_cancel_the_task(engines: Factory) -> None:
    gate, got_first = asyncio.Event(), asyncio.Event()
    engine = await engines(Scripted(_gated(gate)))
    seen: list[StreamItem] = []

    async def consume() -> None:
        async for item in engine.stream(req()):
            seen.append(item)
            got_first.set()

    consumer = asyncio.create_task(consume())
    await within(got_first.wait())
    consumer.cancel()
    await within(asyncio.wait({consumer}))
    assert consumer.cancelled()
    task_id = seen[0][1].id
    gate.set()
    await settle(engine)
    assert (await stored(engine, task_id)).status.state is TaskState.COMPLETED
    assert engine.bus.tap_count() == 0
    assert engine.bus.log_count() == engine.bus.ended_count() == 1  # only its log, kept for resumes


async def test_a_stream_caller_leaving_before_its_execution_starts_leaks_no_tap(engines: Factory) -> None:
    gate = asyncio.Event()
    engine = await engines(Scripted(_gated(gate)))

    async def consume() -> None:
        async for _ in engine.stream(req()):
            pass

    consumer = await launch(consume())  # admitted, waiting for its execution to start
    consumer.cancel()
    await within(asyncio.wait({consumer}))
    gate.set()
    task_id = only_task_id(engine)
    await settle(engine)
    assert (await stored(engine, task_id)).status.state is TaskState.COMPLETED
    assert engine.bus.tap_count() == 0
    assert engine.bus.log_count() == 0


async def test_cancelling_a_blocking_send_does_not_cancel_the_task(engines: Factory) -> None:
    gate, reached = asyncio.Event(), asyncio.Event()
    engine = await engines(Scripted(_gated(gate, reached)))
    send = await launch(engine.send(req()))
    await within(reached.wait())
    task_id = only_task_id(engine)
    send.cancel()
    await within(asyncio.wait({send}))
    gate.set()
    await settle(engine)
    assert (await stored(engine, task_id)).status.state is TaskState.COMPLETED


async def test_a_message_reply_after_its_caller_left_is_harmless(engines: Factory) -> None:
    gate = asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await gate.wait()
        await q.enqueue_event(Message.agent("too late"))

    engine = await engines(Scripted(run))
    send = await launch(engine.send(req(now=True)))
    runner = engine.registry[only_task_id(engine)].runner
    assert runner is not None
    send.cancel()
    await within(asyncio.wait({send}))
    gate.set()
    await within(asyncio.wait({runner}))
    assert not runner.cancelled()
    assert runner.exception() is None
    assert not engine.registry
    assert engine.bus.log_count() == 0


# --- shutdown and restart --------------------------------------------------------------------------------


async def test_shutdown_fails_a_still_running_execution(engines: Factory) -> None:
    running = asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).working()
        running.set()
        await forever()

    executor = Scripted(run)
    engine = await engines(executor)
    send = await launch(engine.send(req()))
    await within(running.wait())
    task_id = only_task_id(engine)
    queued = await launch(engine.send(req("more", task_id=task_id)))

    await within(engine.shutdown(grace=0.05))

    task = as_task(await within(send))
    assert task.status.state is TaskState.FAILED
    assert task.status.message is not None
    assert task.status.message.text == "server shutdown"
    with pytest.raises(ServiceUnavailableError):
        await within(queued)
    saved = await stored(engine, task_id)
    assert saved.status.state is TaskState.FAILED
    assert saved.status.message is not None
    assert saved.status.message.text == "server shutdown"
    for state in (TaskState.SUBMITTED, TaskState.WORKING):
        assert (await engine.store.list(TaskQuery(state=state))).total_size == 0
    assert not engine.registry
    assert executor.shutdowns == 1
    with pytest.raises(ServiceUnavailableError):
        await within(engine.send(req()))


async def test_shutdown_grace_lets_running_executions_finish(engines: Factory) -> None:
    gate, reached = asyncio.Event(), asyncio.Event()
    engine = await engines(Scripted(_gated(gate, reached)))
    send = await launch(engine.send(req()))
    await within(reached.wait())
    stopping = await launch(engine.shutdown(grace=WAIT))
    assert not engine.accepting
    with pytest.raises(ServiceUnavailableError):
        await within(engine.send(req()))
    gate.set()
    await within(stopping)
    task = as_task(await within(send))
    assert task.status.state is TaskState.COMPLETED
    assert (await stored(engine, task.id)).status.state is TaskState.COMPLETED


async def test_start_fails_tasks_a_dead_process_left_active(engines: Factory) -> None:
    store = MemoryTaskStore()
    for state in (TaskState.SUBMITTED, TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.COMPLETED):
        task = Task(id=state.name, context_id="c", status=TaskStatus(state=state, timestamp=utc_now()))
        await store.save(TaskRecord(task))
    engine = await engines(Scripted(_asker()), store=store, start=False)
    assert await within(engine.start()) == 2
    for task_id, state in [
        ("SUBMITTED", TaskState.FAILED),
        ("WORKING", TaskState.FAILED),
        ("INPUT_REQUIRED", TaskState.INPUT_REQUIRED),
        ("COMPLETED", TaskState.COMPLETED),
    ]:
        task = await stored(engine, task_id)
        assert task.status.state is state
        if state is TaskState.FAILED:
            assert task.status.message is not None
            assert task.status.message.text == "server restarted"
    # The interrupted task survived the restart and can be continued.
    done = as_task(await within(engine.send(req("Ada", task_id="INPUT_REQUIRED"))))
    assert done.status.state is TaskState.COMPLETED


# --- SubscribeToTask and resume --------------------------------------------------------------------------


def _two_turns(reached: asyncio.Event, gate: asyncio.Event) -> Script:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working()
        if ctx.task is None:
            reached.set()
            await gate.wait()
            await u.requires_input("more?")
        else:
            await u.artifact(f"got {ctx.text}")
            await u.complete()

    return run


async def test_subscribe_snapshot_first_then_events_across_input_required_until_terminal(engines: Factory) -> None:
    reached, gate = asyncio.Event(), asyncio.Event()
    engine = await engines(Scripted(_two_turns(reached, gate)))
    send = await launch(engine.send(req()))
    await within(reached.wait())
    task_id = only_task_id(engine)

    sub = await within(engine.subscribe(task_id))
    seq0, snapshot, data = await within(anext(sub))
    assert isinstance(snapshot, Task)
    assert snapshot.status.state is TaskState.WORKING
    assert b'"task"' in data

    gate.set()
    assert as_task(await within(send)).status.state is TaskState.INPUT_REQUIRED
    seq1, paused, _ = await within(anext(sub))
    assert isinstance(paused, TaskStatusUpdateEvent)
    assert paused.status.state is TaskState.INPUT_REQUIRED

    # Still open across the interrupt: the continuation's events arrive on the same subscription.
    done = as_task(await within(engine.send(req("answer", task_id=task_id))))
    assert done.status.state is TaskState.COMPLETED
    rest = await collect(sub)
    seqs = [seq0, seq1, *(s for s, _, _ in rest)]
    assert strictly_increasing(seqs)
    events = [snapshot, paused, *(e for _, e, _ in rest)]
    assert fold(events) == ("got answer", TaskState.COMPLETED)
    assert isinstance(events[-1], TaskStatusUpdateEvent)
    assert events[-1].status.state is TaskState.COMPLETED
    assert engine.bus.tap_count() == 0
    assert engine.bus.log_count() == engine.bus.ended_count() == 1  # only its log, kept for resumes


async def test_subscribe_to_an_interrupted_task_that_is_not_executing(engines: Factory) -> None:
    engine = await engines(Scripted(_asker()))
    paused = as_task(await within(engine.send(req())))
    assert not engine.registry
    sub = await within(engine.subscribe(paused.id))
    _, snapshot, _ = await within(anext(sub))
    assert isinstance(snapshot, Task)
    assert snapshot.status.state is TaskState.INPUT_REQUIRED
    await within(engine.send(req("Ada", task_id=paused.id)))
    rest = await collect(sub)
    assert fold([snapshot, *(e for _, e, _ in rest)]) == ("Hello Ada", TaskState.COMPLETED)


@pytest.mark.parametrize("how", ["stream", "blocking", "immediate"])
@pytest.mark.parametrize("hook", [False, True], ids=["no-hook", "push-hook"])
async def test_subscribers_of_a_resumed_task_get_only_updates_its_caller_gets_the_task_first(
    engines: Factory, how: str, hook: bool
) -> None:
    # A subscription is one Task, then status and artifact updates (spec §3.1.6). The message that resumes the task
    # opens its own stream with the task as it resumes (§5.5): that snapshot is its caller's alone. A subscriber, live
    # or resuming from a Last-Event-ID, never gets it (a client folding the stream fails on a second Task). The push
    # hook (a webhook is no subscription) is told of it as of every event.
    engine = await engines(Scripted(_asker()))
    hooked: list[Any] = []
    if hook:

        async def on_event(active: Any, seq: int, event: Any, data: bytes) -> None:
            hooked.append(event)

        engine.on_event = on_event
    paused = as_task(await within(engine.send(req())))
    live = await within(engine.subscribe(paused.id))
    seq0, snapshot, _ = await within(anext(live))
    assert isinstance(snapshot, Task)
    resumed = await within(engine.subscribe(paused.id, last_event_id=seq0 - 1))  # replays the INPUT_REQUIRED first

    follow_up = req("Ada", task_id=paused.id, now=how == "immediate")
    own: list[StreamItem] = []
    if how == "stream":
        own = await collect(engine.stream(follow_up))
        opening = own[0][1]
        assert not any(isinstance(event, Task) for _, event, _ in own[1:])
    else:
        opening = as_task(await within(engine.send(follow_up)))
    if how != "blocking":
        assert isinstance(opening, Task)
        assert opening.status.state is TaskState.INPUT_REQUIRED
        assert opening.history[-1].text == "Ada"

    rest = await collect(live)
    replayed = await collect(resumed)
    assert not any(isinstance(event, Task) for _, event, _ in rest + replayed), rest + replayed
    assert isinstance(replayed[0][1], TaskStatusUpdateEvent)
    assert replayed[0][1].status.state is TaskState.INPUT_REQUIRED
    assert [(s, d) for s, _, d in replayed[1:]] == [(s, d) for s, _, d in rest]
    if own:
        assert [(s, d) for s, _, d in rest] == [(s, d) for s, _, d in own[1:]]
    assert strictly_increasing([seq0, *(s for s, _, _ in rest)])
    assert fold([snapshot, *(e for _, e, _ in rest)]) == ("Hello Ada", TaskState.COMPLETED)
    if hook:
        told = [event for event in hooked if isinstance(event, Task) and event.history[-1].text == "Ada"]
        assert len(told) == 1, hooked
    assert engine.bus.tap_count() == 0


async def test_subscribe_errors(engines: Factory) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).complete_with_text("ok")

    engine = await engines(Scripted(run))
    task = as_task(await within(engine.send(req())))
    with pytest.raises(UnsupportedOperationError):
        await within(engine.subscribe(task.id))
    with pytest.raises(TaskNotFoundError):
        await within(engine.subscribe("no-such-task"))


def _ten_chunks_then_ask() -> Script:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        if ctx.task is None:
            await u.working()
            for i in range(10):
                await u.artifact(f"c{i} ", artifact_id="out", append=i > 0)
            await u.requires_input("more?")
        else:
            await u.artifact(f"{ctx.text}", artifact_id="out", append=True, last_chunk=True)
            await u.complete()

    return run


async def test_resume_gives_exactly_the_events_after_last_event_id(engines: Factory) -> None:
    engine = await engines(Scripted(_ten_chunks_then_ask()))
    turn1 = await collect(engine.stream(req()))
    assert strictly_increasing([s for s, _, _ in turn1])
    task_id = turn1[0][1].id
    k = 4
    sub = await within(engine.subscribe(task_id, last_event_id=turn1[k][0]))
    resumed = [await within(anext(sub)) for _ in range(len(turn1) - k - 1)]
    assert [(s, d) for s, _, d in resumed] == [(s, d) for s, _, d in turn1[k + 1 :]]

    # Resuming from the very last id: nothing replayed; the next turn's updates follow. Not the Task its own stream
    # starts with: that is its caller's alone (a subscription is one Task, then updates only).
    tail = await within(engine.subscribe(task_id, last_event_id=turn1[-1][0]))
    turn2 = await collect(engine.stream(req("end", task_id=task_id)))
    assert isinstance(turn2[0][1], Task)
    updates = turn2[1:]
    rest = await collect(sub)
    assert [(s, d) for s, _, d in rest] == [(s, d) for s, _, d in updates]
    assert [(s, d) for s, _, d in await collect(tail)] == [(s, d) for s, _, d in updates]
    all_seqs = [s for s, _, _ in turn1 + turn2]
    assert strictly_increasing(all_seqs)
    expected = "".join(f"c{i} " for i in range(10)) + "end"
    assert fold([e for _, e, _ in turn1 + turn2]) == (expected, TaskState.COMPLETED)
    assert fold([e for _, e, _ in turn1[: k + 1] + resumed + rest]) == (expected, TaskState.COMPLETED)


async def test_resume_from_an_id_older_than_the_replay_ring_starts_with_a_snapshot(engines: Factory) -> None:
    engine = await engines(Scripted(_ten_chunks_then_ask()), bus=LocalEventBus(replay=4))
    turn1 = await collect(engine.stream(req()))
    task_id = turn1[0][1].id
    sub = await within(engine.subscribe(task_id, last_event_id=1))
    seq, snapshot, _ = await within(anext(sub))
    assert isinstance(snapshot, Task)
    assert snapshot.status.state is TaskState.INPUT_REQUIRED
    assert seq == turn1[-1][0]
    turn2 = await collect(engine.stream(req("end", task_id=task_id)))
    rest = await collect(sub)
    assert [(s, d) for s, _, d in rest] == [(s, d) for s, _, d in turn2[1:]]  # all but its caller's own Task
    expected = "".join(f"c{i} " for i in range(10)) + "end"
    assert fold([snapshot, *(e for _, e, _ in rest)]) == (expected, TaskState.COMPLETED)


async def test_resume_of_a_finished_task(engines: Factory) -> None:
    # A stream resumed after its task ended (CONTRACT "SSE and resume"): exactly the events after its id, then the
    # end; the finished task's log is kept for this (as the Redis bus keeps its stream), so a second resume works
    # too. Without an id, a finished task is refused as any subscription to it is (the final state is GetTask's).
    engine = await engines(Scripted(_ten_chunks_then_ask()))
    turn1 = await collect(engine.stream(req()))
    task_id = turn1[0][1].id
    turn2 = await collect(engine.stream(req("end", task_id=task_id)))
    assert engine.bus.tap_count() == 0
    # The second turn's opening Task was its own caller's alone (publish_private): no replay gives it again.
    assert isinstance(turn2[0][1], Task)
    everything = [(s, d) for s, _, d in turn1 + turn2[1:]]
    last = turn2[-1][0]
    assert await collect(await within(engine.subscribe(task_id, last_event_id=last))) == []
    for k in (2, 2, len(turn1) - 1):
        after = everything[k][0]
        resumed = await collect(await within(engine.subscribe(task_id, last_event_id=after)))
        assert [(s, d) for s, _, d in resumed] == everything[k + 1 :]
    assert engine.bus.tap_count() == 0
    assert engine.bus.log_count() == engine.bus.ended_count() == 1  # kept, once, and no reader left a tap
    with pytest.raises(UnsupportedOperationError):
        await engine.subscribe(task_id)


@pytest.mark.parametrize("why", ["older-than-the-ring", "expired", "beyond-the-top"])
async def test_resume_of_a_finished_task_the_log_no_longer_covers_gives_its_snapshot(
    engines: Factory, why: str
) -> None:
    # The CONTRACT's rule for an id older than the retained log: the Task snapshot first, then the events after it
    # (none: it is the final state), then the end; not an error. The snapshot's id is the task's last event's.
    now = [0.0]
    bus = LocalEventBus(replay=4 if why == "older-than-the-ring" else 1000)
    bus.clock = lambda: now[0]
    engine = await engines(Scripted(_ten_chunks_then_ask()), bus=bus)
    turn1 = await collect(engine.stream(req()))
    task_id = turn1[0][1].id
    turn2 = await collect(engine.stream(req("end", task_id=task_id)))
    last = turn2[-1][0]
    if why == "expired":
        now[0] += bus.ended_ttl + 1
    after = last + 5 if why == "beyond-the-top" else turn1[1][0]
    resumed = await collect(await within(engine.subscribe(task_id, last_event_id=after)))
    assert len(resumed) == 1
    seq, snapshot, data = resumed[0]
    assert isinstance(snapshot, Task)
    assert snapshot.status.state is TaskState.COMPLETED
    assert seq == last
    assert b'"task"' in data
    expected = "".join(f"c{i} " for i in range(10)) + "end"
    assert fold([snapshot]) == (expected, TaskState.COMPLETED)
    assert engine.bus.tap_count() == 0
    # An expired log is gone, and the snapshot-only resume did not bring it back.
    assert engine.bus.log_count() == engine.bus.ended_count() == (0 if why == "expired" else 1)


async def test_finished_logs_kept_for_resumes_are_capped(engines: Factory) -> None:
    # Beyond ``max_ended`` finished logs, the oldest go: a resume of those gets the snapshot (CONTRACT), the others
    # exactly their missed events.
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        for i in range(3):
            await u.artifact(f"{i}", artifact_id="out", append=i > 0)
        await u.complete()

    engine = await engines(Scripted(run), bus=LocalEventBus(max_ended=2))
    streams = [await collect(engine.stream(req(f"task {n}"))) for n in range(4)]
    assert engine.bus.log_count() == engine.bus.ended_count() == 2
    for n, items in enumerate(streams):
        resumed = await collect(await within(engine.subscribe(items[0][1].id, last_event_id=items[0][0])))
        if n < 2:
            assert [type(e) for _, e, _ in resumed] == [Task]
            assert resumed[0][0] == items[-1][0]
        else:
            assert [(s, d) for s, _, d in resumed] == [(s, d) for s, _, d in items[1:]]
    assert engine.bus.log_count() == engine.bus.ended_count() == 2


async def test_a_blocking_send_keeps_no_log_and_a_resume_of_it_gets_the_snapshot(engines: Factory) -> None:
    # Nobody had the event ids of a task nobody streamed: its log is dropped as it ends (the blocking send's hot
    # path keeps nothing), and a made-up id gets the snapshot.
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).complete_with_text("ok")

    engine = await engines(Scripted(run))
    task = as_task(await within(engine.send(req())))
    await settle(engine)
    assert engine.bus.log_count() == 0
    resumed = await collect(await within(engine.subscribe(task.id, last_event_id=1)))
    assert [type(e) for _, e, _ in resumed] == [Task]
    assert resumed[0][1].status.state is TaskState.COMPLETED
    assert engine.bus.log_count() == 0


async def test_event_ids_are_one_sequence_across_stream_and_subscribe(engines: Factory) -> None:
    reached, gate = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working()
        reached.set()
        await gate.wait()
        for i in range(5):
            await u.artifact(str(i), artifact_id="out", append=i > 0)
        await u.complete()

    engine = await engines(Scripted(run))
    items = engine.stream(req())
    streamed = [await within(anext(items))]
    await within(reached.wait())
    task_id = streamed[0][1].id
    sub = await within(engine.subscribe(task_id))
    snap_seq, snapshot, _ = await within(anext(sub))
    gate.set()
    streamed += await collect(items)
    subscribed = await collect(sub)

    seqs = [s for s, _, _ in streamed]
    assert strictly_increasing(seqs)
    # The snapshot stands for every event up to its id; the subscriber then sees the very same later events.
    assert snap_seq in seqs
    assert [(s, d) for s, _, d in subscribed] == [(s, d) for s, _, d in streamed if s > snap_seq]
    assert fold([snapshot, *(e for _, e, _ in subscribed)]) == ("01234", TaskState.COMPLETED)


# --- limits ----------------------------------------------------------------------------------------------


async def test_max_queued_messages_per_task(engines: Factory) -> None:
    reached, gate = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        if ctx.text == "a":
            await u.working()
            reached.set()
            await gate.wait()
        await u.requires_input("next?")

    engine = await engines(Scripted(run), max_queued=1)
    paused = as_task(await within(engine.send(req("start"))))
    running = await launch(engine.send(req("a", task_id=paused.id)))
    await within(reached.wait())
    queued = await launch(engine.send(req("b", task_id=paused.id)))
    with pytest.raises(ResourceExhaustedError):
        await within(engine.send(req("c", task_id=paused.id)))
    gate.set()
    for send in (running, queued):
        assert as_task(await within(send)).status.state is TaskState.INPUT_REQUIRED
    texts_in_history = [m.text for m in (await stored(engine, paused.id)).history if m.role.name == "USER"]
    assert texts_in_history == ["start", "a", "b"]


async def test_return_immediately_behind_a_running_execution(engines: Factory) -> None:
    """A returnImmediately follow-up to a task that is executing another message answers at once with the task as it
    is (WORKING), not when its own execution starts; the message still runs after the current one."""
    reached, gate = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        if ctx.text == "a":
            await u.working()
            reached.set()
            await gate.wait()
        await u.requires_input(f"after {ctx.text}")

    engine = await engines(Scripted(run))
    paused = as_task(await within(engine.send(req("start"))))
    running = await launch(engine.send(req("a", task_id=paused.id)))
    await within(reached.wait())
    answered = as_task(await within(engine.send(req("b", task_id=paused.id, now=True))))
    assert answered.id == paused.id
    assert answered.status.state is TaskState.WORKING
    assert not running.done()  # answered while "a" still runs
    gate.set()
    assert as_task(await within(running)).status.state is TaskState.INPUT_REQUIRED
    done = as_task(await within(engine.send(req("c", task_id=paused.id))))
    texts_in_history = [m.text for m in done.history if m.role.name == "USER"]
    assert texts_in_history == ["start", "a", "b", "c"]


async def test_max_concurrent_executions(engines: Factory) -> None:
    gate = asyncio.Event()
    engine = await engines(Scripted(_gated(gate)), max_concurrent=2)
    sends = [await launch(engine.send(req())) for _ in range(2)]
    assert engine.running_executions == 2
    with pytest.raises(ResourceExhaustedError):
        await within(engine.send(req()))
    gate.set()
    for send in sends:
        assert as_task(await within(send)).status.state is TaskState.COMPLETED
    await settle(engine)
    assert as_task(await within(engine.send(req()))).status.state is TaskState.COMPLETED


async def test_max_subscribers_per_task(engines: Factory) -> None:
    gate, reached = asyncio.Event(), asyncio.Event()
    engine = await engines(Scripted(_gated(gate, reached)), max_subscribers=2)
    send = await launch(engine.send(req()))
    await within(reached.wait())
    task_id = only_task_id(engine)
    first = await within(engine.subscribe(task_id))
    second = await within(engine.subscribe(task_id))
    with pytest.raises(ResourceExhaustedError):
        await within(engine.subscribe(task_id))
    # Closing a subscription (even one never read) frees its place.
    await first.aclose()  # type: ignore[attr-defined]
    third = await within(engine.subscribe(task_id))
    gate.set()
    assert as_task(await within(send)).status.state is TaskState.COMPLETED
    for sub in (second, third):
        assert fold([e for _, e, _ in await collect(sub)]) == ("finished", TaskState.COMPLETED)
    assert engine.bus.tap_count() == 0


# --- tenant and owner scoping ----------------------------------------------------------------------------

ALICE = CallContext(user="alice", tenant="acme")
OUTSIDERS = {
    "another user": CallContext(user="bob", tenant="acme"),
    "another tenant": CallContext(user="alice", tenant="globex"),
}


@pytest.mark.parametrize("executing", [False, True], ids=["idle", "executing"])
@pytest.mark.parametrize("outsider", list(OUTSIDERS))
async def test_a_task_is_invisible_outside_its_tenant_and_owner(
    engines: Factory, outsider: str, executing: bool
) -> None:
    reached, gate = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        if ctx.text == "hold":
            await u.working()
            reached.set()
            await gate.wait()
        await u.requires_input("more?")

    engine = await engines(Scripted(run))
    task = as_task(await within(engine.send(req("start"), ALICE)))
    send = None
    if executing:
        send = await launch(engine.send(req("hold", task_id=task.id), ALICE))
        await within(reached.wait())

    other = OUTSIDERS[outsider]
    with pytest.raises(TaskNotFoundError):
        await within(engine.get_task(task.id, other))
    with pytest.raises(TaskNotFoundError):
        await within(engine.cancel(task.id, other))
    with pytest.raises(TaskNotFoundError):
        await within(engine.subscribe(task.id, other))
    with pytest.raises(TaskNotFoundError):
        await within(engine.send(req("hijack", task_id=task.id), other))
    with pytest.raises(TaskNotFoundError):
        await within(engine.send(req("hijack", task_id=task.id, tenant=other.tenant), other))

    gate.set()
    if send is not None:
        await within(send)
    mine = await within(engine.get_task(task.id, ALICE))
    assert mine.status.state is TaskState.INPUT_REQUIRED
    assert "hijack" not in [m.text for m in mine.history]
    # The request's own tenant field scopes as well as the call's.
    with pytest.raises(TaskNotFoundError):
        await within(engine.get_task(task.id, ALICE, tenant="globex"))


# --- coalescing ------------------------------------------------------------------------------------------


async def test_a_thousand_chunks_cost_a_handful_of_writes(engines: Factory) -> None:
    n = 1000
    store = CountingStore()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working()
        for i in range(n):
            await u.artifact(f"{i};", artifact_id="big", append=i > 0, last_chunk=i == n - 1)
        await u.complete()

    engine = await engines(Scripted(run), store=store)
    items = await collect(engine.stream(req()))
    assert len(items) == n + 3  # Task, WORKING, n chunks, COMPLETED
    assert store.saves <= 10, store.saves
    saved = await stored(engine, items[0][1].id)
    assert saved.status.state is TaskState.COMPLETED
    assert texts(saved) == [f"{i};" for i in range(n)]


async def test_a_status_change_flushes_coalesced_chunks(engines: Factory) -> None:
    store = CountingStore()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working()
        await u.artifact("draft", artifact_id="a")
        await u.requires_input("ok?")

    engine = await engines(Scripted(run), store=store, checkpoint_chunks=10_000, checkpoint_seconds=3600)
    paused = as_task(await within(engine.send(req())))
    saved = await stored(engine, paused.id)
    assert saved.status.state is TaskState.INPUT_REQUIRED
    assert texts(saved) == ["draft"]


# --- the engine's own failures and races with a store that suspends ---------------------------------------


class BrokenStore(MemoryTaskStore):
    """A real memory store whose writes fail while ``broken`` (a full disk, a lost database connection)."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    async def save(self, record: TaskRecord) -> None:
        if self.broken:
            raise OSError("disk full")
        await super().save(record)


class GatedStore(MemoryTaskStore):
    """A real memory store that holds its ``hold_save``-th write mid-flight until ``release`` (as a SQLite or network
    write suspends)."""

    def __init__(self, hold_save: int) -> None:
        super().__init__()
        self.saves = 0
        self.hold_save = hold_save
        self.holding, self.release = asyncio.Event(), asyncio.Event()

    async def save(self, record: TaskRecord) -> None:
        self.saves += 1
        if self.saves == self.hold_save:
            self.holding.set()
            await self.release.wait()
        await super().save(record)


async def test_a_store_failure_is_an_error_for_every_caller_never_a_hang(engines: Factory) -> None:
    reached, gate = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        if ctx.text == "hold":
            reached.set()
            await gate.wait()
        await u.working()
        await u.requires_input("more?")

    store = BrokenStore()
    engine = await engines(Scripted(run), store=store)
    paused = as_task(await within(engine.send(req("start"))))

    store.broken = True
    with pytest.raises(InternalError):
        await within(engine.send(req("new task")))
    with pytest.raises(InternalError):
        await collect(engine.stream(req("new streamed task")))
    running = await launch(engine.send(req("hold", task_id=paused.id)))
    await within(reached.wait())
    queued = await launch(engine.send(req("queued", task_id=paused.id)))
    gate.set()
    for send in (running, queued):
        with pytest.raises(InternalError):
            await within(send)
    await settle(engine)

    # The engine recovers with the store: the task continues from its stored state.
    store.broken = False
    assert (await stored(engine, paused.id)).status.state is TaskState.INPUT_REQUIRED
    again = as_task(await within(engine.send(req("again", task_id=paused.id))))
    assert again.status.state is TaskState.INPUT_REQUIRED
    assert as_task(await within(engine.send(req("fresh")))).status.state is TaskState.INPUT_REQUIRED


async def test_shutdown_answers_a_caller_whose_agent_published_nothing(engines: Factory) -> None:
    running = asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        running.set()
        await forever()

    engine = await engines(Scripted(run))
    send = await launch(engine.send(req()))
    await within(running.wait())
    await within(engine.shutdown(grace=0))
    with pytest.raises(ServiceUnavailableError):
        await within(send)
    assert (await engine.store.list(TaskQuery())).total_size == 0


async def test_cancel_grace_still_interrupts_when_the_cancelling_caller_leaves(engines: Factory) -> None:
    running, interrupted = asyncio.Event(), asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx).working()
        running.set()
        try:
            await forever()
        except asyncio.CancelledError:
            interrupted.set()
            raise

    engine = await engines(Scripted(run), cancel_grace=0.05)
    await within(engine.send(req(now=True)))
    await within(running.wait())
    task_id = only_task_id(engine)
    canceller = await launch(engine.cancel(task_id))
    canceller.cancel()  # the client gave up on its CancelTask during the grace
    await within(asyncio.wait({canceller}))
    await within(interrupted.wait())
    await settle(engine)
    assert (await stored(engine, task_id)).status.state is TaskState.CANCELED


async def test_subscribe_during_an_in_flight_write_gets_each_event_once(engines: Factory) -> None:
    gate = asyncio.Event()

    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.working("step 1")
        await u.working("step 2")
        await gate.wait()
        await u.complete()

    # "step 1" (its first write: a blocking caller's new task is not written apart from its next state), then hold
    # "step 2"
    store = GatedStore(hold_save=2)
    engine = await engines(Scripted(run), store=store)
    send = await launch(engine.send(req()))
    await within(store.holding.wait())  # "step 2" is applied to the live task; its write has not finished
    task_id = only_task_id(engine)
    subscribing = await launch(engine.subscribe(task_id))
    store.release.set()
    sub = await within(subscribing)
    gate.set()
    items = await collect(sub)
    await within(send)

    snapshot = items[0][1]
    assert isinstance(snapshot, Task)
    said = [m.text for m in snapshot.history if m.role.name == "AGENT"]
    for _, event, _ in items[1:]:
        if isinstance(event, TaskStatusUpdateEvent) and event.status.message is not None:
            said.append(event.status.message.text)
    assert said == ["step 1", "step 2"]
    assert strictly_increasing([s for s, _, _ in items])


async def test_cancel_while_the_engine_records_an_interrupted_outcome(engines: Factory) -> None:
    async def run(ctx: RequestContext, q: EventQueue) -> None:
        u = TaskUpdater(q, ctx)
        await u.requires_input("which one?")
        await u.artifact("a draft")  # coalesced: written by the engine after execute returns

    # Writes: INPUT_REQUIRED (the task's first write), then (held) the engine's own write of the trailing chunk.
    store = GatedStore(hold_save=2)
    engine = await engines(Scripted(run), store=store, checkpoint_chunks=10_000, checkpoint_seconds=3600)
    send = await launch(engine.send(req()))
    await within(store.holding.wait())
    task_id = only_task_id(engine)
    cancelling = await launch(engine.cancel(task_id))
    store.release.set()
    result = await within(cancelling)
    assert result.status.state is TaskState.CANCELED
    assert as_task(await within(send)).status.state is TaskState.INPUT_REQUIRED
    saved = await stored(engine, task_id)
    assert saved.status.state is TaskState.CANCELED
    assert texts(saved) == ["a draft"]
