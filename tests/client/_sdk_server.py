"""An agent on the official a2a-sdk 1.3.0 (PyPI), JSON-RPC at ``/`` and HTTP+JSON at the root, for the client tests.

Behaviour (the same as ``_agents.py``'s ``Kitchen`` on relaykit, so one test body drives both):

  text T                -> Task COMPLETED with one artifact (text T)
  'stream N [D]'        -> N artifact chunks of one artifact ('chunk 0' ...), D ms apart (default 0), then COMPLETED
  'slow N'              -> WORKING, N chunks ('slow 0' ...) 0.2 s apart, then COMPLETED (subscribe / cancel tests)
  'ask ...'             -> INPUT_REQUIRED 'What is your name?'; the follow-up A on that task -> COMPLETED 'got: A'
  'message T'           -> a bare Message 'you said: T' (no task)
  'fail' / 'reject' / 'auth' -> FAILED / REJECTED / AUTH_REQUIRED with a status message

Push notifications are on (InMemoryPushNotificationConfigStore) and an extended card is configured.

Usage: python3 _sdk_server.py --port 9301 [--public-url http://127.0.0.1:9400]
"""

import argparse
import asyncio
import logging
import re
import uuid

import httpx
import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

STREAM_RE = re.compile(r"^stream (\d+)(?: (\d+))?")
SLOW_RE = re.compile(r"^slow (\d+)")


class KitchenExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        context_id = context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        text = context.get_user_input()
        current = context.current_task

        if current is None and text.startswith("message "):
            await event_queue.enqueue_event(
                Message(
                    message_id=str(uuid.uuid4()),
                    context_id=context_id,
                    role=Role.ROLE_AGENT,
                    parts=[Part(text=f"you said: {text[len('message ') :]}")],
                )
            )
            return
        if current is None:
            # The V2 handler wants a Task as the first event of a new task.
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message] if context.message else [],
                )
            )
        elif current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact(parts=[Part(text=f"got: {text}")], artifact_id="answer", name="answer")
            await updater.complete()
            return

        if text.startswith("ask"):
            await updater.requires_input(updater.new_agent_message([Part(text="What is your name?")]))
            return
        if text == "fail":
            await updater.failed(updater.new_agent_message([Part(text="it failed")]))
            return
        if text == "reject":
            await updater.reject(updater.new_agent_message([Part(text="rejected")]))
            return
        if text == "auth":
            await updater.requires_auth(updater.new_agent_message([Part(text="sign in first")]))
            return
        m = STREAM_RE.match(text)
        if m:
            n, delay = int(m.group(1)), int(m.group(2) or 0) / 1000
            for i in range(n):
                if delay:
                    await asyncio.sleep(delay)
                await updater.add_artifact(
                    parts=[Part(text=f"chunk {i}")],
                    artifact_id="stream",
                    name="stream",
                    append=i > 0,
                    last_chunk=i == n - 1,
                )
            await updater.complete()
            return
        m = SLOW_RE.match(text)
        if m:
            n = int(m.group(1))
            await updater.start_work()
            for i in range(n):
                await asyncio.sleep(0.2)
                await updater.add_artifact(
                    parts=[Part(text=f"slow {i}")], artifact_id="slow", name="slow", append=i > 0, last_chunk=i == n - 1
                )
            await updater.complete()
            return
        await updater.add_artifact(parts=[Part(text=text)], artifact_id="echo", name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def build(public_url: str) -> tuple[Starlette, DefaultRequestHandler, httpx.AsyncClient]:
    base = public_url.rstrip("/")
    card = AgentCard(
        name="sdk-kitchen",
        description="Test agent on a2a-sdk 1.3.0",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes text", tags=["echo"])],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=base + "/"),
            AgentInterface(protocol_binding="HTTP+JSON", protocol_version="1.0", url=base),
        ],
    )
    extended = AgentCard()
    extended.CopyFrom(card)
    extended.name = "sdk-kitchen (extended)"
    extended.skills.add(id="secret", name="secret", description="extended-only skill", tags=["x"])

    http = httpx.AsyncClient()
    push_store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=KitchenExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=push_store,
        push_sender=BasePushNotificationSender(http, push_store),
        extended_agent_card=extended,
    )
    routes = [
        *create_agent_card_routes(agent_card=card),
        *create_jsonrpc_routes(request_handler=handler, rpc_url="/"),
        *create_rest_routes(request_handler=handler),
    ]
    return Starlette(routes=routes), handler, http


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--public-url", default=None)
    args = ap.parse_args()
    app, handler, http = build(args.public_url or f"http://127.0.0.1:{args.port}")
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    try:
        await uvicorn.Server(config).serve()
    finally:
        await handler.aclose()
        await http.aclose()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
