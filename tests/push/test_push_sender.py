"""Push delivery in this process, over real sockets: relaykit's app → relaykit's ``WebhookReceiver``.

Waits are on asyncio primitives the callbacks set (bounded by ``asyncio.wait_for``), never sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from push_helpers import A2A, Recorder, serving, wait_until

from relaykit import AgentExecutor, RequestContext, StreamResponse, TaskState, TaskUpdater, agent
from relaykit.backends._base import OutboxChanges
from relaykit.backends.memory import MemoryPushConfigStore
from relaykit.backends.sqlite import SQLitePushOutbox, SQLiteTaskStore
from relaykit.http import create_app
from relaykit.push import (
    DeliveryPolicy,
    MemoryPushOutbox,
    OutboxEntry,
    PushSender,
    WebhookGuard,
    WebhookReceiver,
)
from relaykit.push._rate import NotificationGate
from relaykit.server import CallContext, EventQueue
from relaykit.types import AuthenticationInfo, Message, SendMessageRequest, TaskPushNotificationConfig

FAST = DeliveryPolicy(timeout=5.0, backoff=0.02, max_backoff=0.1, max_attempts=5)
WAIT = 30.0


@agent
async def chunks(context):  # type: ignore[no-untyped-def]
    """Text N ⇒ N chunks."""
    for i in range(int(context.text)):
        yield f"chunk {i}"


class Collector:
    """A receiver callback that wakes waiters: ``await until(n)`` returns once n events arrived."""

    def __init__(self) -> None:
        self.events: list[StreamResponse] = []
        self._changed = asyncio.Event()

    def __call__(self, event: StreamResponse) -> None:
        self.events.append(event)
        self._changed.set()

    async def until(self, predicate: Any, timeout: float = WAIT) -> list[StreamResponse]:  # noqa: ASYNC109
        async def wait() -> None:
            while not predicate(self.events):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)
        return self.events


def terminal(events: list[StreamResponse]) -> bool:
    return any(e.status_update is not None and e.status_update.status.state.is_terminal for e in events)


async def send(http: httpx.AsyncClient, base: str, text: str, push: dict[str, Any]) -> dict[str, Any]:
    body = {
        "message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"taskPushNotificationConfig": push},
    }
    reply = await http.post(f"{base}/message:send", json=body, headers=A2A)
    assert reply.status_code == 200, reply.text
    return dict(reply.json()["task"])


async def test_signed_round_trip_through_the_jwks_endpoint(ec_pem: bytes) -> None:
    """create_app signs; WebhookReceiver fetches /.well-known/jwks.json, verifies, and gets every event in order."""
    collector = Collector()
    async with serving(WebhookReceiver(collector, token="t0k")) as _unused:
        pass  # (a receiver can be made before the agent's URL is known; the real one is below)
    app = create_app(
        chunks,
        store="memory",
        push_allow=("127.0.0.1",),
        push_policy=FAST,
        push_signing_key=ec_pem,
        push_key_id="k-2026",
    )
    async with serving(app) as agent_url:
        app.state.relaykit.handler.card  # noqa: B018 - the app is live
        receiver = WebhookReceiver(
            collector, jwks_url=f"{agent_url}/.well-known/jwks.json", token="t0k", issuer="http://localhost:8000"
        )
        async with serving(receiver) as hook, httpx.AsyncClient(timeout=30) as http:
            jwks = (await http.get(f"{agent_url}/.well-known/jwks.json")).json()
            assert [k["kid"] for k in jwks["keys"]] == ["k-2026"]
            task = await send(http, agent_url, "3", {"url": hook + "/hook", "token": "t0k"})
            events = await collector.until(terminal)
    kinds = [next(iter(e.to_dict())) for e in events]
    assert kinds == ["task", "artifactUpdate", "artifactUpdate", "artifactUpdate", "statusUpdate"]
    assert [e.artifact_update.artifact.parts[0].text for e in events if e.artifact_update] == [
        "chunk 0",
        "chunk 1",
        "chunk 2",
    ]
    assert all((e.task.id if e.task else e.payload.task_id) == task["id"] for e in events)  # type: ignore[union-attr]
    assert receiver.received == 5
    assert receiver.duplicates == 0


async def test_state_only_events_and_python_health_api() -> None:
    collector = Collector()
    app = create_app(chunks, store="memory", push_allow=("127.0.0.1",), push_policy=FAST, push_events="state")
    async with serving(WebhookReceiver(collector)) as hook, serving(app) as agent_url, httpx.AsyncClient() as http:
        task = await send(http, agent_url, "4", {"id": "only-states", "url": hook})
        events = await collector.until(terminal)
        sender = app.state.relaykit.push_sender
        await asyncio.wait_for(sender.drained(), WAIT)
        [health] = await sender.health(task["id"])
    assert [e.artifact_update for e in events] == [None] * len(events)
    states = [(e.task or e.status_update).status.state for e in events]  # type: ignore[union-attr]
    assert states[-1] is TaskState.COMPLETED
    assert len(states) == len(set(states))  # each state once
    assert (health.config_id, health.url, health.pending, health.dead) == ("only-states", hook, 0, 0)
    assert health.delivered == len(events)
    assert health.last_success is not None


class CountingOutbox(SQLitePushOutbox):
    """The real SQLite outbox, counting its transactions."""

    def __init__(self, tasks: SQLiteTaskStore) -> None:
        super().__init__(tasks)
        self.batches: list[OutboxChanges] = []

    async def commit(self, changes: OutboxChanges) -> None:
        self.batches.append(changes)
        await super().commit(changes)


async def test_a_thousand_chunks_are_batched_and_delivered_in_order(tmp_path: Path) -> None:
    tasks = SQLiteTaskStore(str(tmp_path / "batch.db"))
    outbox = CountingOutbox(tasks)
    collector = Collector()
    app = create_app(chunks, store=tasks, push_allow=("127.0.0.1",), push_policy=FAST, push_outbox=outbox)
    async with serving(WebhookReceiver(collector)) as hook, serving(app) as agent_url, httpx.AsyncClient() as http:
        task = await send(http, agent_url, "1000", {"url": hook})
        events = await collector.until(terminal, timeout=60)
        await asyncio.wait_for(app.state.relaykit.push_sender.drained(), WAIT)
        [health] = await app.state.relaykit.push_sender.health(task["id"])
    texts = [e.artifact_update.artifact.parts[0].text for e in events if e.artifact_update]
    assert texts == [f"chunk {i}" for i in range(1000)]
    added = [len(b.added) for b in outbox.batches if b.added]
    assert sum(added) == len(events) == 1002
    # The hook never waits for chunk writes; bursts share transactions.
    assert len(added) < 100, added
    assert len(outbox.batches) < 200
    assert (health.delivered, health.pending, health.failures) == (1002, 0, 0)


async def test_deleting_a_config_drops_its_pending_notifications(recorder: Recorder) -> None:
    recorder.control(fail_all=True, fail_status=503)
    app = create_app(
        chunks, store="memory", push_allow=("127.0.0.1",), push_policy=DeliveryPolicy(backoff=0.05, max_backoff=0.05)
    )
    async with serving(app) as agent_url, httpx.AsyncClient(timeout=30) as http:
        task = await send(http, agent_url, "3", {"id": "doomed", "url": recorder.url("/doomed")})
        sender = app.state.relaykit.push_sender
        await sender.flush()
        [before] = await sender.health(task["id"])
        assert before.pending == 5
        # The receiver (another process) has seen the head retried, then the config goes.
        await asyncio.to_thread(wait_until, lambda: len(recorder.records("/doomed")) >= 2, what="two attempts")
        reply = await http.delete(f"{agent_url}/tasks/{task['id']}/pushNotificationConfigs/doomed", headers=A2A)
        assert reply.status_code == 200
        await asyncio.wait_for(sender.drained(), WAIT)
        after = await sender.health(task["id"])
    # The config is gone, and so are its notifications; its health record stays.
    assert [(h.config_id, h.pending) for h in after] == [("doomed", 0)]
    assert after[0].failures >= 1


# --- the sender on its own: the connect-time SSRF guard ------------------------------------------------------


@pytest.fixture
async def bare_sender() -> AsyncIterator[Any]:
    made: list[PushSender] = []

    async def make(allow: tuple[str, ...] = ()) -> PushSender:
        sender = PushSender(MemoryPushConfigStore(), MemoryPushOutbox(), guard=WebhookGuard(allow), policy=FAST)
        await sender.start()
        made.append(sender)
        return sender

    yield make
    for sender in made:
        await sender.stop()


def _entry() -> OutboxEntry:
    return OutboxEntry("ev-1", "t-1", "c-1", 1, b'{"statusUpdate":{"taskId":"t-1"}}')


async def test_connect_time_guard_refuses_a_name_that_resolves_to_loopback(
    bare_sender: Any, recorder: Recorder
) -> None:
    """A config that skipped the config-time check (e.g. stored by an older version) still cannot reach loopback."""
    config = TaskPushNotificationConfig(id="c-1", task_id="t-1", url=recorder.url("/ssrf", host="localhost"))
    sender = await bare_sender()
    ok, error, _ = await sender.deliver(_entry(), config)
    assert not ok
    assert "SSRF guard" in error
    # The caller reads delivery errors (push status): the name is reported, never the address it resolved to.
    assert "localhost resolves to a loopback address" in error
    assert "127.0.0.1" not in error
    assert "--push-allow localhost" in error
    direct = TaskPushNotificationConfig(id="c-1", task_id="t-1", url=recorder.url("/ssrf"))
    ok, error, _ = await sender.deliver(_entry(), direct)
    assert not ok
    assert "127.0.0.1 is a loopback address" in error
    assert recorder.records("/ssrf") == []


@pytest.mark.parametrize("allow", ["localhost", "127.0.0.1", "127.0.0.0/8"])
async def test_allowed_targets_connect_to_the_checked_address_and_keep_the_host(
    bare_sender: Any, recorder: Recorder, allow: str
) -> None:
    config = TaskPushNotificationConfig(id="c-1", task_id="t-1", url=recorder.url("/ok", host="localhost"), token="tk")
    sender = await bare_sender((allow,))
    ok, error, _ = await sender.deliver(_entry(), config)
    assert ok, error
    [record] = recorder.records("/ok")
    assert record["headers"]["host"] == f"localhost:{recorder.port}"
    assert record["headers"]["x-a2a-notification-token"] == "tk"
    assert record["headers"]["content-type"] == "application/a2a+json"
    assert record["headers"]["x-relaykit-event-id"] == "ev-1"


async def test_redirects_are_not_followed_and_count_as_failures(bare_sender: Any, recorder: Recorder) -> None:
    recorder.control(fail_all=True, fail_status=307)
    sender = await bare_sender(("127.0.0.1",))
    config = TaskPushNotificationConfig(id="c-1", task_id="t-1", url=recorder.url("/moved"))
    ok, error, _ = await sender.deliver(_entry(), config)
    assert (ok, error) == (False, "HTTP 307")
    assert len(recorder.records("/moved")) == 1


async def test_a_slow_receiver_times_out(bare_sender: Any, recorder: Recorder) -> None:
    recorder.control(delay=2.0)
    sender = await bare_sender(("127.0.0.1",))
    sender.policy = DeliveryPolicy(timeout=0.3)
    config = TaskPushNotificationConfig(id="c-1", task_id="t-1", url=recorder.url("/slow"))
    ok, error, _ = await sender.deliver(_entry(), config)
    assert (ok, error) == (False, "timed out after 0.3 s")


async def test_the_engine_hook_is_installed_only_once_a_config_may_exist(tmp_path: Path) -> None:
    """A server whose tasks have no push configs runs its engine without the hook (no per-event encoding for it)."""
    store = f"sqlite:///{tmp_path / 'arm.db'}"
    app = create_app(chunks, store=store)
    server = app.state.relaykit
    await server.start()
    try:
        assert server.engine.on_event is None
        task = await server.engine.send(SendMessageRequest(message=Message.user("2")))
        assert server.engine.on_event is None
        config = TaskPushNotificationConfig(task_id=task.id, url="https://hooks.example.com/a2a")
        await server.handler.create_push_config(config, CallContext())
        assert server.engine.on_event == server.push_sender.on_event
    finally:
        await server.stop()
    again = create_app(chunks, store=store).state.relaykit
    await again.start()
    try:
        assert again.engine.on_event == again.push_sender.on_event  # the store holds a config: armed at start
    finally:
        await again.stop()


class Paused(AgentExecutor):
    """WORKING, then waits for ``go`` before it completes (``started`` says which task it is working on)."""

    def __init__(self) -> None:
        self.started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.go = asyncio.Event()

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        await updater.start_work()
        self.started.set_result(context.task_id)
        await self.go.wait()
        await updater.complete_with_text("done")


async def test_a_config_put_before_a_new_tasks_first_published_event_receives_it(tmp_path: Path) -> None:
    """A blocking caller waits for the outcome alone, so its new task's first snapshot (WORKING) is never published.
    A config created for the task meanwhile (by a client that found it with ListTasks) still gets the COMPLETED
    event, and the push hook never reads the config store for the task: it was told of the task at its creation."""
    paused = Paused()
    collector = Collector()
    app = create_app(paused, store=f"sqlite:///{tmp_path / 'early.db'}", push_allow=("127.0.0.1",), push_policy=FAST)
    server = app.state.relaykit
    store_reads: list[str] = []
    async with serving(WebhookReceiver(collector)) as hook, serving(app) as agent_url, httpx.AsyncClient() as http:
        sender = server.push_sender
        sender.arm()  # as when any task of the server has a config
        configs = sender.configs.store
        listed = configs.list

        async def counted_list(task_id: str, **scope: Any) -> Any:
            store_reads.append(task_id)
            return await listed(task_id, **scope)

        configs.list = counted_list
        body = {"message": {"messageId": "m-early", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
        answer = asyncio.create_task(http.post(f"{agent_url}/message:send", json=body, headers=A2A, timeout=WAIT))
        task_id = await asyncio.wait_for(paused.started, WAIT)
        # The task's row is written at the end of the loop pass it was created in, before this wakes up
        # (Recorder._create): wait for that write to land.
        first_write = server.engine.registry[task_id].first_write
        if first_write is not None:
            await asyncio.wait_for(asyncio.shield(first_write), WAIT)
        assert await server.engine.store.get(task_id) is not None
        config = {"taskId": task_id, "id": "early", "url": hook}
        created = await http.post(f"{agent_url}/tasks/{task_id}/pushNotificationConfigs", json=config, headers=A2A)
        assert created.status_code == 200, created.text
        paused.go.set()
        reply = await asyncio.wait_for(answer, WAIT)
        assert reply.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        events = await collector.until(terminal)
    assert [e.status_update.status.state for e in events if e.status_update] == [TaskState.COMPLETED]
    assert task_id not in store_reads


@pytest.mark.parametrize(
    "unusable",
    [
        {"token": "s3cr3t-token\r\nX-Injected: 1"},
        {"token": "s3cr3t-t\u00f6ken"},
        {"authentication": AuthenticationInfo(scheme="Bearer", credentials="s3cr3t-cr\u00e9dentials")},
        {"url": "http://xn--zz/hook"},
    ],
    ids=["crlf-token", "non-ascii-token", "non-ascii-credentials", "invalid-idna-host"],
)
async def test_a_stored_config_no_request_can_carry_ends_as_dead_letters(
    recorder: Recorder, caplog: pytest.LogCaptureFixture, unusable: dict[str, Any]
) -> None:
    """A config the config-time checks would refuse, already in the store (put there directly, or by an older
    version): each attempt fails like any other failure, so its notifications are dead letters after the policy's
    attempts (not one entry retried every second, with a traceback each time, until max_age), and neither the
    delivery errors nor the log quote its header values."""
    caplog.set_level(logging.INFO, logger="relaykit")
    paused = Paused()
    policy = DeliveryPolicy(timeout=5.0, backoff=0.01, max_backoff=0.02, max_attempts=3)
    app = create_app(paused, store="memory", push_allow=("127.0.0.1",), push_policy=policy)
    server = app.state.relaykit
    async with serving(app) as agent_url, httpx.AsyncClient() as http:
        body = {"message": {"messageId": "m-unusable", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
        answer = asyncio.create_task(http.post(f"{agent_url}/message:send", json=body, headers=A2A, timeout=WAIT))
        task_id = await asyncio.wait_for(paused.started, WAIT)
        fields = {"url": recorder.url("/unusable"), **unusable}
        config = TaskPushNotificationConfig(id="unusable", task_id=task_id, **fields)
        await server.handler.push_store.put(config)  # past the handler's checks
        paused.go.set()
        reply = await asyncio.wait_for(answer, WAIT)
        assert reply.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        sender = server.push_sender
        await asyncio.wait_for(sender.drained(), WAIT)
        dead = await sender.dead_letters(task_id)
        [health] = await sender.health(task_id)
    assert dead
    assert [e.attempts for e in dead] == [policy.max_attempts] * len(dead)
    assert (health.pending, health.dead, health.failures) == (0, len(dead), policy.max_attempts * len(dead))
    assert recorder.records("/unusable") == []
    errors = [e.last_error for e in dead] + [health.last_error]
    assert all(errors), errors
    assert not [e for e in errors if "s3cr3t" in e], errors
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert "s3cr3t" not in caplog.text


async def test_after_coalesced_chunks_the_next_notification_is_the_task_as_it_stands() -> None:
    """Chunks beyond a task's notification budget are not sent (push._rate); a receiver that rebuilds the streamed
    artifact from the deltas (``append``) would then miss them. The notification after a dropped one (here the
    terminal one) is a ``{"task": ...}`` snapshot, so the receiver ends with the whole artifact."""
    collector = Collector()
    app = create_app(chunks, store="memory", push_allow=("127.0.0.1",), push_policy=FAST)
    sender = app.state.relaykit.push_sender
    sender.gate = NotificationGate(rate=0.001, burst=3)  # three chunks notified, the others coalesced

    def done(events: list[StreamResponse]) -> bool:
        last = events[-1] if events else None
        status = last.task.status if last is not None and last.task else None
        return terminal(events) or (status is not None and status.state.is_terminal)

    async with serving(WebhookReceiver(collector)) as hook, serving(app) as agent_url, httpx.AsyncClient() as http:
        await send(http, agent_url, "20", {"url": hook})
        events = await collector.until(done)
    # What a receiver rebuilds: a snapshot replaces the artifacts, an append update extends its artifact.
    artifacts: dict[str, list[str]] = {}
    for event in events:
        if event.task is not None:
            artifacts = {a.artifact_id: [p.text for p in a.parts] for a in event.task.artifacts}
        elif event.artifact_update is not None:
            update = event.artifact_update
            texts = [p.text for p in update.artifact.parts]
            if update.append:
                artifacts.setdefault(update.artifact.artifact_id, []).extend(texts)
            else:
                artifacts[update.artifact.artifact_id] = texts
    assert list(artifacts.values()) == [[f"chunk {i}" for i in range(20)]]
    kinds = [next(iter(e.to_dict())) for e in events]
    assert kinds[-1] == "task"
    snapshot = events[-1].task
    assert snapshot is not None
    assert snapshot.status.state is TaskState.COMPLETED
    assert kinds.count("artifactUpdate") == 3
