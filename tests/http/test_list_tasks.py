"""ListTasks' page on both HTTP bindings: with ``includeArtifacts`` every task carries ``artifacts``, ``[]`` when it has
none (spec §3.1.4); without it no task does. The app runs in-process (``httpx.ASGITransport``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from relaykit import AgentExecutor, RequestContext, TaskUpdater
from relaykit.http import create_app
from relaykit.server import EventQueue

HEADERS = {"A2A-Version": "1.0"}


class Bare(AgentExecutor):
    """Text ``bare`` completes with no artifact; any other text completes with one artifact holding it."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        text = context.message.text if context.message is not None else ""
        await updater.working()
        if text != "bare":
            await updater.artifact(text)
        await updater.complete()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Bare(), store="memory")
    await app.state.relaykit.start()
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=HEADERS, timeout=10) as client:
            for text in ("bare", "with artifact"):
                message = {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}
                sent = await client.post("/message:send", json={"message": message})
                assert sent.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED", sent.text
            yield client
    finally:
        await app.state.relaykit.stop()


async def list_tasks(http: httpx.AsyncClient, binding: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    if binding == "jsonrpc":
        reply = await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params})
        page = reply.json()["result"]
    else:
        query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()}
        page = (await http.get("/tasks", params=query)).json()
    tasks: list[dict[str, Any]] = page["tasks"]
    assert len(tasks) == 2, page
    return tasks


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
async def test_include_artifacts_lists_an_empty_array_for_a_task_without_any(
    http: httpx.AsyncClient, binding: str
) -> None:
    tasks = await list_tasks(http, binding, {"includeArtifacts": True})
    assert sorted(len(t["artifacts"]) for t in tasks) == [0, 1]


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("params", [{}, {"includeArtifacts": False}], ids=["absent", "false"])
async def test_without_include_artifacts_no_task_carries_the_field(
    http: httpx.AsyncClient, binding: str, params: dict[str, Any]
) -> None:
    tasks = await list_tasks(http, binding, params)
    assert all("artifacts" not in t for t in tasks), tasks
