"""Resuming a stream after its task ended (CONTRACT "SSE and resume"), over real HTTP on the embedded (memory) bus,
the default of ``relaykit serve``, with the memory and the SQLite store.

A client streams ``examples/stream.py``, reads the first events and disconnects; the task runs on to COMPLETED.
Coming back with ``Last-Event-ID: X`` (REST, JSON-RPC, the ``lastEventId`` query parameter, 0.3
``tasks/resubscribe``), it gets exactly the events after X, then the stream ends, as on the Redis bus: the embedded
bus keeps a finished task's log for a while. From the last id: an empty stream that ends. Without a
``Last-Event-ID``, a finished task is still refused (UnsupportedOperation: the final state is GetTask's). After a
restart on the same SQLite file the log is gone: the Task snapshot, then the end (CONTRACT: X older than the log).

Raw HTTP (httpx, SSE parsed by hand): relaykit's own client would hide a refusal behind its GetTask fallback. Every
wait is bounded; waiting for the task to end polls the server process (GetTask), bounded.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.servers import start_serve
from tests.cluster.client import (
    A2A_HEADERS,
    CALL_TIMEOUT,
    Sse,
    chunks,
    events,
    message,
    open_stream,
    open_subscribe,
    subscribe_request,
    wait_for_state,
)

STREAM = "examples/stream.py"
N = 6  # chunks: the task's events are the Task, WORKING, 6 chunks and COMPLETED
READ_FIRST = 3  # events the client reads before it disconnects
T = 20.0  # seconds: the bound of each test's waits
ENV = {"STREAM_DELAY": "0.05"}  # the task runs on for a while after the client left


@pytest.fixture(scope="module")
def own_sqlite(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite file of this module's own (the session's ``sqlite_store`` is served by another test's process, and a
    second process on one file is refused)."""
    return "sqlite:///" + str(tmp_path_factory.mktemp("resume-sqlite") / "relaykit.db")


@pytest.fixture(params=["memory", "sqlite"])
def base(request: pytest.FixtureRequest, relaykit_server: Callable[..., str], own_sqlite: str) -> str:
    return relaykit_server(STREAM, store="memory" if request.param == "memory" else own_sqlite, env=ENV)


async def stream_and_leave(http: httpx.AsyncClient, base: str) -> tuple[str, list[Sse]]:
    """Stream N chunks, read the first events, disconnect, wait until the task is COMPLETED."""
    async with asyncio.timeout(T), open_stream(http, base, message(str(N))) as reader:
        seen = [await reader.next() for _ in range(READ_FIRST)]
    task_id = seen[0].task_id
    assert task_id is not None
    await wait_for_state(http, base, task_id, {"TASK_STATE_COMPLETED"}, within=T)
    assert [e.id for e in seen] == list(range(1, READ_FIRST + 1))
    return task_id, seen


def check_whole(seen: list[Sse], resumed: list[Sse]) -> None:
    """What was read before leaving plus the resumed events: every event once, in order, the task's whole story."""
    ids = [e.id for e in seen + resumed]
    assert ids == list(range(1, len(ids) + 1)), ids
    assert all(e.kind != "task" for e in resumed), "a resume the log covers replays events, not a snapshot"
    assert [e.chunk for e in seen + resumed if e.chunk is not None] == chunks(N)
    assert resumed[-1].kind == "statusUpdate"
    assert resumed[-1].state == "TASK_STATE_COMPLETED"


async def rest_subscribe(
    http: httpx.AsyncClient, base: str, task_id: str, after: int, *, query: bool = False
) -> list[Sse]:
    async with asyncio.timeout(T), open_subscribe(http, base, task_id, last_event_id=after, query=query) as reader:
        got: list[Sse] = await reader.rest(within=T)
        # The stream ends after the terminal event: nothing more comes, and the server closes it.
        with pytest.raises(StopAsyncIteration):
            await reader.next()
        return got


async def test_rest_resume_after_the_task_ended(base: str) -> None:
    async with httpx.AsyncClient() as http:
        task_id, seen = await stream_and_leave(http, base)
        resumed = await rest_subscribe(http, base, task_id, READ_FIRST)
        check_whole(seen, resumed)
        # Again, from a later id (the log is kept, not used up), and through the query parameter.
        middle = len(resumed) // 2
        again = await rest_subscribe(http, base, task_id, resumed[middle].id or 0, query=True)
        assert [(e.id, e.data) for e in again] == [(e.id, e.data) for e in resumed[middle + 1 :]]
        # From the last id: nothing left; the stream ends at once (200, no event).
        assert await rest_subscribe(http, base, task_id, resumed[-1].id or 0) == []
        # Without a Last-Event-ID, a finished task is not subscribed to.
        async with asyncio.timeout(T), subscribe_request(http, base, task_id) as refused:
            body = json.loads(await refused.aread())
        assert refused.status_code == 400
        assert body["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION", body


async def jsonrpc_subscribe(
    http: httpx.AsyncClient, base: str, task_id: str, after: int | None, *, v03: bool = False
) -> tuple[int, list[Sse], dict[str, Any] | None]:
    """SubscribeToTask over JSON-RPC (0.3: ``tasks/resubscribe``): (HTTP status, the events' results, the error)."""
    headers = {"Accept": "text/event-stream"} if v03 else {**A2A_HEADERS, "Accept": "text/event-stream"}
    if after is not None:
        headers["Last-Event-ID"] = str(after)
    method = "tasks/resubscribe" if v03 else "SubscribeToTask"
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": {"id": task_id}}
    got: list[Sse] = []
    error: dict[str, Any] | None = None
    async with (
        asyncio.timeout(T),
        http.stream("POST", f"{base}/", json=body, headers=headers, timeout=CALL_TIMEOUT) as response,
    ):
        if not response.headers["content-type"].startswith("text/event-stream"):
            error = json.loads(await response.aread())["error"]
            return response.status_code, got, error
        async for event in events(response):
            assert event.data["id"] == body["id"]
            if "error" in event.data:
                error = event.data["error"]
            else:
                got.append(Sse(event.id, event.data["result"]))
    return response.status_code, got, error


async def test_jsonrpc_resume_after_the_task_ended(base: str) -> None:
    async with httpx.AsyncClient() as http:
        task_id, seen = await stream_and_leave(http, base)
        status, resumed, error = await jsonrpc_subscribe(http, base, task_id, READ_FIRST)
        assert (status, error) == (200, None)
        check_whole(seen, resumed)
        # From the last id: an empty stream; without an id: UnsupportedOperation (-32004).
        assert await jsonrpc_subscribe(http, base, task_id, resumed[-1].id) == (200, [], None)
        _, none, error = await jsonrpc_subscribe(http, base, task_id, None)
        assert none == []
        assert error is not None
        assert error["code"] == -32004, error


async def test_v03_resubscribe_after_the_task_ended(base: str) -> None:
    async with httpx.AsyncClient() as http:
        task_id, seen = await stream_and_leave(http, base)
        status, resumed, error = await jsonrpc_subscribe(http, base, task_id, READ_FIRST, v03=True)
        assert (status, error) == (200, None)
        # 0.3 events (``kind``-tagged), with the same ids: exactly the ones after X, ending with the completion.
        ids = [e.id for e in resumed]
        assert ids == list(range(READ_FIRST + 1, READ_FIRST + 1 + len(ids)))
        kinds = [e.data["kind"] for e in resumed]
        assert kinds[-1] == "status-update"
        assert resumed[-1].data["status"]["state"] == "completed"
        assert resumed[-1].data["final"] is True
        texts = [p["text"] for e in resumed if e.data["kind"] == "artifact-update" for p in e.data["artifact"]["parts"]]
        assert [e.chunk for e in seen if e.chunk is not None] + texts == chunks(N)


async def test_resume_after_a_restart_gets_the_snapshot_then_the_end(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'restart.db'}"
    server = start_serve(STREAM, tmp_path, store=store, env=ENV)
    try:
        async with httpx.AsyncClient() as http:
            task_id, seen = await stream_and_leave(http, server.url)
            final = await wait_for_state(http, server.url, task_id, {"TASK_STATE_COMPLETED"}, within=T)
            last = (await rest_subscribe(http, server.url, task_id, READ_FIRST))[-1].id
        server.stop()
        server = start_serve(STREAM, tmp_path, store=store, env=ENV)
        async with httpx.AsyncClient() as http:
            resumed = await rest_subscribe(http, server.url, task_id, READ_FIRST)
            # From the last id, nothing is missing: an empty stream, as before the restart.
            assert await rest_subscribe(http, server.url, task_id, last or 0) == []
    finally:
        server.stop()
    assert [(e.id, e.kind) for e in resumed] == [(last, "task")]
    assert resumed[0].data["task"] == final
    assert seen[0].task_id == task_id
