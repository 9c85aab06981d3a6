"""A stored task the reader cannot validate (an earlier release accepted a request nested ~230 deep; the reader,
jiter, stops at 200 levels) neither keeps the server from starting nor is taken for the client's mistake.

On main, ``fail_orphans`` aborted start-up on the first such WORKING row ("validation error for Task"): one
anonymous request took the server down for every tenant. Now each active row is failed on its own, the unreadable
one as a FAILED task with its id and context only; a terminal one left unreadable is a clear internal error when
read by id, on JSON-RPC, REST and gRPC ("task T is stored in a form this server cannot read"; before, a generic
-32603 / 500 after a logged traceback quoting the row's content), and ListTasks leaves it out and lists the owner's
other tasks (before, the whole listing failed). The log names the task, never its content. SQLite and PostgreSQL,
the stores a restart reads back, with rows put there by a store and by hand (a body cut short too).
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from relaykit import agent
from relaykit._enums import Role, TaskState
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit._types import Message, Part, Task, TaskStatus
from relaykit.backends import TaskRecord, TaskStore
from relaykit.backends.sqlite import SQLiteTaskStore
from relaykit.grpc import GrpcServer
from relaykit.http import create_app
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
Insert = Callable[[str, bytes], Awaitable[None]]


def unreadable_bodies() -> dict[str, bytes]:
    """Task ids => bodies no reader takes: metadata nested 230 levels (jiter reads 200; an earlier release's parser
    of large bodies stored ~990), and a body cut short."""

    def body(task_id: str) -> bytes:
        return (
            b'{"id":"%s","contextId":"ctx-old","status":{"state":"TASK_STATE_COMPLETED"},'
            b'"history":[{"messageId":"m","role":"ROLE_USER","parts":[{"text":"%s"}]}]'
        ) % (task_id.encode(), SECRET.encode())

    deep = b'{"a":' * 230 + b'"' + SECRET.encode() + b'"' + b"}" * 230
    return {"t-deep": body("t-deep") + b',"metadata":' + deep + b"}", "t-cut": body("t-cut")[:-30]}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def served(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[tuple[Any, Insert]]:
    """An app over the store, and a function that inserts a task row into its table directly (owner anonymous)."""
    options: dict[str, Any] = {}
    if request.param == "sqlite":
        path = tmp_path / "old.db"
        store = f"sqlite:///{path}"

        async def insert(task_id: str, body: bytes) -> None:
            conn = sqlite3.connect(path, timeout=TIMEOUT)
            try:
                with conn:
                    conn.execute(
                        "INSERT INTO relaykit_tasks (id, tenant, owner, context_id, state, status_ts, version, "
                        "event_seq, body) VALUES (?, '', 'anonymous', 'ctx-old', 'TASK_STATE_COMPLETED', ?, 1, 3, ?)",
                        (task_id, time.time_ns() // 1000, body),
                    )
            finally:
                conn.close()

    else:
        import asyncpg

        store = request.getfixturevalue("postgres_url")
        namespace = options["namespace"] = request.getfixturevalue("pg_namespace")

        async def insert(task_id: str, body: bytes) -> None:
            conn = await asyncpg.connect(store, timeout=TIMEOUT)
            try:
                await conn.execute(
                    f"INSERT INTO {namespace}_tasks (id, tenant, owner, context_id, state, status_ts, version, "
                    "event_seq, body) VALUES ($1, '', 'anonymous', 'ctx-old', 'TASK_STATE_COMPLETED', $2, 1, 3, $3)",
                    task_id,
                    time.time_ns() // 1000,
                    body,
                )
            finally:
                await conn.close()

    app = create_app(echo, store=store, **options)
    await app.state.relaykit.start()
    try:
        yield app, insert
    finally:
        await app.state.relaykit.stop()


async def test_an_unreadable_row_is_a_clear_internal_error_and_the_others_are_listed(
    served: tuple[Any, Insert], caplog: pytest.LogCaptureFixture
) -> None:
    app, insert = served
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
            for task_id, body in bad.items():
                await insert(task_id, body)
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
