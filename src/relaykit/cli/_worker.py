"""``relaykit worker TARGET``: run queued work for a scale-out deployment, without serving HTTP.

API replicas (``relaykit serve … --no-worker``) accept requests and enqueue them; workers take them from the Redis
work queue. Both need the same ``--store postgresql://…``, ``--bus redis://…`` and ``--namespace``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from relaykit.cli._fail import CliError, describe
from relaykit.cli._options import (
    add_cluster_options,
    add_observability_options,
    add_push_options,
    add_quota_options,
    add_task_limit_options,
    seconds,
    seconds_or_zero,
    setup_observability,
)
from relaykit.cli._security import SERVING_ONLY, add_push_secrets_option
from relaykit.cli._serve import build_server, freeze_startup_heap

__all__ = ["add_worker_parser", "run_worker"]


def add_worker_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("worker", help="run queued work of a scale-out deployment (needs --bus redis://)")
    p.add_argument("target", help="path/to/file.py[:name] or package.module:name")
    p.add_argument("--store", default=None, help="postgresql://… (env RELAYKIT_STORE)")
    p.add_argument("--bus", default=None, help="redis://… (env RELAYKIT_BUS)")
    p.add_argument("--namespace", default="relaykit", help="table / key prefix")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    add_observability_options(p)
    p.add_argument("--push", action=argparse.BooleanOptionalAction, default=True, help="push notifications")
    p.add_argument("--push-allow", action="append", default=[], metavar="HOST_OR_CIDR")
    add_push_options(p)
    add_push_secrets_option(p)
    p.add_argument("--grace", type=seconds_or_zero, default=5.0, help="seconds running executions get on shutdown")
    p.add_argument("--executor-timeout", type=seconds, default=None, help="fail executions running longer")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT", help="GET /metrics on this port")
    p.add_argument("--metrics-host", default="127.0.0.1", help="the address --metrics-port listens on")
    add_cluster_options(p)
    # The same task limits as the API replicas: a worker runs the executions (artifacts) and starts the follow-ups
    # that waited (their history is checked again then).
    add_task_limit_options(p)
    # The same quotas as the API replicas: a worker releases the executions and queued messages they counted.
    add_quota_options(p)
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,  # not given: relaykit's own --debug (before the command) stands
        help="on an error, show the full traceback (also: RELAYKIT_DEBUG=1)",
    )
    p.set_defaults(func=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    setup_observability(args)
    bus = args.bus or os.environ.get("RELAYKIT_BUS") or "memory"
    if not bus.startswith(("redis://", "rediss://", "unix://")):
        raise CliError("needs --bus redis://… (or RELAYKIT_BUS): workers take work from Redis")
    # The serving settings build_server reads, at values that serve nothing (a worker has no binding).
    for name, value in {
        "port": 0,
        "grpc_port": None,
        "public_url": "http://localhost",
        "retention": None,
        "access_log": False,
        "worker": True,
        **dict.fromkeys(SERVING_ONLY),
    }.items():
        setattr(args, name, value)
    server = build_server(args)

    async def main() -> int:
        try:
            await server.start()
        except Exception as exc:
            raise CliError(describe(exc)) from exc
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        scrape = None
        if args.metrics_port is not None:
            from relaykit.telemetry import serve_metrics

            try:
                scrape = await serve_metrics(server.telemetry.metrics, args.metrics_host, args.metrics_port)
            except OSError as exc:
                await server.stop()
                raise CliError(f"cannot serve /metrics on {args.metrics_host}:{args.metrics_port}: {exc}") from exc
        print(f"relaykit: worker {server.engine.cluster.id} running {args.target}", flush=True)
        freeze_startup_heap()
        await stop.wait()
        if scrape is not None:
            scrape.close()
        await server.stop()
        return 0

    # uvloop when installed (as uvicorn[standard] installs it), like ``relaykit serve``: a worker is all I/O.
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
