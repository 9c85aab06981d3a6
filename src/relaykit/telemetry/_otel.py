"""The one module that imports OpenTelemetry (extra ``otel``): spans, context propagation, SDK setup, the metrics
bridge.

Nothing else in relaykit imports ``opentelemetry``; ``Telemetry`` reaches this module only when tracing is on, so a
process without the extra (or without an SDK configured) never imports it on the request path.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("OpenTelemetry is not installed: pip install 'relaykit[otel]' (tracing and OTLP export)") from exc

from relaykit.telemetry._metrics import METRICS, Metrics

__all__ = [
    "SERVER",
    "attach",
    "configure_sdk",
    "current",
    "detach",
    "extract",
    "ids",
    "inject",
    "meter_bridge",
    "sdk_configured",
    "span",
    "start_span",
    "tracer",
]

SERVER = SpanKind.SERVER
CLIENT = SpanKind.CLIENT
INTERNAL = SpanKind.INTERNAL
PRODUCER = SpanKind.PRODUCER
ERROR = StatusCode.ERROR

_SCOPE = "relaykit"


def sdk_configured() -> bool:
    """Whether the process has a tracer provider other than the API's default (an SDK set up by someone)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("relaykit")
    except PackageNotFoundError:  # pragma: no cover - a source checkout without metadata
        return "0"


def tracer(provider: Any = None) -> trace.Tracer:
    return trace.get_tracer(_SCOPE, _version(), tracer_provider=provider)


def current() -> Any:
    return otel_context.get_current()


def extract(carrier: Mapping[str, str]) -> Any:
    """The context of incoming ``traceparent``/``tracestate``/``baggage`` (the global propagator)."""
    return propagate.extract(carrier)


def inject(carrier: MutableMapping[str, str], ctx: Any = None) -> None:
    propagate.inject(carrier, context=ctx)


def carrier_bytes() -> bytes:
    """The current context as JSON headers, for a hop that is not HTTP (the work queue)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, separators=(",", ":")).encode() if carrier else b""


def from_bytes(data: bytes) -> Any:
    try:
        carrier = json.loads(data)
    except ValueError:
        return None
    return propagate.extract(carrier) if isinstance(carrier, dict) else None


_W3C = TraceContextTextMapPropagator()


def traceparent(ctx: Any) -> str:
    """The W3C ``traceparent`` of the span current in ``ctx`` (``""`` without one): what a stored record keeps."""
    found = trace.get_current_span(ctx).get_span_context()
    if not found.is_valid:
        return ""
    return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"


def from_traceparent(value: str) -> Any:
    """The context a stored ``traceparent`` names (its span as a remote parent)."""
    return _W3C.extract({"traceparent": value})


def start_span(t: trace.Tracer, name: str, kind: SpanKind, parent: Any, attributes: dict[str, Any]) -> Any:
    return t.start_span(name, context=parent, kind=kind, attributes=attributes)


def attach(span_: Any, parent: Any = None) -> object:
    return otel_context.attach(trace.set_span_in_context(span_, parent))


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


@contextmanager
def span(t: trace.Tracer, name: str, attributes: dict[str, Any], kind: SpanKind = INTERNAL) -> Iterator[Any]:
    with t.start_as_current_span(name, kind=kind, attributes=attributes) as s:
        yield s


def fail(span_: Any, description: str) -> None:
    span_.set_status(Status(StatusCode.ERROR, description))


def ids() -> tuple[str, str] | None:
    """The current span's trace id and span id (hex), when one is recording."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


_EXPORTERS = ("otlp", "console", "none")
_PROTOCOLS = ("http/protobuf", "grpc")


def _chosen(signal: str) -> list[str]:
    """``OTEL_<SIGNAL>_EXPORTER`` (comma-separated ``otlp``/``console``/``none``; default ``otlp``)."""
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    names = [n.strip().lower() for n in os.environ.get(variable, "otlp").split(",") if n.strip()] or ["otlp"]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise ValueError(f"{variable}={','.join(unknown)} is not supported (use {', '.join(_EXPORTERS)})")
    return [] if "none" in names else names


def _protocol(signal: str) -> str:
    """``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL`` (default ``http/protobuf``)."""
    variable = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    value = os.environ.get(variable) or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    value = value.strip().lower()
    if value not in _PROTOCOLS:
        # The Python exporters have no http/json; saying so beats exporting nothing.
        raise ValueError(f"OTLP protocol {value!r} ({variable}) is not supported (use {' or '.join(_PROTOCOLS)})")
    return value


def _otlp(signal: str) -> Any:
    """The OTLP exporter for ``signal`` (``traces`` / ``metrics``) over the protocol the variables choose."""
    kind = "trace_exporter" if signal == "traces" else "metric_exporter"
    name = "OTLPSpanExporter" if signal == "traces" else "OTLPMetricExporter"
    if _protocol(signal) == "grpc":
        try:
            module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.grpc.{kind}")
        except ImportError as exc:
            raise ImportError(
                "OTLP over gRPC needs opentelemetry-exporter-otlp-proto-grpc "
                "(pip install opentelemetry-exporter-otlp-proto-grpc), or set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
            ) from exc
    else:
        module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.http.{kind}")
    return getattr(module, name)()


def configure_sdk() -> None:
    """``relaykit serve --otel``: the SDK from the standard ``OTEL_*`` variables.

    ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: ``otlp`` (default), ``console``, ``none``, or a list;
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` (or the per-signal ``..._TRACES_PROTOCOL`` / ``..._METRICS_PROTOCOL``):
    ``http/protobuf`` (default) or ``grpc`` (needs ``opentelemetry-exporter-otlp-proto-grpc``); the exporters read
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the rest; ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the
    resource. A value it cannot honour raises (``ValueError`` / ``ImportError``) rather than export nothing.
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    # Everything is resolved before anything is installed: a bad variable leaves no half-configured SDK behind.
    span_exporters = [_otlp("traces") if n == "otlp" else ConsoleSpanExporter() for n in _chosen("traces")]
    metric_exporters = [_otlp("metrics") if n == "otlp" else ConsoleMetricExporter() for n in _chosen("metrics")]
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "relaykit")})
    if span_exporters:
        provider = TracerProvider(resource=resource)
        for exporter in span_exporters:
            # The console exporter writes each span as it ends (as the SDK's own auto-configuration does).
            console = type(exporter).__name__ == "ConsoleSpanExporter"
            provider.add_span_processor(SimpleSpanProcessor(exporter) if console else BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
    if metric_exporters:
        readers = [PeriodicExportingMetricReader(exporter) for exporter in metric_exporters]
        otel_metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))


def meter_configured() -> bool:
    return type(otel_metrics.get_meter_provider()).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")


def meter_bridge(metrics: Metrics) -> None:
    """Mirror ``metrics`` into the OpenTelemetry metrics API (same names). Counters and gauges are observable
    instruments read from ``metrics`` at each collection (nothing per request); histograms are recorded as they come
    (the API has no observable histogram)."""
    meter = otel_metrics.get_meter(_SCOPE, _version())
    histograms: dict[str, Any] = {}
    attribute_cache: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}

    def attributes(name: str, labels: tuple[str, ...]) -> dict[str, str]:
        key = (name, labels)
        found = attribute_cache.get(key)
        if found is None:
            found = attribute_cache[key] = dict(zip(METRICS[name][2], labels, strict=True))
        return found

    for name, (kind, unit, _labels, help_text) in METRICS.items():
        if kind == "histogram":
            histograms[name] = meter.create_histogram(name, unit=unit or "1", description=help_text)
        elif kind in ("counter", "updown"):

            def count(_options: Any, name: str = name) -> Any:
                series = metrics.counters.get(name, {})
                return [otel_metrics.Observation(v, attributes(name, k)) for k, v in list(series.items())]

            make = meter.create_observable_counter if kind == "counter" else meter.create_observable_up_down_counter
            make(name, callbacks=[count], unit=unit or "1", description=help_text)
        else:

            def observe(_options: Any, name: str = name) -> Any:
                value = metrics.read_gauges_sync().get(name)
                return [] if value is None else [otel_metrics.Observation(value)]

            meter.create_observable_gauge(name, callbacks=[observe], unit=unit or "1", description=help_text)

    def record(name: str, labels: tuple[str, ...], value: float) -> None:
        histogram = histograms.get(name)
        if histogram is not None:
            histogram.record(value, attributes(name, labels))

    metrics.listeners.append(record)
