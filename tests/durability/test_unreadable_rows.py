"""A stored task the reader cannot validate (an earlier release accepted a request nested ~230 deep; the reader,
jiter, stops at 200 levels) neither keeps the server from starting nor is taken for the client's mistake.

On main, ``fail_orphans`` aborted start-up on the first such WORKING row ("validation error for Task"): one
anonymous request took the server down for every tenant. Now each active row is failed on its own, the unreadable
one as a FAILED task with its id and context only; a terminal one left unreadable is an internal error on
ListTasks, not an "invalid pageToken". SQLite and PostgreSQL, the stores a restart reads back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from relaykit import agent
from relaykit._enums import Role, TaskState
from relaykit._types import Message, Part, Task, TaskStatus
from relaykit.backends import TaskRecord, TaskStore
from relaykit.backends.sqlite import SQLiteTaskStore
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
            # caller's page token (on main: -32602 "invalid pageToken").
            listed = await rpc(c, "ListTasks", {})
            assert listed["error"]["code"] == -32603, listed
            assert "pageToken" not in str(listed)
            # A new task works as ever.
            new = {"messageId": "m-new", "role": "ROLE_USER", "parts": [{"text": "x"}]}
            sent = await rpc(c, "SendMessage", {"message": new})
            assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        await app.state.relaykit.stop()
