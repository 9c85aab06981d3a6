"""The shared harness's echo agent on a2a-sdk 1.3.0's multi-replica ("cluster") mode, for side-by-side runs against
relaykit's scale-out mode on the same PostgreSQL (bench only; runs in the venv of bench/sdk_cluster/setup.sh).

    python bench/sdk_cluster/echo_agent.py PORT --db postgresql+asyncpg://postgres@127.0.0.1:5432/DBNAME

Behaviour (as every peer of ../shared/bench): text ``stream N …`` ⇒ N appended artifact chunks, then completed; any
other text T ⇒ a task completed with one artifact whose text is T.

Cluster mode as a2a-sdk 1.3.0 sets it up (``a2a.server.cluster``): the request handler gets a
``VersionedDatabaseTaskStore`` (tasks, a version row compared-and-swapped on every write, and every applied event
appended to a ``task_events`` table in the same transaction) and a ``DatabaseTaskEventStream`` (replicas that do not
run a task tail that table by polling, every 0.5 s by default). Both share one SQLAlchemy asyncpg engine with its
default pool. The database is created and dropped by bench/sdk_cluster/cluster.py; the first replica creates the
tables. Served like the single-process peer: Starlette, JSON-RPC on ``/``, HTTP+JSON routes, one uvicorn worker.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import AsyncIterator

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import DatabaseTaskEventStream, VersionedDatabaseTaskStore
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

_STREAM = re.compile(r"^stream (\d+)")


class ClusterEcho(AgentExecutor):
    """The harness's echo: one artifact with the text, or N appended chunks for ``stream N``."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        # The SDK leaves creating the task to the agent: its first event must be the Task itself.
        if context.current_task is None:
            history = [context.message] if context.message else []
            first = Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=history,
            )
            await event_queue.enqueue_event(first)
        updater = TaskUpdater(event_queue, task_id, context_id)
        text = context.get_user_input()
        found = _STREAM.match(text)
        if found is None:
            await updater.add_artifact(parts=[Part(text=text)], artifact_id="echo", name="echo")
        else:
            count = int(found.group(1))
            for i in range(count):
                await updater.add_artifact(
                    parts=[Part(text=f"chunk {i}")],
                    artifact_id="stream",
                    name="stream",
                    append=i > 0,
                    last_chunk=i == count - 1,
                )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def _card(port: int) -> AgentCard:
    base = f"http://127.0.0.1:{port}"
    return AgentCard(
        name="echo",
        description="Echo agent for protocol benchmarks (a2a-sdk cluster mode)",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes text", tags=["echo"])],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=base + "/"),
            AgentInterface(protocol_binding="HTTP+JSON", protocol_version="1.0", url=base),
        ],
    )


def build_app(port: int, db_url: str, poll_interval: float | None, pool_size: int | None) -> Starlette:
    # SQLAlchemy's default pool keeps 5 connections and opens up to 10 more that it closes again when returned: under
    # 16+ clients that is a new connection every other request. ``pool_size`` keeps that many open, like asyncpg's pool.
    engine = (
        create_async_engine(db_url)
        if pool_size is None
        else create_async_engine(db_url, pool_size=pool_size, max_overflow=0)
    )
    store = VersionedDatabaseTaskStore(engine)
    stream = (
        DatabaseTaskEventStream(engine)
        if poll_interval is None
        else DatabaseTaskEventStream(engine, poll_interval_s=poll_interval)
    )
    card = _card(port)
    handler = DefaultRequestHandler(
        agent_executor=ClusterEcho(), task_store=store, agent_card=card, event_stream=stream
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # Tables before the first request (the stores would otherwise create them lazily, racing between replicas).
        await store.initialize()
        await stream.initialize()
        try:
            yield
        finally:
            await handler.aclose()
            await engine.dispose()

    routes = [
        *create_agent_card_routes(agent_card=card),
        *create_jsonrpc_routes(request_handler=handler, rpc_url="/"),
        *create_rest_routes(request_handler=handler),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--db", required=True, help="SQLAlchemy URL, postgresql+asyncpg://…")
    p.add_argument("--poll-interval", type=float, default=None, help="event-stream polling, s (SDK default 0.5)")
    p.add_argument("--pool-size", type=int, default=None, help="connections kept open (default: SQLAlchemy's 5+10)")
    args = p.parse_args()
    app = build_app(args.port, args.db, args.poll_interval, args.pool_size)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
