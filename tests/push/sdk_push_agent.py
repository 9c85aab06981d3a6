"""An agent on the official a2a-sdk 1.3.0 with push notifications on (its ``BasePushNotificationSender`` over httpx).

    python3 sdk_push_agent.py     # prints "PORT <n>", serves JSON-RPC at / and HTTP+JSON at the root

Text 'stream N' -> N artifact chunks of one artifact, then COMPLETED; any other text T -> one artifact T, COMPLETED.
"""

from __future__ import annotations

import asyncio
import re
import socket

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
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

STREAM = re.compile(r"^stream (\d+)")


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        text = context.get_user_input()
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message] if context.message else [],
                )
            )
        found = STREAM.match(text)
        if found:
            count = int(found.group(1))
            for i in range(count):
                await updater.add_artifact(
                    parts=[Part(text=f"chunk {i}")],
                    artifact_id="stream",
                    append=i > 0,
                    last_chunk=i == count - 1,
                )
        else:
            await updater.add_artifact(parts=[Part(text=text)], artifact_id="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before "PORT" is printed: a request made at once waits in the backlog
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="sdk-push",
        description="a2a-sdk agent with push notifications",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=base + "/", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=base, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])],
    )
    push_store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=Executor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=push_store,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(timeout=10), push_store),
    )
    routes = create_agent_card_routes(agent_card=card)
    routes += create_jsonrpc_routes(request_handler=handler, rpc_url="/")
    routes += create_rest_routes(request_handler=handler)
    print(f"PORT {port}", flush=True)
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), log_level="warning"))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
