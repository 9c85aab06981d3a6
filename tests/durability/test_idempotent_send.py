"""Gap 2 (issue 19): a retried SendMessage (same messageId) never runs the agent twice, in every embedded store.

Real sockets (uvicorn on 127.0.0.1), the real stores (memory, a SQLite file, the PostgreSQL server). The agent counts
its runs; a retry, whether it arrives while the first execution runs, after it ended, or (SQLite) after a restart,
gets the original task and leaves the count at one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.cluster.client import Sse, message, open_stream, send
from tests.push.push_helpers import serving

from relaykit.http import create_app
from relaykit.server import AgentExecutor, FunctionAgent

WAIT = 10.0


class CountingAgent(FunctionAgent):
    """Counts runs per messageId; each run waits for ``gate`` (so a retry can arrive mid-run), then completes."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        super().__init__(self.run)

    async def run(self, context: Any) -> str:
        self.runs[context.message.message_id] += 1
        self.started.set()
        await asyncio.wait_for(self.gate.wait(), WAIT)
        return "done"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
    if request.param == "memory":
        return lambda: "memory"
    if request.param == "sqlite":
        return lambda: f"sqlite:///{tmp_path / 'idem.db'}"
    url = request.getfixturevalue("postgres_url")
    namespace = request.getfixturevalue("pg_namespace")
    return lambda: (url, namespace)


def app_for(agent: AgentExecutor, store: Any) -> Any:
    if isinstance(store, tuple):
        return create_app(agent, store=store[0], namespace=store[1])
    return create_app(agent, store=store)


async def test_a_retried_message_runs_the_agent_once(store: Callable[[], Any]) -> None:
    agent = CountingAgent()
    body = message("hello")
    message_id = body["message"]["messageId"]
    app = Arrivals(app_for(agent, store()), 3)
    async with serving(app) as base, httpx.AsyncClient() as http:
        first = asyncio.create_task(send(http, base, body))
        # The client's connection drops mid-run: it retries, blocking, and streaming, while the first run goes on.
        await asyncio.wait_for(agent.started.wait(), WAIT)
        retry = asyncio.create_task(send(http, base, body))
        streamed = asyncio.create_task(_stream(http, base, body))
        await asyncio.wait_for(app.reached.wait(), WAIT)
        agent.gate.set()
        original, repeated, events = await asyncio.gather(first, retry, streamed)
        after_end = await send(http, base, body)
    assert agent.runs[message_id] == 1
    task_id = original["task"]["id"]
    assert original["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert repeated == original
    assert after_end["task"]["id"] == task_id
    assert after_end["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [(e.kind, e.task_id, e.state) for e in events] == [("task", task_id, "TASK_STATE_COMPLETED")]
    # A different messageId is a new message: it runs.
    async with serving(app_for(agent, store())) as base, httpx.AsyncClient() as http:
        other = await send(http, base, message("hello"))
    assert other["task"]["id"] != task_id
    assert sum(agent.runs.values()) == 2


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_retry_across_a_restart_runs_the_agent_once(kind: str, request: pytest.FixtureRequest) -> None:
    """The stores that keep tasks: the window is refilled from them on start; a continuation is found in the
    task's history."""
    agent = AskingAgent()
    agent.gate.set()
    store: Any = f"sqlite:///{request.getfixturevalue('tmp_path') / 'restart.db'}"
    if kind == "postgres":
        store = (request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_namespace"))
    body = message("hello")
    async with serving(app_for(agent, store)) as base, httpx.AsyncClient() as http:
        original = await send(http, base, body)
    task_id = original["task"]["id"]
    follow_up = message("more", task_id=task_id)
    async with serving(app_for(agent, store)) as base, httpx.AsyncClient() as http:
        repeated = await send(http, base, body)
        continued = await send(http, base, follow_up)
    async with serving(app_for(agent, store)) as base, httpx.AsyncClient() as http:
        continued_again = await send(http, base, follow_up)
    assert agent.runs == Counter({body["message"]["messageId"]: 1, follow_up["message"]["messageId"]: 1})
    assert original["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert repeated["task"]["id"] == task_id
    assert continued["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert continued_again["task"]["id"] == task_id
    assert continued_again["task"]["history"] == continued["task"]["history"]


async def test_a_zero_window_turns_idempotency_off_even_within_a_task() -> None:
    """``idempotency_window=0``: a reused messageId is a new message, as a first send and as a follow-up on the task
    that already holds it in its history (the A2A conformance kit reuses one messageId per scenario)."""
    agent = AskingAgent()
    agent.gate.set()
    body = message("hello")
    message_id = body["message"]["messageId"]
    async with serving(create_app(agent, store="memory", idempotency_window=0)) as base, httpx.AsyncClient() as http:
        first = await send(http, base, body)
        second = await send(http, base, body)
        task_id = first["task"]["id"]
        follow_up = await send(http, base, message("more", message_id=message_id, task_id=task_id))
    assert second["task"]["id"] != task_id
    assert second["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert follow_up["task"]["id"] == task_id
    assert follow_up["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert agent.runs[message_id] == 3


class AskingAgent(CountingAgent):
    """Asks for more on "hello" (the task waits, INPUT_REQUIRED), completes on anything else."""

    async def run(self, context: Any) -> str:
        self.runs[context.message.message_id] += 1
        if context.text == "hello":
            context.requires_input("more?")
        return "done"


class Arrivals:
    """The app, counting the SendMessage requests that reached it."""

    def __init__(self, app: Any, expected: int) -> None:
        self.app = app
        self.sends = 0
        self.expected = expected
        self.reached = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/message:"):
            self.sends += 1
            if self.sends >= self.expected:
                self.reached.set()
        await self.app(scope, receive, send)


async def _stream(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> list[Sse]:
    async with open_stream(http, base, body) as streaming:
        return await streaming.rest()  # type: ignore[no-any-return]


async def test_an_agent_can_turn_idempotency_off_for_itself() -> None:
    """``AgentExecutor.idempotency_window = 0`` wins over the server's default window: the conformance example runs
    with the documented command line and still sees a reused messageId as a new message."""

    class Reusing(AskingAgent):
        idempotency_window = 0

    agent = Reusing()
    agent.gate.set()
    body = message("hello")
    async with serving(create_app(agent, store="memory")) as base, httpx.AsyncClient() as http:
        first = await send(http, base, body)
        second = await send(http, base, body)
    assert second["task"]["id"] != first["task"]["id"]
    assert agent.runs[body["message"]["messageId"]] == 2
