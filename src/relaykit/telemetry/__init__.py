"""Observability: OpenTelemetry traces, metrics (``/metrics``, Prometheus text) and JSON logs, as one instrument
(``Telemetry``) plugged into the server at a few points. Off (``None``) unless asked for or an SDK is configured.

>>> from relaykit.telemetry import telemetry_for
>>> telemetry_for(tracing=False, metrics=False) is None
True
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from relaykit.telemetry._logs import JSONFormatter, use_json_logs
from relaykit.telemetry._metrics import METRICS, Metrics
from relaykit.telemetry._scrape import serve_metrics
from relaykit.telemetry._seam import Telemetry, current_ids

__all__ = [
    "METRICS",
    "JSONFormatter",
    "Metrics",
    "Telemetry",
    "client_span",
    "client_tracer",
    "configure_otel",
    "current_ids",
    "serve_metrics",
    "span_current",
    "start_client_span",
    "telemetry_for",
    "use_json_logs",
]


def _otel_imported() -> bool:
    """Whether an OpenTelemetry provider can possibly be set: someone imported the API, or the environment names a
    provider for the API to load. If not, the API is not imported here either: with the extra installed and nothing
    set up, a process stays exactly as without it (importing the API and its propagators costs memory the
    garbage collector then walks)."""
    return (
        "opentelemetry.trace" in sys.modules
        or "opentelemetry.metrics" in sys.modules
        or bool(os.environ.get("OTEL_PYTHON_TRACER_PROVIDER") or os.environ.get("OTEL_PYTHON_METER_PROVIDER"))
    )


def _otel_state() -> tuple[bool, bool]:
    """(tracer provider set, meter provider set); both False without the ``otel`` extra."""
    if not _otel_imported():
        return False, False
    try:
        from relaykit.telemetry import _otel
    except ImportError:
        return False, False
    return _otel.sdk_configured(), _otel.meter_configured()


def telemetry_for(*, tracing: bool | None = None, metrics: bool | None = None) -> Telemetry | None:
    """The ``Telemetry`` to plug in, or ``None`` when there is nothing to do (the zero-cost default).

    ``tracing=None``: spans when an OpenTelemetry SDK tracer provider is set up (by ``--otel`` or the host
    application). ``metrics=None``: metrics when a meter provider is set up (they go to it); ``True``: always (for
    ``/metrics``), mirrored into a configured meter provider too.
    """
    traced, metered = _otel_state()
    if tracing is None:
        tracing = traced
    if metrics is None:
        metrics = metered
    if not tracing and not metrics:
        return None
    values = Metrics() if metrics else None
    if values is not None and metered:
        from relaykit.telemetry import _otel

        _otel.meter_bridge(values)
    return Telemetry(tracing=tracing, metrics=values)


def client_tracer(provider: Any = None) -> Any:
    """The tracer a client makes its spans with: ``provider``'s, else the global one when an SDK is set up, else
    ``None`` (no spans, no cost)."""
    if provider is None and not _otel_imported():
        return None
    try:
        from relaykit.telemetry import _otel
    except ImportError:
        return None
    if provider is None and not _otel.sdk_configured():
        return None
    return _otel.tracer(provider)


@contextlib.contextmanager
def client_span(tracer: Any, operation: str, binding: str) -> Iterator[Any]:
    """A CLIENT span for one call (the ``TraceContext`` interceptor then injects it)."""
    from relaykit.telemetry import _otel

    attributes = {"a2a.operation": operation, "a2a.binding": binding, "rpc.system": "a2a", "rpc.method": operation}
    with _otel.span(tracer, operation, attributes, _otel.CLIENT) as span:
        yield span


def start_client_span(tracer: Any, operation: str, binding: str) -> Any:
    """A CLIENT span for a stream, not made current (end it when the stream ends)."""
    from relaykit.telemetry import _otel

    attributes = {"a2a.operation": operation, "a2a.binding": binding, "rpc.system": "a2a", "rpc.method": operation}
    return _otel.start_span(tracer, operation, _otel.CLIENT, None, attributes)


@contextlib.contextmanager
def span_current(span: Any) -> Iterator[None]:
    """``span`` is the current span inside the block."""
    from relaykit.telemetry import _otel

    token = _otel.attach(span)
    try:
        yield
    finally:
        _otel.detach(token)


def configure_otel() -> None:
    """Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables: ``relaykit serve --otel``.

    OTLP over HTTP/protobuf by default; ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (``otlp``, ``console``,
    ``none``) and ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, ``grpc``) choose otherwise. Raises
    ``ValueError`` for a value it cannot honour and ``ImportError`` (with the package to install) for a missing
    exporter.

        >>> import os; os.environ["OTEL_TRACES_EXPORTER"] = "console"  # doctest: +SKIP
        >>> configure_otel()  # doctest: +SKIP
    """
    from relaykit.telemetry import _otel

    _otel.configure_sdk()
