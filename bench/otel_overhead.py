"""What observability costs: server CPU per SendMessage and per 1,000-chunk stream, side by side in one run.

    python bench/otel_overhead.py [--rounds 3] [--sends 3000] [--streams 20]

Configurations (each a fresh process, alternated a b c d e a b c d e …, medians of the rounds):

* (a) relaykit, the ``otel`` extra absent (``opentelemetry`` made unimportable);
* (b) relaykit, the OpenTelemetry API installed and no SDK set up (the default: telemetry is ``None``);
* (c) relaykit, the SDK with an in-memory exporter (batch span processor) and metrics on (``/metrics`` registry
  mirrored into an SDK meter provider with an in-memory reader);
* (d) the official a2a-sdk with its tracing off (``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false``);
* (e) the official a2a-sdk with its tracing on and the same SDK + in-memory exporter;
* (f) the floor: no A2A server at all, only what the span tree and metrics of one traced send ask of the same SDK
  setup as (c): a SERVER span with its attributes, a child ``a2a.execute`` span made current inside it, the final
  attributes, and two histogram records. Its ratio is against (a): what (c) would cost over (a) if relaykit's own
  telemetry code cost nothing.

The app is driven in-process through raw ASGI calls (no sockets, no HTTP client), so the CPU measured is the
server's own and the overhead ratios are not diluted by HTTP parsing: a conservative measure. The a2a-sdk peer is the
echo agent of the shared bench harness (``../shared/bench/peers/a2a_sdk/echo_agent.py``); without it, (d)/(e) are
skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.abc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SDK_PEER = HERE.parent.parent / "shared" / "bench" / "peers" / "a2a_sdk"
if not SDK_PEER.exists():
    SDK_PEER = Path("/work/shared/bench/peers/a2a_sdk")

CONFIGS = {
    "a": "relaykit, no otel extra",
    "b": "relaykit, OTel API, no SDK",
    "c": "relaykit, SDK + in-memory exporter + metrics",
    "d": "a2a-sdk, tracing off",
    "e": "a2a-sdk, tracing on (SDK + in-memory exporter)",
    "f": "the floor: the OTel SDK alone, one send's 2 spans + 2 histogram records, no server",
}


class _NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is not installed (bench configuration a)")
        return None


# The in-memory exporter keeps every span it is given; a real exporter sends them and lets them go. Emptied every
# ``_DRAIN`` requests (in every configuration that has one), so the run does not measure the garbage collector walking
# thousands of retained spans.
_EXPORTERS: list[Any] = []
_DRAIN = 256


def _drain() -> None:
    for exporter in _EXPORTERS:
        exporter.clear()


def _sdk_setup() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    _EXPORTERS.append(exporter)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _app(config: str) -> Any:
    if config == "a":
        sys.meta_path.insert(0, _NoOtel())
    if config in ("c", "e"):
        _sdk_setup()
    if config in ("d", "e"):
        os.environ["OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"] = "true" if config == "e" else "false"
        sys.path.insert(0, str(SDK_PEER))
        import echo_agent  # type: ignore[import-not-found]

        return echo_agent.build_app(8000)
    sys.path.insert(0, str(HERE))
    from echo import BenchEcho  # type: ignore[import-not-found]

    from relaykit.http import create_app

    app = create_app(BenchEcho(), metrics=config == "c")
    server = app.state.relaykit
    assert (server.telemetry is None) == (config in ("a", "b")), config
    return app


_NEVER = asyncio.Event()


async def _call(app: Any, body: bytes) -> bytes:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"a2a-version", b"1.0"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await _NEVER.wait()  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(chunks)


def _request(method: str, text: str, n: int) -> bytes:
    # One messageId per request: a reused one is taken as a retry (idempotency window) and answered from the store.
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": method,
            "params": {"message": {"role": "ROLE_USER", "messageId": f"{method}-{n}", "parts": [{"text": text}]}},
        }
    ).encode()


def _floor(sends: int) -> dict[str, float]:
    """(f): the SDK's own cost for the telemetry of one traced send, with no server around it."""
    _sdk_setup()
    from opentelemetry import context, metrics, trace

    tracer = trace.get_tracer("relaykit")
    duration = metrics.get_meter("relaykit").create_histogram("rpc.server.duration", unit="s")
    time_to_first = metrics.get_meter("relaykit").create_histogram("a2a.server.time_to_first_event", unit="s")
    start = {"rpc.system": "a2a", "rpc.method": "SendMessage", "a2a.binding": "JSONRPC", "a2a.protocol.version": "1.0"}
    labels = {"rpc.method": "SendMessage", "a2a.binding": "JSONRPC", "a2a.outcome": "ok"}

    def one(i: int) -> None:
        server = tracer.start_span("SendMessage", kind=trace.SpanKind.SERVER, attributes=start)
        token = context.attach(trace.set_span_in_context(server))
        try:
            with tracer.start_as_current_span(
                "a2a.execute", attributes={"a2a.task.id": f"t{i}", "a2a.context.id": "c"}
            ):
                pass
            server.set_attributes({"a2a.task.id": f"t{i}", "a2a.context.id": "c", "a2a.task.state": "COMPLETED"})
        finally:
            context.detach(token)
            server.end()
        duration.record(0.001, labels)
        time_to_first.record(0.001, labels)

    for i in range(300):
        one(i)
    _drain()
    started = time.process_time()
    for i in range(sends):
        one(i)
        if i % _DRAIN == 0:
            _drain()
    return {"send_cpu_us": (time.process_time() - started) / sends * 1e6, "stream_cpu_ms": float("nan")}


async def _measure(config: str, sends: int, streams: int) -> dict[str, float]:
    if config == "f":
        return _floor(sends)
    app = _app(config)
    for i in range(300):  # warm-up (and the lazy start of the app)
        out = await _call(app, _request("SendMessage", "hello", i))
        assert b"COMPLETED" in out, out[:300]
    _drain()
    started = time.process_time()
    for i in range(sends):
        await _call(app, _request("SendMessage", "hello", 1000 + i))
        if i % _DRAIN == 0:
            _drain()
    send_us = (time.process_time() - started) / sends * 1e6
    out = await _call(app, _request("SendStreamingMessage", "stream 1000", 10))
    assert out.count(b"chunk ") >= 1000, out[-300:]
    _drain()
    started = time.process_time()
    for i in range(streams):
        await _call(app, _request("SendStreamingMessage", "stream 1000", 20 + i))
        _drain()
    stream_ms = (time.process_time() - started) / streams * 1e3
    return {"send_cpu_us": send_us, "stream_cpu_ms": stream_ms}


def _child(config: str, sends: int, streams: int) -> dict[str, float] | None:
    if config in ("d", "e") and not (SDK_PEER / "echo_agent.py").exists():
        return None
    out = subprocess.run(
        [sys.executable, __file__, "--child", config, "--sends", str(sends), "--streams", str(streams)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--child", default=None)
    parser.add_argument("--configs", default="abcdef", help="which configurations to run (default: all)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_measure(args.child, args.sends, args.streams))))
        return
    results: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS if c in args.configs}
    for _ in range(args.rounds):
        for config in results:
            found = _child(config, args.sends, args.streams)
            if found is not None:
                results[config].append(found)
    rows = []
    base: dict[str, float] = {}
    relaykit_base = 0.0
    for config, runs in results.items():
        if not runs:
            continue
        send = statistics.median(r["send_cpu_us"] for r in runs)
        stream = statistics.median(r["stream_cpu_ms"] for r in runs)
        spread_send = f"[{min(r['send_cpu_us'] for r in runs):.0f}-{max(r['send_cpu_us'] for r in runs):.0f}]"
        spread_stream = f"[{min(r['stream_cpu_ms'] for r in runs):.1f}-{max(r['stream_cpu_ms'] for r in runs):.1f}]"
        if config in ("a", "d"):
            base = {"send": send, "stream": stream}
            if config == "a":
                relaykit_base = send
        if config == "f":
            # No stream: a chunk gets no span and no metric of its own (only the stream's request span does).
            floor = send / relaykit_base if relaykit_base else float("nan")
            rows.append(f"| ({config}) {CONFIGS[config]} | {send:.0f} {spread_send} | +{floor:.3f} of (a) | — | — |")
            continue
        rows.append(
            f"| ({config}) {CONFIGS[config]} | {send:.0f} {spread_send} | {send / base['send']:.3f} | "
            f"{stream:.1f} {spread_stream} | {stream / base['stream']:.3f} |"
        )
    print(f"rounds={args.rounds} sends={args.sends} streams={args.streams} (medians [min-max])\n")
    print("| configuration | CPU µs / SendMessage | ratio | CPU ms / 1,000-chunk stream | ratio |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
