"""``relaykit serve --otel`` honours the standard exporter variables (``OTEL_TRACES_EXPORTER``,
``OTEL_METRICS_EXPORTER``, ``OTEL_EXPORTER_OTLP_PROTOCOL``), and refuses a value it cannot honour with a clear
message instead of exporting nothing.

Each case runs in a fresh interpreter: the OpenTelemetry SDK's providers can be set once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs relaykit[otel]")

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # seconds: one short interpreter run

# Sets the SDK up as --otel does, makes one span and reports what was installed.
_PROBE = """
import json, sys
from opentelemetry import metrics, trace
from relaykit.telemetry import configure_otel
configure_otel()
tracer_provider = trace.get_tracer_provider()
with trace.get_tracer("probe").start_as_current_span("probe-span"):
    pass
tracer_provider.force_flush() if hasattr(tracer_provider, "force_flush") else None
print(json.dumps({"tracer": type(tracer_provider).__name__, "meter": type(metrics.get_meter_provider()).__name__}),
      file=sys.stderr)
"""


def _run(code: list[str], **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(variables)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(code, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)


def test_console_traces_and_no_metrics() -> None:
    done = _run([sys.executable, "-c", _PROBE], OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none")
    assert done.returncode == 0, done.stderr
    installed = json.loads(done.stderr.strip().splitlines()[-1])
    assert installed["tracer"] == "TracerProvider"
    assert installed["meter"] != "MeterProvider"  # metrics stay local (the /metrics registry only)
    assert '"name": "probe-span"' in done.stdout  # the console exporter wrote the span as it ended


def test_none_installs_no_tracer() -> None:
    done = _run([sys.executable, "-c", _PROBE], OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    assert done.returncode == 0, done.stderr
    installed = json.loads(done.stderr.strip().splitlines()[-1])
    assert installed["tracer"] != "TracerProvider"
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin is not supported"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTLP protocol 'http/json'"),
    ],
)
def test_serve_refuses_a_value_it_cannot_honour(variables: dict[str, str], expected: str) -> None:
    done = _run([sys.executable, "-m", "relaykit", "serve", "examples/echo.py", "--port", "0", "--otel"], **variables)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert expected in done.stderr


def test_grpc_protocol_without_its_exporter_names_the_package() -> None:
    try:
        import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the gRPC OTLP exporter is installed here; this case is about its absence")
    done = _run(
        [sys.executable, "-m", "relaykit", "serve", "examples/echo.py", "--port", "0", "--otel"],
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "pip install opentelemetry-exporter-otlp-proto-grpc" in done.stderr
