"""An A2A 0.3 agent on the official a2a-sdk 0.3.26: JSON-RPC at ``/``, HTTP+JSON at the root (``/v1/…``), gRPC on
``--grpc-port``; for relaykit's client and CLI tests (run in the SDK's own environment, ``support.sdk03``).

Behaviour (the kitchen of ``tests/client/_agents.py``, the parts the 0.3 tests use):

  text T        -> Task COMPLETED with one artifact (text T)
  'stream N'    -> WORKING, N chunks of one artifact ('chunk 0' …), COMPLETED
  'slow N'      -> WORKING, N chunks ('slow 0' …) 0.2 s apart, COMPLETED (cancel / subscribe tests)
  'ask …'       -> INPUT_REQUIRED 'What is your name?'; the follow-up A on that task -> COMPLETED 'got: A'
  'message T'   -> a bare Message 'you said: T'

    python sdk03_server.py --port P --grpc-port G [--card-key KEY.pem --card-kid KID]

``--card-key``: the card is signed by the SDK's own ``create_agent_card_signer`` (ES256, ``jku`` naming
``/.well-known/jwks.json``, which then serves the public key), as an a2a-sdk 0.3 agent signs its card.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import grpc
import jwt
import uvicorn
from a2a.grpc import a2a_pb2_grpc
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.apps.rest.rest_adapter import RESTAdapter
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.tasks import InMemoryPushNotificationConfigStore, InMemoryTaskStore, TaskUpdater
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
    TextPart,
)
from a2a.utils.signing import create_agent_card_signer
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

STREAM_RE = re.compile(r"^stream (\d+)")
SLOW_RE = re.compile(r"^slow (\d+)")
JWKS_PATH = "/.well-known/jwks.json"


def _text(text: str) -> list[Part]:
    return [Part(root=TextPart(text=text))]


class Kitchen(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        current = context.current_task
        if current is None and text.startswith("message "):
            await event_queue.enqueue_event(
                Message(
                    role=Role.agent,
                    parts=_text(f"you said: {text[len('message ') :]}"),
                    message_id=str(uuid.uuid4()),
                    context_id=context.context_id,
                )
            )
            return
        if current is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.submitted),
                    history=[context.message] if context.message else [],
                )
            )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if current is not None and current.status.state == TaskState.input_required:
            await updater.add_artifact(_text(f"got: {text}"), artifact_id="answer", name="answer")
            await updater.complete()
            return
        if text.startswith("ask"):
            question = updater.new_agent_message(_text("What is your name?"))
            await updater.update_status(TaskState.input_required, question, final=True)
            return
        for pattern, label, delay in ((STREAM_RE, "chunk", 0.0), (SLOW_RE, "slow", 0.2)):
            m = pattern.match(text)
            if m:
                n = int(m.group(1))
                await updater.start_work()
                for i in range(n):
                    if delay:
                        await asyncio.sleep(delay)
                    await updater.add_artifact(
                        _text(f"{label} {i}"), artifact_id=label, name=label, append=i > 0, last_chunk=i == n - 1
                    )
                await updater.complete()
                return
        await updater.add_artifact(_text(text), artifact_id="echo", name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def _signed(card: AgentCard, key_path: str, kid: str, jku: str) -> tuple[AgentCard, dict[str, Any]]:
    """``card`` signed by the SDK's signer, and the JWKS holding its public key."""
    pem = Path(key_path).read_bytes()
    header: Any = {"alg": "ES256", "kid": kid, "jku": jku, "typ": "JOSE"}
    signed = create_agent_card_signer(pem, header)(card)
    public = load_pem_private_key(pem, None).public_key()
    jwk = {**jwt.algorithms.ECAlgorithm.to_jwk(public, as_dict=True), "kid": kid, "alg": "ES256", "use": "sig"}
    return signed, {"keys": [jwk]}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--card-key")
    parser.add_argument("--card-kid", default="sdk03")
    args = parser.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    card = AgentCard(
        name="sdk03 kitchen",
        description="a2a-sdk 0.3.26 test agent",
        url=base + "/",
        preferred_transport="JSONRPC",
        additional_interfaces=[
            AgentInterface(url=base + "/", transport="JSONRPC"),
            AgentInterface(url=base, transport="HTTP+JSON"),
            AgentInterface(url=f"127.0.0.1:{args.grpc_port}", transport="GRPC"),
        ],
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    extra_routes: list[Route] = []
    if args.card_key:
        card, jwks = _signed(card, args.card_key, args.card_kid, base + JWKS_PATH)
        extra_routes.append(Route(JWKS_PATH, lambda request: JSONResponse(jwks), methods=["GET"]))
    handler = DefaultRequestHandler(
        agent_executor=Kitchen(),
        task_store=InMemoryTaskStore(),
        push_config_store=InMemoryPushNotificationConfigStore(),
    )
    jsonrpc = A2AStarletteApplication(agent_card=card, http_handler=handler)
    rest = RESTAdapter(agent_card=card, http_handler=handler)
    routes = jsonrpc.routes()
    routes += [Route(path, endpoint, methods=[method]) for (path, method), endpoint in rest.routes().items()]
    routes += extra_routes
    app = Starlette(routes=routes)
    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(card, handler), server)
    server.add_insecure_port(f"127.0.0.1:{args.grpc_port}")
    await server.start()
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning"))
    try:
        await http.serve()
    finally:
        await server.stop(1)


if __name__ == "__main__":
    asyncio.run(main())
