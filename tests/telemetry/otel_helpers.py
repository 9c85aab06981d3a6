"""Helpers of the telemetry tests (imported as ``otel_helpers``; ``conftest`` names the fixtures).

A relaykit agent served over HTTP (uvicorn) and gRPC in the test's own event loop, on real 127.0.0.1 sockets, with an
OpenTelemetry SDK tracer provider of its own (an in-memory exporter), so nothing global is set for the rest of the
suite; and a webhook receiver that records what it is sent."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.asgi import lifespan, read_body, respond
from support.servers import free_port

from relaykit import agent
from relaykit.assembly import assemble
from relaykit.grpc import GrpcServer
from relaykit.http._app import http_app
from relaykit.telemetry import Metrics, Telemetry

HOST = "127.0.0.1"
START_TIMEOUT = 10.0


# The tracer an "instrumented LLM SDK" inside the agent uses (set by a test).
LLM_TRACER: list[Any] = []


@agent
async def demo(context: Any) -> AsyncIterator[str]:
    """``slow``: waits to be canceled; ``stream N``: N chunks; ``boom``: raises; ``llm``: makes a span of its own
    (as an instrumented SDK would); anything else: one chunk."""
    text = context.text
    if text == "llm":
        with LLM_TRACER[0].start_as_current_span("llm.call"):
            yield "ok"
        return
    if text == "boom":
        raise RuntimeError("the agent broke")
    if text == "slow":
        await asyncio.Event().wait()
    if text.startswith("stream "):
        for i in range(int(text.split()[1])):
            yield f"chunk {i}"
        return
    yield "ok"


@dataclass
class Spans:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def clear(self) -> None:
        self.exporter.clear()


def new_spans() -> Spans:
    """An SDK tracer provider of the test's own, exporting to memory (nothing global is set)."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Spans(provider, exporter)


def _bound() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    return sock


@contextlib.asynccontextmanager
async def serve_asgi(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn in this event loop; yields its base URL."""
    sock = _bound()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, ws="none")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)  # uvicorn offers no startup event; bounded by the timeout above
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        sock.close()


@dataclass
class Served:
    url: str
    grpc: str
    server: Any
    telemetry: Telemetry


@contextlib.asynccontextmanager
async def serve_agent(telemetry: Telemetry, **options: Any) -> AsyncIterator[Served]:
    """``demo`` assembled with ``telemetry``, served over JSON-RPC, HTTP+JSON and gRPC."""
    grpc_port = free_port()  # gRPC and uvicorn bind them themselves
    http_port = free_port()
    options.setdefault("push_allow", ("127.0.0.1",))
    server = assemble(
        demo,
        public_url=f"http://{HOST}:{http_port}",
        grpc_url=f"{HOST}:{grpc_port}",
        telemetry=telemetry,
        **options,
    )
    app = http_app(server)
    config = uvicorn.Config(app, host=HOST, port=http_port, log_level="warning", lifespan="on", ws="none")
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv.serve())
    grpc_server = GrpcServer(server, host=HOST, port=grpc_port)
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while not uv.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)  # uvicorn offers no startup event; bounded by the timeout above
        await grpc_server.start()
        yield Served(f"http://{HOST}:{http_port}", f"{HOST}:{grpc_port}", server, telemetry)
    finally:
        await grpc_server.stop(grace=1)
        uv.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)


@dataclass
class Webhook:
    url: str
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    status: int = 200  # what it answers; only 200s are recorded in ``received``, the others counted in ``refused``
    refused: int = 0

    async def wait_for(self, count: int, within: float = 10.0) -> list[tuple[dict[str, str], bytes]]:
        async with asyncio.timeout(within), self.arrived:
            await self.arrived.wait_for(lambda: len(self.received) >= count)
        return self.received


@contextlib.asynccontextmanager
async def webhook() -> AsyncIterator[Webhook]:
    """A webhook receiver recording each POST's headers and body (answers 200)."""
    hook = Webhook("")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        body = await read_body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        status = hook.status
        await respond(send, status, b"{}", content_type=None)
        async with hook.arrived:
            if status == 200:
                hook.received.append((headers, body))
            else:
                hook.refused += 1
            hook.arrived.notify_all()

    async with serve_asgi(app) as url:
        hook.url = url + "/hook"
        yield hook


def new_telemetry(spans: Spans | None, metrics: bool = True) -> Telemetry:
    return Telemetry(
        tracing=spans is not None,
        metrics=Metrics() if metrics else None,
        tracer_provider=spans.provider if spans is not None else None,
        detail=True,
    )
