"""A minimal OTLP/HTTP receiver process for the telemetry tests: what the OpenTelemetry exporter of a relaykit process
sends, decoded with the OTLP protobuf definitions (opentelemetry-proto).

    python3 otlp_receiver.py PORT

* ``POST /v1/traces`` (``application/x-protobuf``, gzip or not): an ``ExportTraceServiceRequest``; every span is kept
  as ``{service, name, kind, trace_id, span_id, parent_span_id, attributes}`` (ids hex).
* ``POST /v1/metrics``: an ``ExportMetricsServiceRequest``; the metric names are kept.
* ``GET /_spans``: ``{"spans": [...], "metrics": [...]}``; ``GET /_ready``: 200.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import uvicorn
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

# Run as a script (test_export starts it as a subprocess): make ``tests/`` importable for ``support``.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.asgi import lifespan, read_body, respond

SPANS: list[dict[str, Any]] = []
METRICS: list[str] = []


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _traces(body: bytes) -> bytes:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                SPANS.append(
                    {
                        "service": resource.get("service.name"),
                        "name": span.name,
                        "kind": span.kind,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                    }
                )
    return ExportTraceServiceResponse().SerializeToString()


def _metrics(body: bytes) -> bytes:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            METRICS.extend(metric.name for metric in scope_metrics.metrics)
    return ExportMetricsServiceResponse().SerializeToString()


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    body = await read_body(receive)
    headers = dict(scope["headers"])
    if headers.get(b"content-encoding") == b"gzip":
        body = gzip.decompress(body)
    status, content_type, answer = 200, b"application/json", b"{}"
    if scope["path"] == "/v1/traces" and scope["method"] == "POST":
        content_type, answer = b"application/x-protobuf", _traces(body)
    elif scope["path"] == "/v1/metrics" and scope["method"] == "POST":
        content_type, answer = b"application/x-protobuf", _metrics(body)
    elif scope["path"] == "/_spans":
        answer = json.dumps({"spans": SPANS, "metrics": sorted(set(METRICS))}).encode()
    elif scope["path"] != "/_ready":
        status = 404
    await respond(send, status, answer, content_type)


def main() -> None:
    config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
