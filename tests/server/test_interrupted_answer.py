"""A blocking SendMessage returns when the task is terminal **or interrupted** (digest §5.4), even when the agent's
execution goes on after the interrupted state: an agent that asks for a credential (AUTH_REQUIRED) and waits for it
to arrive out of band (an OAuth callback) used to hold its blocking caller until the execution ended. Now the caller
gets the interrupted task, stored, at once; the execution goes on and finishes the task; a cancel meanwhile still
interrupts the execution and answers CANCELED (it waits for the execution's end, not for the caller's answer).
"""

from __future__ import annotations

import asyncio

import pytest

from relaykit import AgentExecutor, RequestContext, TaskUpdater
from relaykit.server import EventQueue
from relaykit.testing import InProcessClient
from relaykit.testing._inprocess import build_app
from relaykit.types import Message, Part, Role, Task, TaskState, TaskStatus

WAIT = 5.0


class OutOfBand(AgentExecutor):
    """Goes to ``state`` (an interrupted one), then waits for ``granted`` and completes the same execution."""

    def __init__(self, state: TaskState) -> None:
        self.state = state
        self.granted = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        await updater.update(self.state, "sign in at https://example.test/authorize")
        try:
            await self.granted.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        await updater.complete_with_text("calendar: 3 meetings")


async def _grant_and_follow(client: InProcessClient, agent: OutOfBand, task_id: str) -> Task:
    """Subscribe (the task is still interrupted: its execution goes on), grant the credential once the snapshot has
    come, and follow the task to its end."""
    async with asyncio.timeout(WAIT):
        async for event in client.subscribe(task_id):
            if isinstance(event, Task):
                assert event.status.state in (TaskState.AUTH_REQUIRED, TaskState.INPUT_REQUIRED)
                agent.granted.set()
            elif getattr(event, "status", None) is not None and event.status.state is TaskState.COMPLETED:
                break
    return await client.get_task(task_id)


@pytest.mark.parametrize("state", [TaskState.AUTH_REQUIRED, TaskState.INPUT_REQUIRED])
async def test_a_blocking_send_returns_at_an_interrupted_state_while_the_execution_goes_on(state: TaskState) -> None:
    agent = OutOfBand(state)
    async with InProcessClient(build_app(agent)) as client:
        task = await asyncio.wait_for(client.send("what is on my calendar?"), WAIT)
        assert isinstance(task, Task)
        assert task.status.state is state
        assert task.status.message is not None
        stored = await client.get_task(task.id)
        assert stored.status.state is state
        # The credential arrives out of band: the same execution completes the task.
        done = await _grant_and_follow(client, agent, task.id)
    assert done.status.state is TaskState.COMPLETED
    assert done.artifacts[0].parts[0].text == "calendar: 3 meetings"


async def test_a_cancel_after_the_early_answer_interrupts_the_execution() -> None:
    agent = OutOfBand(TaskState.AUTH_REQUIRED)
    async with InProcessClient(build_app(agent)) as client:
        task = await asyncio.wait_for(client.send("what is on my calendar?"), WAIT)
        assert isinstance(task, Task)
        assert task.status.state is TaskState.AUTH_REQUIRED
        canceled = await asyncio.wait_for(client.cancel(task.id), WAIT)
        assert canceled.status.state is TaskState.CANCELED
        assert agent.cancelled.is_set()  # the execution was interrupted before CancelTask answered
        assert (await client.get_task(task.id)).status.state is TaskState.CANCELED


async def test_a_repeat_of_the_message_gets_the_same_answer() -> None:
    """The idempotency window answers a repeat with the interrupted task too, not by waiting for the execution."""
    agent = OutOfBand(TaskState.AUTH_REQUIRED)
    async with InProcessClient(build_app(agent)) as client:
        message = Message(message_id="m-once", role=Role.USER, parts=[Part(text="calendar?")])
        first = await asyncio.wait_for(client.send(message), WAIT)
        again = await asyncio.wait_for(client.send(message.model_copy()), WAIT)
        assert isinstance(first, Task)
        assert isinstance(again, Task)
        assert again.id == first.id
        assert again.status.state is TaskState.AUTH_REQUIRED
        assert (await _grant_and_follow(client, agent, first.id)).status.state is TaskState.COMPLETED


@pytest.mark.postgres
@pytest.mark.redis
async def test_scale_out_answers_at_the_interrupted_state_too(
    postgres_url: str, redis_url: str, cluster_namespace: str
) -> None:
    """A replica that runs the message it accepted answers its blocking caller at the interrupted state as well."""
    agent = OutOfBand(TaskState.AUTH_REQUIRED)
    app = build_app(agent, store=postgres_url, bus=redis_url, namespace=cluster_namespace, push=False)
    async with InProcessClient(app) as client:
        task = await asyncio.wait_for(client.send("what is on my calendar?"), WAIT)
        assert isinstance(task, Task)
        assert task.status.state is TaskState.AUTH_REQUIRED
        done = await _grant_and_follow(client, agent, task.id)
    assert done.status.state is TaskState.COMPLETED


class AsksWhenCancelled(AgentExecutor):
    """Works until a cancel is requested, then (during the cancel's grace) asks for a credential and ignores the
    cancel: only the engine's interruption after the grace ends it."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        await updater.working()
        await context.cancel_event.wait()
        await updater.requires_auth("sign in first")
        try:
            await asyncio.Event().wait()  # never set: not cooperative
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def test_an_answer_during_the_cancel_grace_does_not_stop_the_interruption() -> None:
    """An interrupted state published during ``cancel_grace`` answers the send's caller; the grace's timer must still
    interrupt the execution when it runs out (it was stopped by that answer, and CancelTask waited for ever)."""
    agent = AsksWhenCancelled()
    async with InProcessClient(build_app(agent, cancel_grace=0.2)) as client:
        message = Message(message_id="m-grace", role=Role.USER, parts=[Part(text="go")])
        task = await asyncio.wait_for(client.send(message, return_immediately=True), WAIT)
        assert isinstance(task, Task)
        canceled = await asyncio.wait_for(client.cancel(task.id), WAIT)
    assert canceled.status.state is TaskState.CANCELED
    assert agent.cancelled.is_set()


class StartsInterrupted(OutOfBand):
    """Publishes its first event as a whole Task already in ``state``, then waits for the credential."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        status = TaskStatus(state=self.state, message=TaskUpdater(queue, context).message("sign in first"))
        await queue.enqueue_event(Task(id=context.task_id, context_id=context.context_id, status=status))
        await self.granted.wait()
        await TaskUpdater(queue, context).complete_with_text("calendar: 3 meetings")


async def test_a_task_that_starts_interrupted_answers_its_blocking_caller_at_once() -> None:
    agent = StartsInterrupted(TaskState.AUTH_REQUIRED)
    async with InProcessClient(build_app(agent)) as client:
        task = await asyncio.wait_for(client.send("what is on my calendar?"), WAIT)
        assert isinstance(task, Task)
        assert task.status.state is TaskState.AUTH_REQUIRED
        done = await _grant_and_follow(client, agent, task.id)
    assert done.status.state is TaskState.COMPLETED


@pytest.mark.postgres
@pytest.mark.redis
async def test_scale_out_keeps_the_claim_while_an_auth_required_execution_goes_on(
    postgres_url: str, redis_url: str, cluster_namespace: str
) -> None:
    """Answered at AUTH_REQUIRED, the execution goes on on replica A, which keeps its claim: a cancel sent to replica B
    reaches the agent on A (before, the claim went with the AUTH_REQUIRED write, B cancelled the task at rest, and the
    agent on A ran on, holding its execution slot, its later writes refused)."""
    from relaykit._requests import SendMessageRequest
    from relaykit.http import create_app
    from relaykit.server import CallContext

    agent = OutOfBand(TaskState.AUTH_REQUIRED)
    replicas = [
        create_app(agent, store=postgres_url, bus=redis_url, namespace=cluster_namespace, push=False).state.relaykit
        for _ in range(2)
    ]
    for server in replicas:
        await server.start()
    try:
        a, b = (server.engine for server in replicas)
        call = CallContext()
        request = SendMessageRequest(message=Message(message_id="m-a", role=Role.USER, parts=[Part(text="calendar?")]))
        task = await asyncio.wait_for(a.send(request, call), WAIT)
        assert isinstance(task, Task)
        assert task.status.state is TaskState.AUTH_REQUIRED
        canceled = await asyncio.wait_for(b.cancel(task.id, call), WAIT)
        assert canceled.status.state is TaskState.CANCELED
        await asyncio.wait_for(agent.cancelled.wait(), WAIT)  # the execution on A was interrupted
        assert (await a.get_task(task.id, call)).status.state is TaskState.CANCELED
    finally:
        for server in replicas:
            await asyncio.wait_for(server.stop(), WAIT)
