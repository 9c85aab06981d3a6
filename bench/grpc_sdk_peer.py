"""An a2a-sdk (PyPI 1.3.0) agent served over gRPC only: the peer of relaykit's gRPC benchmark and interop tests.

    python3 bench/grpc_sdk_peer.py [--port 0] [--host 127.0.0.1]

Prints ``ready <port>`` on stdout once it listens. Behaviour, dispatched on the message text:

* ``stream N`` ⇒ a Task (SUBMITTED), N artifact chunks ``chunk 0`` … (one artifact, ``append`` after the first,
  ``lastChunk`` on the last), then COMPLETED (the shared benchmark's echo behaviour);
* ``ask …`` ⇒ INPUT_REQUIRED with a question; the next message on that task ⇒ COMPLETED, artifact ``got: <text>``;
* ``hold`` ⇒ WORKING until cancelled (at most 60 s), for cancel/subscribe tests;
* anything else T ⇒ COMPLETED with one artifact whose text is T.

Served the way the SDK documents it: ``DefaultRequestHandler`` with the in-memory task and push-config stores,
``GrpcHandler`` on a ``grpc.aio`` server with default options; the extended card is configured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys

import grpc
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.tasks import InMemoryPushNotificationConfigStore, InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
    a2a_pb2_grpc,
)

STREAM = re.compile(r"^stream (\d+)")
HOLD_SECONDS = 60.0


class PeerExecutor(AgentExecutor):
    """Echo, chunked streams, a question, and a task that waits to be cancelled."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        context_id = context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        text = context.get_user_input()
        current = context.current_task
        if current is None:
            # The SDK's handler wants a Task as the first event of a new task.
            first = Task(id=task_id, context_id=context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
            if context.message is not None:
                first.history.append(context.message)
            await event_queue.enqueue_event(first)
        elif current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact(parts=[Part(text=f"got: {text}")], artifact_id="answer", name="answer")
            await updater.complete()
            return
        found = STREAM.match(text)
        if found is not None:
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
        elif text.startswith("ask"):
            await updater.requires_input(updater.new_agent_message([Part(text="What is your name?")]))
        elif text.startswith("hold"):
            await updater.start_work()
            await asyncio.sleep(HOLD_SECONDS)  # cancelled by CancelTask
            await updater.complete()
        else:
            await updater.add_artifact(parts=[Part(text=text)], artifact_id="echo", name="echo")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def build_card(url: str, *, extended: bool = False) -> AgentCard:
    return AgentCard(
        name="sdk-grpc-peer" + (" (extended)" if extended else ""),
        description="a2a-sdk agent over gRPC (relaykit benchmark and interop peer)",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes text", tags=["echo"])],
        supported_interfaces=[AgentInterface(protocol_binding="GRPC", protocol_version="1.0", url=url)],
    )


async def serve(host: str, port: int) -> None:
    server = grpc.aio.server()
    bound = server.add_insecure_port(f"{host}:{port}")
    url = f"{host}:{bound}"
    handler = DefaultRequestHandler(
        agent_executor=PeerExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=build_card(url),
        push_config_store=InMemoryPushNotificationConfigStore(),
        extended_agent_card=build_card(url, extended=True),
    )
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    await server.start()
    print(f"ready {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1.0)
    with contextlib.suppress(Exception):
        await handler.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description="a2a-sdk gRPC peer")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
