"""relaykit's metrics: a few counters, histograms and gauges, rendered as Prometheus text (``GET /metrics``).

Invariants:

* recording is a dict update keyed by the label values (no objects made per request beyond the key tuple), so
  ``--metrics`` costs little; with metrics off nothing here is called at all;
* the names are the OpenTelemetry-style names of the table in README ("Operating relaykit"); the Prometheus name is
  the OTel name with dots as underscores, plus the unit and ``_total`` suffixes the exposition format expects;
* gauges are read at scrape time (callbacks), so they are never stale and cost nothing between scrapes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

__all__ = ["DURATION_BUCKETS", "METRICS", "Metrics"]

# Seconds: the OpenTelemetry default boundaries, as seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)

# name -> (kind, unit, labels, help). The one table of relaykit's instruments (README repeats it for operators).
METRICS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "a2a.server.requests": ("counter", "", ("operation", "binding", "outcome"), "A2A requests handled"),
    "a2a.server.request.duration": (
        "histogram",
        "s",
        ("operation", "binding"),
        "Time to answer an A2A request (streams: until the stream ends)",
    ),
    "a2a.server.stream.time_to_first_event": (
        "histogram",
        "s",
        ("operation", "binding"),
        "Time from a streaming request to its first event",
    ),
    "a2a.server.executions": ("counter", "", ("state",), "Agent executions ended, by the task state they left"),
    "a2a.server.execution.duration": ("histogram", "s", (), "Time an agent execution ran"),
    "a2a.server.executions.active": ("gauge", "", (), "Agent executions running now"),
    "a2a.server.tasks": (
        "updown",
        "",
        ("state",),
        "Tasks by state now, as this process moved them (a task taken over elsewhere stays in its last state here)",
    ),
    "a2a.server.stream.subscribers": ("gauge", "", (), "Open event-stream subscriptions (SSE and gRPC streams)"),
    "a2a.push.deliveries": (
        "counter",
        "",
        ("outcome",),
        "Push notification delivery attempts: delivered, retried (failed, will retry), dead (given up)",
    ),
    "a2a.push.outbox.backlog": ("gauge", "", (), "Push notifications queued for delivery in this process"),
    "a2a.queue.depth": ("gauge", "", (), "Messages waiting in the scale-out work queue (not yet taken)"),
    "a2a.queue.lag": ("gauge", "s", (), "Age of the oldest message waiting in the scale-out work queue"),
    "a2a.queue.lease_takeovers": ("counter", "", (), "Tasks taken over from a worker whose lease lapsed"),
    "a2a.queue.worker_lost": ("counter", "", (), "Tasks marked FAILED 'worker lost'"),
}


def prometheus_name(name: str) -> str:
    """``a2a.server.request.duration`` (unit s) -> ``a2a_server_request_duration_seconds``."""
    _kind, unit, _, _ = METRICS[name]
    base = name.replace(".", "_")
    if unit == "s":
        base += "_seconds"
    return base


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


Gauge = Callable[[], float | Awaitable[float]]


class Metrics:
    """The process's metric values. ``add``/``observe`` record; ``render`` is the Prometheus exposition.

    >>> m = Metrics()
    >>> m.add("a2a.server.requests", ("SendMessage", "jsonrpc", "ok"))
    >>> "a2a_server_requests_total" in m.render_sync()
    True
    """

    def __init__(self) -> None:
        self.counters: dict[str, dict[tuple[str, ...], float]] = {}
        # name -> labels -> [bucket counts..., count, sum]
        self.histograms: dict[str, dict[tuple[str, ...], list[float]]] = {}
        self.gauges: dict[str, list[Gauge]] = {}
        # Told of each histogram record, for a bridge to another metrics API (OpenTelemetry): (name, labels, value);
        # counters and gauges are read by such a bridge when it collects.
        self.listeners: list[Callable[[str, tuple[str, ...], float], None]] = []

    def add(self, name: str, labels: tuple[str, ...] = (), value: float = 1.0) -> None:
        """Add to a counter, or move an up/down gauge (``value`` may then be negative)."""
        series = self.counters.get(name)
        if series is None:
            series = self.counters[name] = {}
        series[labels] = series.get(labels, 0.0) + value

    def observe(self, name: str, labels: tuple[str, ...], value: float) -> None:
        series = self.histograms.get(name)
        if series is None:
            series = self.histograms[name] = {}
        row = series.get(labels)
        if row is None:
            row = series[labels] = [0.0] * (len(DURATION_BUCKETS) + 3)  # buckets (+Inf last), count, sum
        row[bisect.bisect_left(DURATION_BUCKETS, value)] += 1
        row[-2] += 1
        row[-1] += value
        for listener in self.listeners:
            listener(name, labels, value)

    def gauge(self, name: str, read: Gauge) -> None:
        """Add a source to a gauge (several sources are summed: e.g. the subscribers of two buses)."""
        self.gauges.setdefault(name, []).append(read)

    async def read_gauges(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for name, sources in self.gauges.items():
            total = 0.0
            for read in sources:
                try:
                    value = read()
                    if not isinstance(value, int | float):
                        value = await value
                except Exception:
                    continue  # an unreachable source (Redis down) leaves the gauge out rather than fail the scrape
                total += float(value)
            values[name] = total
        return values

    def read_gauges_sync(self) -> dict[str, float]:
        """The gauges whose sources answer synchronously (OpenTelemetry's observable callbacks are synchronous)."""
        values: dict[str, float] = {}
        for name, sources in self.gauges.items():
            total = 0.0
            for read in sources:
                try:
                    value = read()
                except Exception:
                    continue
                if isinstance(value, int | float):
                    total += float(value)
                elif hasattr(value, "close"):
                    value.close()
            values[name] = total
        return values

    async def render(self) -> bytes:
        """The Prometheus text exposition (version 0.0.4) of every instrument."""
        return self._render(await self.read_gauges())

    def render_sync(self) -> str:
        return self._render(self.read_gauges_sync()).decode()

    def _render(self, gauges: dict[str, float]) -> bytes:
        lines: list[str] = []
        for name, (kind, _unit, label_names, help_text) in METRICS.items():
            prom = prometheus_name(name)
            if kind == "counter":
                series: Iterable[tuple[tuple[str, ...], Any]] = self.counters.get(name, {}).items()
                lines += [f"# HELP {prom}_total {help_text}", f"# TYPE {prom}_total counter"]
                lines += [f"{prom}_total{_labels(label_names, k)} {_num(v)}" for k, v in series]
            elif kind == "histogram":
                lines += [f"# HELP {prom} {help_text}", f"# TYPE {prom} histogram"]
                for key, row in self.histograms.get(name, {}).items():
                    cumulative = 0.0
                    for bound, count in zip((*DURATION_BUCKETS, math.inf), row, strict=False):
                        cumulative += count
                        le = 'le="' + _num(bound) + '"'
                        lines.append(f"{prom}_bucket{_labels(label_names, key, le)} {_num(cumulative)}")
                    lines.append(f"{prom}_count{_labels(label_names, key)} {_num(row[-2])}")
                    lines.append(f"{prom}_sum{_labels(label_names, key)} {_num(row[-1])}")
            elif kind == "updown":  # a gauge with labels, moved up and down as things change (not read at scrape)
                lines += [f"# HELP {prom} {help_text}", f"# TYPE {prom} gauge"]
                lines += [f"{prom}{_labels(label_names, k)} {_num(v)}" for k, v in self.counters.get(name, {}).items()]
            elif name in gauges:
                lines += [f"# HELP {prom} {help_text}", f"# TYPE {prom} gauge", f"{prom} {_num(gauges[name])}"]
        return ("\n".join(lines) + "\n").encode()
