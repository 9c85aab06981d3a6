"""The option groups ``relaykit serve`` and ``relaykit worker`` share: durations, cluster, push, observability,
HTTP limits, task limits and per-principal quotas, each an ``add_…`` for the parser and a reader that turns the flags
into what ``relaykit.assembly`` takes."""

from __future__ import annotations

import argparse
import logging
import re
from typing import Any

from relaykit.cli._fail import CliError
from relaykit.http._guard import HttpLimits, default_max_connections
from relaykit.server._quotas import Quotas

__all__ = [
    "add_cluster_options",
    "add_http_limit_options",
    "add_observability_options",
    "add_push_options",
    "add_quota_options",
    "add_task_limit_options",
    "byte_count",
    "http_limits",
    "parse_duration",
    "push_kwargs",
    "quotas_from",
    "seconds",
    "seconds_or_zero",
    "setup_observability",
    "task_limits",
]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")


_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def seconds(text: str) -> float:
    """A number of seconds above zero (``--executor-timeout``, ``--keepalive``): argparse's error otherwise."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value


def seconds_or_zero(text: str) -> float:
    """A number of seconds, zero included (``--grace 0``: stop at once)."""
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, not {text!r}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def byte_count(text: str) -> int:
    """A number of bytes, 0 or more (``--max-history-bytes``): argparse's error otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of bytes, 0 or more, not {text!r}")
    return value


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` ⇒ seconds."""
    found = _DURATION.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 15m, 12h, 7d)")
    return float(found.group(1)) * _UNITS[found.group(2)]


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lease",
        type=parse_duration,
        default=10.0,
        help="with --bus redis://: a lost worker's tasks are taken over "
        "this long after its last heartbeat (default 10s)",
    )
    p.add_argument("--heartbeat", type=parse_duration, default=None, help="worker heartbeat period (default lease/5)")
    p.add_argument(
        "--idempotency-window",
        type=parse_duration,
        default=600.0,
        help="a repeated messageId within this window gets the original result (default 10m; 0 turns it off)",
    )


def add_push_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--push-events", choices=["all", "state"], default="all", help="push every task event, or state changes only"
    )
    p.add_argument("--push-timeout", type=parse_duration, default=None, help="webhook request timeout (default 10s)")
    p.add_argument("--push-retries", type=int, default=None, help="attempts before a notification is dead (default 8)")
    p.add_argument("--push-backoff", type=parse_duration, default=None, help="first retry delay (default 1s)")
    p.add_argument("--push-max-backoff", type=parse_duration, default=None, help="longest retry delay (default 5m)")
    p.add_argument("--push-max-age", type=parse_duration, default=None, help="give up after this long (default 1d)")
    p.add_argument(
        "--push-suspend-after",
        type=int,
        default=None,
        help="suspend a config after this many failed deliveries in a row (default 10; 0: never)",
    )
    p.add_argument(
        "--push-suspend-seconds",
        type=parse_duration,
        default=None,
        help="... spanning at least this long (default 60s)",
    )
    p.add_argument(
        "--push-signing-key",
        action="append",
        default=[],
        metavar="PEM_FILE",
        help="sign webhooks with this EC/RSA private key (repeatable for rotation: oldest first, last signs)",
    )
    p.add_argument("--push-key-id", default=None, help="kid of the signing key (default: its JWK thumbprint)")


def push_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The push options of ``assemble`` from the flags (defaults left to it)."""
    from pathlib import Path

    from relaykit.push import DeliveryPolicy

    fields = {
        "timeout": args.push_timeout,
        "max_attempts": args.push_retries,
        "backoff": args.push_backoff,
        "max_backoff": args.push_max_backoff,
        "max_age": args.push_max_age,
        "suspend_after": args.push_suspend_after,
        "suspend_seconds": args.push_suspend_seconds,
    }
    chosen = {k: v for k, v in fields.items() if v is not None}
    out: dict[str, Any] = {"push_events": args.push_events}
    if chosen:
        out["push_policy"] = DeliveryPolicy(**chosen)
    if args.push_signing_key:
        try:
            out["push_signing_key"] = [Path(path).read_bytes() for path in args.push_signing_key]
        except OSError as exc:
            raise CliError(f"cannot read --push-signing-key: {exc}") from None
        out["push_key_id"] = args.push_key_id
    return out


def add_observability_options(p: argparse.ArgumentParser) -> None:
    """``--otel`` and ``--log-format`` (serve and worker)."""
    p.add_argument(
        "--otel",
        action="store_true",
        help="set up the OpenTelemetry SDK from the OTEL_* environment variables (OTLP export; needs relaykit[otel])",
    )
    p.add_argument("--log-format", choices=["text", "json"], default="text", help="json: one object per line")


def setup_observability(args: argparse.Namespace) -> None:
    """Logging as ``--log-level``/``--log-format`` say, and the OpenTelemetry SDK with ``--otel``."""
    if getattr(args, "log_format", "text") == "json":
        from relaykit.telemetry import use_json_logs

        use_json_logs(args.log_level.upper())
    else:
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if getattr(args, "otel", False):
        from relaykit.telemetry import configure_otel

        try:
            configure_otel()
        except ImportError as exc:
            raise CliError(f"--otel needs the OpenTelemetry SDK and OTLP exporter: {exc}") from exc
        except ValueError as exc:
            raise CliError(f"--otel: {exc}") from exc


def add_http_limit_options(p: argparse.ArgumentParser) -> None:
    """The HTTP connection limits (relaykit.http._guard; docs/limits.md): on by default."""
    d = HttpLimits()
    p.add_argument(
        "--max-header-bytes", type=int, default=d.max_header_bytes, help="request head size cap, 431 past it"
    )
    p.add_argument(
        "--header-timeout", type=parse_duration, default=d.header_timeout, help="seconds to send a request head"
    )
    p.add_argument(
        "--body-timeout", type=parse_duration, default=d.body_timeout, help="seconds between request body reads"
    )
    p.add_argument(
        "--min-body-rate",
        type=int,
        default=d.min_body_rate,
        help="bytes/s a request body must average once past --body-timeout (0: no such bound)",
    )
    p.add_argument(
        "--idle-timeout", type=parse_duration, default=d.idle_timeout, help="keep-alive idle connection timeout"
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="open connections cap (default 1000, lowered to fit the open-file limit); 0 turns the limits off",
    )


def add_task_limit_options(p: argparse.ArgumentParser) -> None:
    """What one task may grow to (``assemble``'s ``max_history_bytes`` and ``max_artifact_bytes``; docs/limits.md);
    0 turns one off. Not given: ``assemble``'s defaults, the one place they are written."""
    p.add_argument(
        "--max-history-bytes",
        type=byte_count,
        default=None,
        metavar="BYTES",
        help="a task's history (ProtoJSON bytes) that follow-up messages may grow it to; past it a follow-up is "
        "refused (default 16 MiB; 0: no limit)",
    )
    p.add_argument(
        "--max-artifact-bytes",
        type=byte_count,
        default=None,
        metavar="BYTES",
        help="artifact bytes an agent may publish on one live task; past it the task fails (default 64 MiB; 0: no "
        "limit)",
    )


def task_limits(args: argparse.Namespace) -> dict[str, Any]:
    """The task limits of ``assemble`` the flags set (the others left to its defaults)."""
    chosen = {
        "max_history_bytes": getattr(args, "max_history_bytes", None),
        "max_artifact_bytes": getattr(args, "max_artifact_bytes", None),
    }
    return {name: value for name, value in chosen.items() if value is not None}


def add_quota_options(p: argparse.ArgumentParser) -> None:
    """Per-principal quotas (relaykit.server._quotas; docs/limits.md); 0 turns one off."""
    d = Quotas()
    p.add_argument("--quota-executions", type=int, default=d.executions, help="concurrent executions per principal")
    p.add_argument("--quota-streams", type=int, default=d.streams, help="open streams per principal")
    p.add_argument(
        "--quota-queued", type=int, default=d.queued, help="messages accepted but not yet running, per principal"
    )
    p.add_argument("--quota-rate", type=float, default=d.rate, help="requests per second per principal")
    p.add_argument("--quota-burst", type=int, default=d.burst, help="request burst per principal")
    p.add_argument("--max-push-configs", type=int, default=d.push_configs, help="push configs per task")


def quotas_from(args: argparse.Namespace) -> Quotas:
    d = Quotas()
    return Quotas(
        executions=getattr(args, "quota_executions", d.executions),
        streams=getattr(args, "quota_streams", d.streams),
        queued=getattr(args, "quota_queued", d.queued),
        rate=getattr(args, "quota_rate", d.rate),
        burst=getattr(args, "quota_burst", d.burst),
        push_configs=getattr(args, "max_push_configs", d.push_configs),
    )


def http_limits(args: argparse.Namespace) -> HttpLimits | None:
    """The limits the flags ask for; None when ``--max-connections 0`` turns them off (benchmarks)."""
    cap = getattr(args, "max_connections", None)
    if cap == 0:
        return None
    defaults = HttpLimits()
    return HttpLimits(
        max_header_bytes=getattr(args, "max_header_bytes", defaults.max_header_bytes),
        header_timeout=getattr(args, "header_timeout", defaults.header_timeout),
        body_timeout=getattr(args, "body_timeout", defaults.body_timeout),
        min_body_rate=getattr(args, "min_body_rate", defaults.min_body_rate),
        idle_timeout=getattr(args, "idle_timeout", defaults.idle_timeout),
        max_connections=cap if cap is not None else default_max_connections(),
    )
