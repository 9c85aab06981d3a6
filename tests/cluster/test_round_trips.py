"""What one scale-out message costs the shared services, counted at the drivers (not a timing).

One replica (PostgreSQL store + Redis bus) is served in this event loop on a real socket; asyncpg's statements and
redis-py's round trips (each command or pipeline sent on a connection, a blocking read included) are counted while
one blocking SendMessage to an echo agent is answered. The budget is issue 18's: a replica that accepts a message
and has capacity runs it itself, so a simple message costs at most 3 statements (2 commits) and 8 Redis round
trips (today 1 and 3: ``EXPECTED_*``, so a regression shows before the budget is spent: the task's insert is put
off until its outcome, which it then stores in one INSERT). An answer to an interrupted task runs where accepted too
(``CONTINUATION_*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from redis.asyncio.connection import AbstractConnection

import relaykit
from cluster.client import artifact_texts, message, send
from relaykit import AgentExecutor, RequestContext, TaskUpdater
from relaykit.assembly import assemble
from relaykit.http._app import http_app
from relaykit.server import EventQueue

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

HOST = "127.0.0.1"
PG_STATEMENTS = 3
PG_COMMITS = 2
REDIS_ROUND_TRIPS = 8
# What it costs today (the budget's first line of defence): one INSERT of the task as answered (its insert, put off,
# is carried by the outcome's write: ``backends.postgres._untold``); the idempotency key and two append pipelines (the
# task's first snapshot goes out with its artifact, the terminal event on its own).
EXPECTED_PG_STATEMENTS = 1
EXPECTED_REDIS_ROUND_TRIPS = 3
# An answer to an interrupted task (an @agent: it stores WORKING, then COMPLETED): the claim and the two writes; the
# idempotency key, the log's top (read once by the runner that takes a task), the event appends.
CONTINUATION_PG_STATEMENTS = 3
CONTINUATION_PG_COMMITS = 3
CONTINUATION_REDIS_ROUND_TRIPS = 6


@relaykit.agent
async def echo(context):  # type: ignore[no-untyped-def]
    return context.text


@relaykit.agent
async def ask(context):  # type: ignore[no-untyped-def]
    if context.task is None:
        context.requires_input("What is your name?")
    return f"Hello {context.text}"


@dataclass
class Counts:
    statements: list[str] = field(default_factory=list)
    redis: list[str] = field(default_factory=list)
    on: bool = False

    @property
    def commits(self) -> int:
        # Every statement runs on its own (autocommit): each write is one commit.
        return sum(
            1 for sql in self.statements if sql.lstrip().split(None, 1)[0].upper() in {"INSERT", "UPDATE", "DELETE"}
        )

    def sample(self) -> tuple[int, int, int, list[str], list[str]]:
        """This message's counts: (Redis round trips, statements, commits, the statements, the Redis commands)."""
        return len(self.redis), len(self.statements), self.commits, [*self.statements], [*self.redis]

    def reset(self, *, on: bool) -> None:
        self.statements.clear()
        self.redis.clear()
        self.on = on


def _fewest(seen: list[tuple[int, int, int, list[str], list[str]]]) -> tuple[int, int, int, list[str], str]:
    """The cheapest of the sampled messages (idle loops only ever add): round trips, statements, commits, the Redis
    commands, and a listing of it for assertion messages."""
    round_trips, statements, commits, sql, commands = min(seen)
    return round_trips, statements, commits, commands, "\n".join(["statements:", *sql, "redis:", *commands])


def _names(command: Any) -> str:
    """The command names in one send, e.g. ``XADD+PEXPIRE`` (RESP: ``*N`` then N bulk strings ``$len``, value)."""
    if isinstance(command, str):
        data = command.encode()
    elif isinstance(command, bytes):
        data = command
    else:
        data = b"".join(part.encode() if isinstance(part, str) else bytes(part) for part in command)
    names: list[str] = []
    at = 0
    while at < len(data):
        end = data.index(b"\r\n", at)
        count = int(data[at + 1 : end])
        at = end + 2
        for index in range(count):
            end = data.index(b"\r\n", at)
            size = int(data[at + 1 : end])
            if index == 0:
                names.append(data[end + 2 : end + 2 + size].decode(errors="replace"))
            at = end + 2 + size + 2
    return "+".join(names)


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """Count asyncpg statements and redis-py sends (one per command or pipeline) while ``counts.on``."""
    counts = Counts()
    originals: dict[str, Any] = {}

    def wrap_pg(name: str) -> None:
        original = originals[name] = getattr(asyncpg.connection.Connection, name)

        async def counted(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            # Every table (tasks, push configs, the push outbox) but the workers': heartbeats run on their own
            # clock, not per message. (So do the push outbox's sweeps: the fewest of several messages leaves them out.)
            if counts.on and "_workers" not in query:
                counts.statements.append(query)
            return await original(self, query, *args, **kwargs)

        setattr(asyncpg.connection.Connection, name, counted)

    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        wrap_pg(name)
    send = originals["send"] = AbstractConnection.send_packed_command

    async def counted_send(self: Any, command: Any, check_health: bool = True) -> None:
        if counts.on:
            counts.redis.append(_names(command))
        await send(self, command, check_health)

    AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        for name, original in originals.items():
            if name != "send":
                setattr(asyncpg.connection.Connection, name, original)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, ws="none"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(20):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)  # uvicorn offers no startup event; bounded by the timeout above
        yield f"http://{HOST}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        sock.close()


@pytest.mark.parametrize("push", [False, True], ids=["push-off", "push-on"])
async def test_one_blocking_message_costs_few_statements_and_round_trips(
    cluster_namespace: str, postgres_url: str, redis_url: str, push: bool
) -> None:
    # With push on (serve's default) and no push config on the task, a message costs the same: the push hook has
    # nothing to deliver, so it adds no statement and no round trip.
    server = assemble(echo, store=postgres_url, bus=redis_url, namespace=cluster_namespace, telemetry=False, push=push)
    round_trips, statements, commits, _commands, detail = await _echo_costs(server)
    assert statements <= PG_STATEMENTS, detail
    assert commits <= PG_COMMITS, detail
    # The one statement stores the task as answered, synchronously committed: the insert put off, carried by it.
    [insert] = [line for line in detail.splitlines() if line.startswith("INSERT")]
    assert "synchronous_commit" not in insert, detail
    assert commits == 1, detail
    assert round_trips <= REDIS_ROUND_TRIPS, detail
    assert statements <= EXPECTED_PG_STATEMENTS, detail
    assert round_trips <= EXPECTED_REDIS_ROUND_TRIPS, detail


class UpdaterEcho(AgentExecutor):
    """An echo written with ``TaskUpdater``: its first event is the artifact, so the task is SUBMITTED when created."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        await TaskUpdater(queue, context).complete_with_text(context.text)


async def test_a_first_snapshot_that_says_what_the_stored_row_says_is_not_appended(
    cluster_namespace: str, postgres_url: str, redis_url: str
) -> None:
    # A blocking caller here waits for the outcome alone, and the task's first snapshot (SUBMITTED, the message) is
    # what the row stored at acceptance holds: a subscriber elsewhere starts from that row, so the log gets only the
    # artifact and COMPLETED (an @agent's first snapshot, WORKING, is news, and is appended).
    server = assemble(
        UpdaterEcho(), store=postgres_url, bus=redis_url, namespace=cluster_namespace, telemetry=False, push=True
    )
    round_trips, statements, _commits, commands, detail = await _echo_costs(server)
    assert sum(command.split("+").count("XADD") for command in commands) == 2, detail
    assert statements <= EXPECTED_PG_STATEMENTS, detail
    assert round_trips <= EXPECTED_REDIS_ROUND_TRIPS, detail


async def _echo_costs(server: Any) -> tuple[int, int, int, list[str], str]:
    """The fewest statements and round trips of one blocking message to ``server``'s echo (``_fewest``)."""
    with counting() as counts:
        async with serving(http_app(server)) as url, httpx.AsyncClient(timeout=10) as http:
            # Warm up (connections opened, schema checked), then count single messages. Idle loops (the work
            # queue's and the event reader's blocking reads) return on their own every second or more: the
            # fewest of a few messages is the message's own cost.
            seen: list[tuple[int, int, int, list[str], list[str]]] = []
            for number in range(6):
                counts.reset(on=number > 0)
                result = await send(http, url, message(f"hello {number}"))
                counts.on = False
                assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED", result
                assert artifact_texts(result["task"]) == [f"hello {number}"]
                if number:
                    seen.append(counts.sample())
    return _fewest(seen)


async def test_an_answer_to_an_interrupted_task_runs_where_accepted(
    cluster_namespace: str, postgres_url: str, redis_url: str
) -> None:
    # The answer after INPUT_REQUIRED is claimed (one statement, which reads the task too) and run by the replica
    # that accepted it, as a new task's message is: no work queue entry, no re-read, no claim left behind.
    server = assemble(ask, store=postgres_url, bus=redis_url, namespace=cluster_namespace, telemetry=False, push=False)
    with counting() as counts:
        async with serving(http_app(server)) as url, httpx.AsyncClient(timeout=10) as http:
            seen: list[tuple[int, int, int, list[str], list[str]]] = []
            for number in range(6):
                asked = (await send(http, url, message("hi")))["task"]
                assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
                counts.reset(on=number > 0)
                result = await send(http, url, message(f"Ada {number}", task_id=asked["id"]))
                counts.on = False
                assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED", result
                assert artifact_texts(result["task"]) == [f"Hello Ada {number}"]
                if number:
                    seen.append(counts.sample())
    round_trips, statements, commits, commands, detail = _fewest(seen)
    assert not any("XREADGROUP" in command or "XACK" in command for command in commands), detail
    assert statements <= CONTINUATION_PG_STATEMENTS, detail
    assert commits <= CONTINUATION_PG_COMMITS, detail
    assert round_trips <= CONTINUATION_REDIS_ROUND_TRIPS, detail
