"""A stored task the reader cannot validate (an earlier release accepted a request nested ~230 deep; the reader,
jiter, stops at 200 levels) neither keeps the server from starting nor is taken for the client's mistake.

On main, ``fail_orphans`` aborted start-up on the first such WORKING row ("validation error for Task"): one
anonymous request took the server down for every tenant. Now each active row is failed on its own, the unreadable
one as a FAILED task with its id and context only; a terminal one left unreadable is a clear internal error when
read by id, on JSON-RPC, REST and gRPC ("task T is stored in a form this server cannot read"; before, a generic
-32603 / 500 after a logged traceback quoting the row's content), and ListTasks leaves it out and lists the owner's
other tasks (before, the whole listing failed). The log names the task, never its content. SQLite and PostgreSQL,
the stores a restart reads back, with rows put there by a store and by hand (a body cut short too).

Nor does such a row hold up any other read of many rows: the idempotency window refilled on start (before, one body
the database's JSON functions refuse made start-up fail), the owed push notifications recovered on start and by the
sweep (before, one unreadable marked row failed every recovery, so no other owed notification was ever delivered),
and a scale-out sweep taking lost tasks over (before, it stopped at the unreadable one).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from tests.push.push_helpers import serving

from relaykit import StreamResponse, agent
from relaykit._enums import Role, TaskState
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit._types import Artifact, Message, Part, Task, TaskPushNotificationConfig, TaskStatus
from relaykit.backends import TaskRecord, TaskStore
from relaykit.backends.sqlite import SQLiteTaskStore
from relaykit.grpc import GrpcServer
from relaykit.http import create_app
from relaykit.push import DeliveryPolicy, WebhookReceiver
from relaykit.testing import StreamingASGITransport

V1 = {"A2A-Version": "1.0"}


@agent
async def echo(context: Any) -> str:
    return str(context.text)


def task(task_id: str, state: TaskState) -> Task:
    history = [Message(message_id=f"m-{task_id}", role=Role.USER, parts=[Part(text="hi")])]
    return Task(id=task_id, context_id=f"c-{task_id}", status=TaskStatus(state=state), history=history)


def unreadable(task: Task) -> bytes:
    deep = b'{"a":' * 230 + b"1" + b"}" * 230
    return task.to_json()[:-1] + b',"metadata":' + deep + b"}"


@pytest.fixture(params=["sqlite", "postgres"])
async def seeded(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A store left by a dead process: two WORKING tasks, one unreadable, and an unreadable COMPLETED one."""
    store: TaskStore
    options: dict[str, Any] = {}
    if request.param == "sqlite":
        url = "sqlite:///" + str(tmp_path / "left.db")
        store = SQLiteTaskStore(tmp_path / "left.db")
    else:
        from relaykit.backends.postgres import PostgresTaskStore

        url = request.getfixturevalue("postgres_url")
        options["namespace"] = request.getfixturevalue("pg_namespace")
        store = PostgresTaskStore(url, namespace=options["namespace"])
    await store.start()
    try:
        await store.save(TaskRecord(task("working", TaskState.WORKING)))
        broken = task("broken", TaskState.WORKING)
        await store.save(TaskRecord(broken, body=unreadable(broken)))
        done = task("done-broken", TaskState.COMPLETED)
        await store.save(TaskRecord(done, body=unreadable(done)))
    finally:
        await store.close()
    return url, options


async def rpc(c: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    r = await c.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_an_unreadable_active_task_does_not_stop_the_start(seeded: tuple[str, dict[str, Any]]) -> None:
    url, options = seeded
    app = create_app(echo, store=url, **options)
    await app.state.relaykit.start()  # raised "validation error for Task" on main
    try:
        transport = StreamingASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relaykit.test", headers=V1) as c:
            working = (await rpc(c, "GetTask", {"id": "working"}))["result"]
            assert working["status"]["state"] == "TASK_STATE_FAILED"
            assert working["status"]["message"]["parts"] == [{"text": "server restarted"}]
            assert [m["parts"][0]["text"] for m in working["history"]] == ["hi", "server restarted"]
            broken = (await rpc(c, "GetTask", {"id": "broken"}))["result"]
            assert (broken["contextId"], broken["status"]["state"]) == ("c-broken", "TASK_STATE_FAILED")
            assert "stored content could not be read" in broken["status"]["message"]["parts"][0]["text"]
            assert "metadata" not in broken
            # The COMPLETED row was not an orphan: it stays unreadable, which is the server's fault, not the
            # caller's page token (on main: -32602 "invalid pageToken"); the listing leaves it out.
            listed = await rpc(c, "ListTasks", {})
            assert sorted(t["id"] for t in listed["result"]["tasks"]) == ["broken", "working"], listed
            done = await rpc(c, "GetTask", {"id": "done-broken"})
            assert done["error"]["code"] == -32603, done
            assert "done-broken is stored in a form this server cannot read" in done["error"]["message"]
            # A new task works as ever.
            new = {"messageId": "m-new", "role": "ROLE_USER", "parts": [{"text": "x"}]}
            sent = await rpc(c, "SendMessage", {"message": new})
            assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        await app.state.relaykit.stop()


# --- rows put in by hand, read on every binding ------------------------------------------------------------------

SECRET = "secret-content-of-the-row"
TIMEOUT = 20.0


def unreadable_bodies() -> dict[str, bytes]:
    """Task ids => bodies no reader takes: metadata nested 230 levels (jiter reads 200; an earlier release's parser
    of large bodies stored ~990), nested 100,000 levels (past the databases' JSON functions too: SQLite's 1,000 or
    2,000 levels, PostgreSQL's stack), and a body cut short."""

    def body(task_id: str) -> bytes:
        return (
            b'{"id":"%s","contextId":"ctx-old","status":{"state":"TASK_STATE_COMPLETED"},'
            b'"history":[{"messageId":"m-%s","role":"ROLE_USER","parts":[{"text":"%s"}]}]'
        ) % (task_id.encode(), task_id.encode(), SECRET.encode())

    def nested(depth: int) -> bytes:
        return b'{"a":' * depth + b'"' + SECRET.encode() + b'"' + b"}" * depth

    return {
        "t-deep": body("t-deep") + b',"metadata":' + nested(230) + b"}",
        "t-deeper": body("t-deeper") + b',"metadata":' + nested(100_000) + b"}",
        "t-cut": body("t-cut")[:-30],
    }


@dataclass
class Row:
    """A task row as an earlier release (or damage) left it: owner anonymous, default tenant."""

    task_id: str
    body: bytes
    state: str = "TASK_STATE_COMPLETED"
    age: float = 0.0  # seconds since its status (and its owed marker) was written
    owed: int = 0  # its owed push marker (the event seq owed), 0 for none


class Table:
    """The store's task table, reached directly; ``options`` are create_app's store options."""

    options: dict[str, Any]

    async def insert(self, *rows: Row) -> None:
        raise NotImplementedError

    async def markers(self) -> dict[str, int | None]:
        """Task id => its owed push marker."""
        raise NotImplementedError


class SQLiteTable(Table):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.options = {"store": f"sqlite:///{path}"}

    async def insert(self, *rows: Row) -> None:
        now = time.time()
        conn = sqlite3.connect(self.path, timeout=TIMEOUT)
        try:
            with conn:
                conn.executemany(
                    "INSERT INTO relaykit_tasks (id, tenant, owner, context_id, state, status_ts, version, "
                    "event_seq, body, push_owed, push_owed_at) VALUES (?, '', 'anonymous', 'ctx-old', ?, ?, 1, 3, ?, "
                    "?, ?)",
                    [
                        (
                            r.task_id,
                            r.state,
                            int((now - r.age) * 1e6),
                            r.body,
                            r.owed or None,
                            now - r.age if r.owed else None,
                        )
                        for r in rows
                    ],
                )
        finally:
            conn.close()

    async def markers(self) -> dict[str, int | None]:
        conn = sqlite3.connect(self.path, timeout=TIMEOUT)
        try:
            return dict(conn.execute("SELECT id, push_owed FROM relaykit_tasks").fetchall())
        finally:
            conn.close()


class PostgresTable(Table):
    def __init__(self, url: str, namespace: str) -> None:
        self.url, self.namespace = url, namespace
        self.options = {"store": url, "namespace": namespace}

    async def insert(self, *rows: Row) -> None:
        import asyncpg

        now = datetime.now(UTC)
        conn = await asyncpg.connect(self.url, timeout=TIMEOUT)
        try:
            async with conn.transaction():
                await conn.executemany(
                    f"INSERT INTO {self.namespace}_tasks (id, tenant, owner, context_id, state, status_ts, version, "
                    "event_seq, body, push_owed, push_owed_at) VALUES ($1, '', 'anonymous', 'ctx-old', $2, $3, 1, 3, "
                    "$4, $5, $6)",
                    [
                        (
                            r.task_id,
                            r.state,
                            int((now - timedelta(seconds=r.age)).timestamp() * 1e6),
                            r.body,
                            r.owed or None,
                            now - timedelta(seconds=r.age) if r.owed else None,
                        )
                        for r in rows
                    ],
                )
        finally:
            await conn.close()

    async def markers(self) -> dict[str, int | None]:
        import asyncpg

        conn = await asyncpg.connect(self.url, timeout=TIMEOUT)
        try:
            return {r[0]: r[1] for r in await conn.fetch(f"SELECT id, push_owed FROM {self.namespace}_tasks")}
        finally:
            await conn.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Table:
    if request.param == "sqlite":
        return SQLiteTable(tmp_path / "old.db")
    return PostgresTable(request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_namespace"))


@pytest.fixture
async def served(table: Table) -> AsyncIterator[tuple[Any, Table]]:
    """An app over the store, and its table."""
    app = create_app(echo, **table.options)
    await app.state.relaykit.start()
    try:
        yield app, table
    finally:
        await app.state.relaykit.stop()


async def test_an_unreadable_row_is_a_clear_internal_error_and_the_others_are_listed(
    served: tuple[Any, Table], caplog: pytest.LogCaptureFixture
) -> None:
    app, table = served
    transport = StreamingASGITransport(app)
    grpc_server = GrpcServer(app.state.relaykit, host="127.0.0.1", port=0)
    port = await grpc_server.start()
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://relaykit.test", headers=V1, timeout=TIMEOUT
        ) as c:
            good = []
            for text in ("first", "second"):
                message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
                good.append((await rpc(c, "SendMessage", {"message": message}))["result"]["task"]["id"])
            bad = unreadable_bodies()
            await table.insert(*(Row(task_id, body) for task_id, body in bad.items()))
            caplog.clear()

            for task_id in bad:
                expected = f"task {task_id} is stored in a form this server cannot read"
                got = await rpc(c, "GetTask", {"id": task_id})
                assert got["error"]["code"] == -32603, got
                assert expected in got["error"]["message"]
                r = await c.get(f"/tasks/{task_id}")
                assert r.status_code == 500, r.text
                assert r.json()["error"]["status"] == "INTERNAL"
                assert expected in r.json()["error"]["message"]
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    call = channel.unary_unary("/lf.a2a.v1.A2AService/GetTask")
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await call(
                            pb.GetTaskRequest(id=task_id).SerializeToString(), metadata=(("a2a-version", "1.0"),)
                        )
                assert refused.value.code() == grpc.StatusCode.INTERNAL
                assert expected in (refused.value.details() or "")
                # A follow-up names the task: the same answer, nothing run.
                follow = {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "taskId": task_id,
                    "parts": [{"text": "x"}],
                }
                sent = await rpc(c, "SendMessage", {"message": follow})
                assert sent["error"]["code"] == -32603, sent
                assert expected in sent["error"]["message"]

            listed = (await rpc(c, "ListTasks", {}))["result"]
            assert [t["id"] for t in listed["tasks"]] == good[::-1], listed
            for query in ({"historyLength": 0}, {"includeArtifacts": True}, {"historyLength": 1, "pageSize": 5}):
                listed = (await rpc(c, "ListTasks", query))["result"]
                assert [t["id"] for t in listed["tasks"]] == good[::-1], (query, listed)
            r = await c.get("/tasks")
            assert r.status_code == 200, r.text
            assert [t["id"] for t in r.json()["tasks"]] == good[::-1]
            # The good tasks read as ever.
            assert (await rpc(c, "GetTask", {"id": good[0]}))["result"]["id"] == good[0]
    finally:
        await grpc_server.stop(0.5)

    text = caplog.text
    for task_id in bad:
        assert task_id in text
    assert SECRET not in text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# --- reads of many rows: the idempotency window, owed push notifications, the scale-out sweep ---------------------


def client(app: Any) -> httpx.AsyncClient:
    transport = StreamingASGITransport(app)
    return httpx.AsyncClient(transport=transport, base_url="http://relaykit.test", headers=V1, timeout=TIMEOUT)


def user_message(message_id: str, text: str) -> dict[str, Any]:
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}


async def test_an_unreadable_row_neither_stops_the_start_nor_empties_the_idempotency_window(
    table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    """The window is refilled on start from the tasks stored within it, by one statement reading each body's first
    message with the database's JSON functions. On main, one body they cannot read (cut short; nested past SQLite's
    limit or PostgreSQL's stack; on PostgreSQL even a valid task whose text holds \\u0000, which any client may send)
    made the start fail. Now the start completes, and a retry of every other message gets its original task."""
    runs: Counter[str] = Counter()

    @agent
    async def counted(context: Any) -> str:
        runs[context.message.message_id] += 1
        return str(context.text)

    sent = {"m-plain": "hello", "m-nul": "a\u0000b"}
    first = create_app(counted, **table.options)
    await first.state.relaykit.start()
    try:
        async with client(first) as c:
            original = {}
            for message_id, text in sent.items():
                original[message_id] = (await rpc(c, "SendMessage", user_message(message_id, text)))["result"]["task"]
    finally:
        await first.state.relaykit.stop()
    bad = unreadable_bodies()
    await table.insert(*(Row(task_id, body) for task_id, body in bad.items()))
    caplog.clear()

    again = create_app(counted, **table.options)
    await again.state.relaykit.start()  # on main: "malformed JSON" (SQLite), a DataError or "stack depth" (PostgreSQL)
    try:
        async with client(again) as c:
            for message_id, text in sent.items():
                repeated = (await rpc(c, "SendMessage", user_message(message_id, text)))["result"]["task"]
                assert repeated["id"] == original[message_id]["id"]
                assert repeated["status"]["state"] == "TASK_STATE_COMPLETED"
                assert repeated["artifacts"] == original[message_id]["artifacts"]
    finally:
        await again.state.relaykit.stop()
    assert runs == Counter({"m-plain": 1, "m-nul": 1})  # neither ran again
    named = [r.getMessage() for r in caplog.records if "idempotency window" in r.getMessage()]
    assert len(named) == 1, caplog.text
    assert "t-cut" in named[0]
    assert "t-deeper" in named[0]
    assert SECRET not in caplog.text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


FAST = DeliveryPolicy(timeout=5.0, backoff=0.02, max_backoff=0.1, max_attempts=5)


class Webhook:
    """The snapshots (``{"task": ...}``) a webhook receives, by task id."""

    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}
        self._arrived = asyncio.Event()

    def __call__(self, event: StreamResponse) -> None:
        if event.task is not None:
            self.tasks[event.task.id] = event.task
            self._arrived.set()

    async def snapshot(self, task_id: str) -> Task:
        async def arrived() -> Task:
            while task_id not in self.tasks:
                self._arrived.clear()
                await self._arrived.wait()
            return self.tasks[task_id]

        return await asyncio.wait_for(arrived(), TIMEOUT)


def completed(task_id: str) -> bytes:
    done = task(task_id, TaskState.COMPLETED)
    done.artifacts = [Artifact(artifact_id="a", parts=[Part(text=f"done: {task_id}")])]
    return done.to_json()


async def add_configs(app: Any, url: str, task_ids: list[str]) -> None:
    store = app.state.relaykit.push_sender.configs.store
    for task_id in task_ids:
        await store.put(TaskPushNotificationConfig(task_id=task_id, id="hook", url=url))


async def test_an_unreadable_owed_row_holds_up_no_other_push_notification_at_start(
    table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    """States a dead process stored with their push notifications owed (the marker set, the outbox never told):
    the next start sends each a snapshot. On main, one such task it cannot read failed that recovery, and with it
    the start. Now the others are sent, and the unreadable one's marker is cleared (logged by id)."""
    bad = unreadable_bodies()
    webhook = Webhook()
    async with serving(WebhookReceiver(webhook)) as url:
        first = create_app(echo, push_allow=("127.0.0.1",), push_policy=FAST, **table.options)
        await first.state.relaykit.start()
        try:
            await add_configs(first, url, ["o-good", *bad])
        finally:
            await first.state.relaykit.stop()
        await table.insert(Row("o-good", completed("o-good"), owed=3), *(Row(i, b, owed=3) for i, b in bad.items()))
        caplog.clear()
        again = create_app(echo, push_allow=("127.0.0.1",), push_policy=FAST, **table.options)
        await again.state.relaykit.start()  # on main: "validation error for Task"
        try:
            snapshot = await webhook.snapshot("o-good")
            await asyncio.wait_for(again.state.relaykit.push_sender.drained(), TIMEOUT)
        finally:
            await again.state.relaykit.stop()
    assert snapshot.status.state is TaskState.COMPLETED
    assert snapshot.artifacts[0].parts[0].text == "done: o-good"
    assert sorted(webhook.tasks) == ["o-good"]
    assert await table.markers() == dict.fromkeys(["o-good", *bad], None)  # none left to be read again
    named = [r.getMessage() for r in caplog.records if "owed push notifications" in r.getMessage()]
    assert len(named) == 1, caplog.text
    assert all(task_id in named[0] for task_id in bad)
    assert SECRET not in caplog.text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_an_unreadable_owed_row_holds_up_no_other_push_notification_in_the_sweep(
    table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    """A marker the push hook did not settle (it failed; on PostgreSQL, also a dead replica's) is swept while the
    server runs. On main, one unreadable marked task failed every sweep: no other owed notification went out, ever,
    and the failure was logged again each sweep."""
    bad = unreadable_bodies()
    webhook = Webhook()
    app = create_app(echo, push_allow=("127.0.0.1",), push_policy=FAST, **table.options)
    app.state.relaykit.push_sender.sweep_every = 0.1  # instead of 10 s (PostgreSQL: a third of the lease)
    async with serving(WebhookReceiver(webhook)) as url:
        await app.state.relaykit.start()
        try:
            await add_configs(app, url, ["s-good", *bad])
            caplog.clear()
            # Stored an hour ago: older than any sweep's age (PostgreSQL's is the lease).
            await table.insert(
                Row("s-good", completed("s-good"), age=3600, owed=3),
                *(Row(i, b, age=3600, owed=3) for i, b in bad.items()),
            )
            snapshot = await webhook.snapshot("s-good")
            await asyncio.wait_for(app.state.relaykit.push_sender.drained(), TIMEOUT)
        finally:
            await app.state.relaykit.stop()
    assert snapshot.status.state is TaskState.COMPLETED
    assert sorted(webhook.tasks) == ["s-good"]
    assert await table.markers() == dict.fromkeys(["s-good", *bad], None)
    named = [r.getMessage() for r in caplog.records if "owed push notifications" in r.getMessage()]
    assert len(named) == 1, caplog.text  # once: the markers are cleared, so no later sweep reads them again
    assert all(task_id in named[0] for task_id in bad)
    assert "sweep (owed notifications) failed" not in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_a_scale_out_sweep_takes_the_other_lost_tasks_over(
    postgres_url: str, redis_url: str, cluster_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Replicas: a live worker's sweep takes over each active task nobody runs (here two, their worker gone). On
    main, the sweep stopped at the first one it could not read (its claim raised), so every later one of that sweep
    waited for the next; now the sweep goes on, and the next finds the readable one taken over (FAILED "worker
    lost", its executor not idempotent)."""
    from relaykit.backends.postgres import PostgresTaskStore

    schema = PostgresTaskStore(postgres_url, namespace=cluster_namespace, exclusive=False)
    await schema.start()
    await schema.close()
    lost = task("o-lost", TaskState.WORKING)
    # Listed oldest first: the unreadable one comes first.
    await PostgresTable(postgres_url, cluster_namespace).insert(
        Row("o-bad", unreadable(task("o-bad", TaskState.WORKING)), state="TASK_STATE_WORKING", age=7200),
        Row("o-lost", lost.to_json(), state="TASK_STATE_WORKING", age=3600),
    )
    app = create_app(
        echo, store=postgres_url, bus=redis_url, namespace=cluster_namespace, push=False, lease=1.0, grace=1.0
    )
    server = app.state.relaykit
    store = server.engine.store
    listed = store.orphans
    states: list[TaskState] = []  # o-lost's state as each sweep begins
    second = asyncio.Event()

    async def orphans(*, unstarted_after: float, limit: int = 100) -> Any:
        record = await store.get("o-lost")
        states.append(record.task.status.state)
        if len(states) == 2:
            second.set()
        return await listed(unstarted_after=unstarted_after, limit=limit)

    store.orphans = orphans
    await server.start()
    try:
        await asyncio.wait_for(second.wait(), TIMEOUT)
    finally:
        stopping = asyncio.ensure_future(server.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10.0)
        if not done:  # as tests/cluster/test_sweeper_race.py: should RedisEventBus.close() hang, cancel its reader
            server.engine.bus._reader.cancel()
        await asyncio.wait_for(stopping, 10.0)
    assert states[:2] == [TaskState.WORKING, TaskState.FAILED]  # on main: still WORKING as the second sweep began
    assert "sweep failed" not in caplog.text
    assert "o-bad" in caplog.text
