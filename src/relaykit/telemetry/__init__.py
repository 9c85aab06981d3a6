"""Observability: OpenTelemetry traces, metrics (``/metrics``, Prometheus text) and JSON logs, as one instrument
(``Telemetry``) plugged into the server at a few points. Off (``None``) unless asked for or an SDK is configured.

>>> from relaykit.telemetry import telemetry_for
>>> telemetry_for(tracing=False, metrics=False) is None
True
"""

from __future__ import annotations

from relaykit.telemetry._logs import JSONFormatter, use_json_logs
from relaykit.telemetry._metrics import METRICS, Metrics
from relaykit.telemetry._seam import Telemetry, current_ids

__all__ = [
    "METRICS",
    "JSONFormatter",
    "Metrics",
    "Telemetry",
    "configure_otel",
    "current_ids",
    "telemetry_for",
    "use_json_logs",
]


def _otel_state() -> tuple[bool, bool]:
    """(tracer provider set, meter provider set); both False without the ``otel`` extra."""
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


def configure_otel() -> None:
    """Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables (OTLP export): ``relaykit serve --otel``."""
    from relaykit.telemetry import _otel

    _otel.configure_sdk()
