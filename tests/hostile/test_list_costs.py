"""ListTasks costs what the page returns (issue 14, Build 3): the fields a page leaves out (artifacts unless
``includeArtifacts``, history with ``historyLength: 0``) are removed by the database's JSON functions, so the process
never parses them, and what remains is trimmed before validation.

A task with an 80,000-part artifact (2 MB of JSON) and a 1,000-part message: it used to cost 320-520 ms per
ListTasks, every part validated and then thrown away. Now ListTasks answers under 50 ms (the issue's bound) on
SQLite and on PostgreSQL (which keeps a big task's body without its artifacts next to it, written with it, so a
listing never reads the 2 MB artifact), and a loop-lag probe shows the event loop is never blocked for more than
``LAG_BOUND`` meanwhile.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from support.stalls import loop_stalls

from relaykit import agent
from relaykit.http._app import create_app
from relaykit.testing import StreamingASGITransport

CHUNKS = 80_000
BOUND = 0.05  # seconds per ListTasks (best of three), every store
LAG_BOUND = 0.03  # seconds the event loop may be held at once during a ListTasks


@agent
async def chunks(context: Any) -> Any:
    for i in range(CHUNKS):
        yield f"chunk {i} "


@pytest.fixture(params=["sqlite", "postgres"])
async def client(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[httpx.AsyncClient]:
    options: dict[str, Any] = {}
    if request.param == "sqlite":
        store = "sqlite:///" + str(tmp_path / "list.db")
    else:
        store = request.getfixturevalue("postgres_url")
        options["namespace"] = request.getfixturevalue("pg_namespace")
    app = create_app(chunks, store=store, **options)
    await app.state.relaykit.start()
    try:
        transport = StreamingASGITransport(app)
        headers = {"A2A-Version": "1.0"}
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers, timeout=60.0) as c:
            yield c
    finally:
        await app.state.relaykit.stop()


async def rpc(c: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    r = await c.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    body: dict[str, Any] = r.json()
    assert "result" in body, body
    return body["result"]  # type: ignore[no-any-return]


async def timed_list(c: httpx.AsyncClient, params: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    """Best time of three ListTasks and the least of their longest event-loop stalls (the machine may be shared: a
    stall that a real blocking call causes shows in every one of the three, a hiccup of the machine in one)."""
    best = float("inf")
    least_stall = float("inf")
    result: dict[str, Any] = {}
    for _ in range(3):
        async with loop_stalls() as lags:
            t = time.perf_counter()
            result = await rpc(c, "ListTasks", params)
            best = min(best, time.perf_counter() - t)
        least_stall = min(least_stall, max(lags, default=0.0))
    return best, least_stall, result


async def test_list_tasks_after_a_huge_task_is_fast(client: httpx.AsyncClient) -> None:
    bound = BOUND
    parts = [{"text": "p" * 100} for _ in range(1000)]
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
    sent = await rpc(client, "SendMessage", {"message": message, "configuration": {"historyLength": 0}})
    assert sent["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    seconds, lag, page = await timed_list(client, {"historyLength": 0})
    assert seconds < bound, f"ListTasks historyLength=0 took {seconds * 1000:.0f} ms"
    assert lag < LAG_BOUND, f"the event loop stalled {lag * 1000:.0f} ms"
    assert "history" not in page["tasks"][0]
    assert "artifacts" not in page["tasks"][0]

    seconds, lag, page = await timed_list(client, {})
    assert seconds < bound, f"default ListTasks took {seconds * 1000:.0f} ms"
    assert lag < LAG_BOUND, f"the event loop stalled {lag * 1000:.0f} ms"
    assert len(page["tasks"][0]["history"][0]["parts"]) == 1000

    # Asking for the artifacts still returns them whole (and costs what they cost).
    _, _, page = await timed_list(client, {"includeArtifacts": True, "historyLength": 1})
    assert len(page["tasks"][0]["artifacts"][0]["parts"]) == CHUNKS
    assert len(page["tasks"][0]["history"]) == 1
