"""``relaykit serve``: run an agent with the embedded defaults, exactly as CONTRACT describes.

Start-up order, so that every refusal is one line (``relaykit serve: error: …``, exit 2) and nothing claims to serve
before it does:

1. check the options and load the user's target (``_target``), then build the app;
2. bind the HTTP socket ourselves (a port in use is refused here, before the store is touched);
3. open the store (and take its single-owner lock), start gRPC when asked;
4. hand the bound socket to uvicorn; the "serving … agent card at …" banner is printed only once uvicorn's start-up
   has completed and the socket listens.

``--reload`` runs the same build in uvicorn's reload worker: the options travel as JSON in ``RELAYKIT_SERVE_OPTIONS``
and ``reload_factory`` rebuilds the app from them after every change.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from relaykit.cli._fail import CliError, debug_enabled, describe, report
from relaykit.cli._options import (
    add_cluster_options,
    add_http_limit_options,
    add_observability_options,
    add_push_options,
    add_quota_options,
    add_task_limit_options,
    http_limits,
    parse_duration,
    push_kwargs,
    quotas_from,
    seconds,
    seconds_or_zero,
    setup_observability,
    task_limits,
)
from relaykit.cli._security import (
    add_security_options,
    any_security_option,
    grpc_credentials,
    security_kwargs,
    tls_on,
    uvicorn_tls,
    with_client_certs,
)
from relaykit.cli._target import load_target, target_file
from relaykit.cli._uvicorn import DrainingServer, ListeningServer, bind_socket, loop_factory

__all__ = ["add_serve_parser", "build_app", "build_server", "run_serve"]


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve an agent over A2A (JSON-RPC and HTTP+JSON)")
    p.add_argument("target", help="path/to/file.py[:name] or package.module:name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=None, help="also serve gRPC on this port")
    p.add_argument("--public-url", default=None, help="base URL in the card (default http://localhost:PORT)")
    p.add_argument(
        "--store",
        default=None,
        help="memory | sqlite:///path.db[?synchronous=full] | path.db | postgresql://… "
        "(env RELAYKIT_STORE; default sqlite:///relaykit.db)",
    )
    p.add_argument("--bus", default=None, help="memory | redis://… (env RELAYKIT_BUS; default memory)")
    p.add_argument("--namespace", default="relaykit", help="table / key prefix")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=False)
    add_observability_options(p)
    p.add_argument("--metrics", action="store_true", help="Prometheus text at GET /metrics on the HTTP port")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="GET /metrics on this port of --host instead (also on the HTTP port only with --metrics)",
    )
    p.add_argument("--reload", action="store_true", help="restart on code changes (development)")
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,  # not given: relaykit's own --debug (before the command) stands
        help="on an error, show the full traceback (also: RELAYKIT_DEBUG=1)",
    )
    p.add_argument("--push", action=argparse.BooleanOptionalAction, default=True, help="push notifications")
    p.add_argument(
        "--push-allow",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        help="allow webhooks to this host or network (repeatable)",
    )
    add_push_options(p)
    # A2A versions served (issue 12): 0.3 goes through the codec in front of the same handler; 1.0 alone turns it off.
    p.add_argument("--protocol", default="1.0,0.3", metavar="VERSIONS", help="A2A versions served (default 1.0,0.3)")
    p.add_argument("--grace", type=seconds_or_zero, default=5.0, help="seconds running executions get on shutdown")
    p.add_argument("--executor-timeout", type=seconds, default=None, help="fail executions running longer")
    p.add_argument("--retention", type=parse_duration, default=None, help="purge terminal tasks older than this")
    p.add_argument(
        "--retention-interrupted",
        type=parse_duration,
        default=None,
        help="purge INPUT_REQUIRED / AUTH_REQUIRED tasks untouched for this long (default: never)",
    )
    p.add_argument("--keepalive", type=seconds, default=15.0, help="SSE keep-alive comment interval (seconds)")
    p.add_argument("--inspector", action="store_true", help="serve the web inspector at /inspector/")
    add_http_limit_options(p)
    add_task_limit_options(p)
    add_quota_options(p)
    add_cluster_options(p)
    add_security_options(p)
    p.add_argument(
        "--worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --bus redis://: also run queued work in this process (--no-worker: API only)",
    )
    p.set_defaults(func=run_serve)


def _store_url(args: argparse.Namespace) -> str:
    return args.store or os.environ.get("RELAYKIT_STORE") or "sqlite:///relaykit.db"


def _bus_url(args: argparse.Namespace) -> str:
    return args.bus or os.environ.get("RELAYKIT_BUS") or "memory"


def _grpc_url(args: argparse.Namespace, public_url: str) -> str | None:
    """The card's GRPC interface: bare ``host:port``, the host of the public URL (``localhost`` by default)."""
    if args.grpc_port is None:
        return None
    try:
        import relaykit.grpc  # noqa: F401  (fail here, with a clear message, when the extra is missing)
    except ImportError as exc:
        raise CliError(f"--grpc-port needs the grpc extra (pip install 'relaykit[grpc]'): {exc}") from None
    host = urlsplit(public_url).hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{args.grpc_port}"


_RELOAD_OPTIONS = "RELAYKIT_SERVE_OPTIONS"


def _protocols(args: argparse.Namespace) -> tuple[str, ...]:
    from relaykit.assembly._assemble import parse_protocols

    try:
        return parse_protocols(getattr(args, "protocol", "1.0,0.3"))
    except ValueError as exc:
        raise CliError(f"--protocol: {exc}") from None


def _checked_bus(args: argparse.Namespace) -> str:
    bus = _bus_url(args)
    if bus != "memory" and not bus.startswith(("redis://", "rediss://", "unix://")):
        raise CliError(f"unknown bus {bus!r}: use memory or redis://…")
    return bus


def _default_public_url(args: argparse.Namespace) -> str:
    return f"{'https' if tls_on(args) else 'http'}://localhost:{args.port}"


def _assemble(target: Any, args: argparse.Namespace) -> Any:
    """The ``A2AServer`` the flags describe for an executor (``relaykit.assembly.assemble``); ``CliError`` for a
    refused combination of options or a missing extra (the message carries the install hint)."""
    from relaykit.assembly import assemble

    bus = _checked_bus(args)
    public_url = args.public_url or _default_public_url(args)
    metrics = getattr(args, "metrics", False) or getattr(args, "metrics_port", None) is not None
    telemetry: Any = None  # the default: on when an OpenTelemetry SDK is set up (--otel), or --metrics
    if getattr(args, "log_format", "text") == "json":
        from relaykit.telemetry import Telemetry, telemetry_for

        # JSON lines carry the task and context ids, which the instrument keeps where the log calls can see them.
        telemetry = telemetry_for(metrics=True if metrics else None) or Telemetry(tracing=False)
    try:
        server = assemble(
            target,
            store=_store_url(args),
            public_url=public_url,
            grpc_url=_grpc_url(args, public_url),
            push=args.push,
            executor_timeout=args.executor_timeout,
            grace=args.grace,
            retention=args.retention,
            retention_interrupted=getattr(args, "retention_interrupted", None),
            access_log=args.access_log,
            namespace=args.namespace,
            push_allow=tuple(args.push_allow),
            bus=bus,
            worker=getattr(args, "worker", True),
            lease=args.lease,
            heartbeat=args.heartbeat,
            idempotency_window=args.idempotency_window,
            protocols=_protocols(args),
            metrics=metrics,
            telemetry=telemetry,
            quotas=quotas_from(args),
            **task_limits(args),
            **push_kwargs(args),
            **security_kwargs(args),
        )
    except (ImportError, ValueError) as exc:
        raise CliError(describe(exc)) from exc
    if not getattr(args, "metrics", False):
        server.metrics_endpoint = False  # --metrics-port alone: the exposition stays off the A2A port
    return server


def _app_server(target: Any) -> Any:
    """The ``A2AServer`` behind a ``create_app`` app given as the target (None for an executor)."""
    return getattr(getattr(target, "state", None), "relaykit", None)


def build_server(args: argparse.Namespace) -> Any:
    """What ``worker`` runs: the assembly alone (no binding), or the one behind a ``create_app`` app target."""
    _checked_bus(args)
    target = load_target(args.target)
    server = _app_server(target)
    return server if server is not None else _assemble(target, args)


def build_app(args: argparse.Namespace) -> Any:
    """What ``serve`` runs: the HTTP app over the assembly (gRPC attaches to the same ``app.state.relaykit``), or a
    ``create_app`` app target as it is; ``CliError`` for anything the user can fix (target, options, a missing
    extra)."""
    from relaykit.http._app import http_app

    _checked_bus(args)
    target = load_target(args.target)
    if _app_server(target) is not None:
        given = any_security_option(args)
        if given:
            raise CliError(
                f"{', '.join(given)} cannot change an app made with create_app: pass auth=, extended_card=, "
                "card_signing_key= to create_app instead"
            )
        return target
    return http_app(_assemble(target, args), keepalive=args.keepalive, inspector=getattr(args, "inspector", False))


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    setup_observability(args)
    if args.reload:
        if tls_on(args):
            raise CliError("--reload cannot be combined with --ssl-certfile (a development server speaks plain HTTP)")
        return _run_reload(args)
    app = build_app(args)
    limits = http_limits(args)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        # relaykit writes its own access line (operation, task id, outcome, duration) instead of uvicorn's.
        access_log=False,
        # --log-format json: uvicorn's loggers go through the root logger's JSON handler, not uvicorn's own format.
        log_config=None if getattr(args, "log_format", "text") == "json" else uvicorn.config.LOGGING_CONFIG,
        lifespan="on",
        timeout_graceful_shutdown=max(1, int(args.grace) + 1),
        **uvicorn_tls(args),
        **(limits.uvicorn_options() if limits is not None else {}),
    )
    if args.ssl_ca_certs:
        with_client_certs(config)
    sock = bind_socket(args.host, args.port)
    if args.grpc_port is not None:
        # Checked now, like the HTTP port, so a taken port is one line before anything starts (gRPC's own bind
        # failure comes later and logs from its C core first); the probe socket is closed at once.
        try:
            bind_socket(args.host, args.grpc_port, "--grpc-port", "serve gRPC").close()
        except CliError:
            sock.close()
            raise
    metrics_sock = None
    if getattr(args, "metrics_port", None) is not None:
        try:
            metrics_sock = bind_socket(args.host, args.metrics_port, "--metrics-port", "serve /metrics")
        except CliError:
            sock.close()
            raise
    server = DrainingServer(config, app, target=args.target, public_url=args.public_url)
    if getattr(args, "inspector", False):
        public = args.public_url or _default_public_url(args)
        server.extra_lines.append(f"relaykit: inspector at {public.rstrip('/')}/inspector/")

    async def main() -> int:
        # Open the store (and take its single-owner lock) before listening, so a refusal is one clear line,
        # not a failed-lifespan traceback. The lifespan's own start is then a no-op.
        try:
            await app.state.relaykit.start()
        except Exception as exc:
            raise CliError(describe(exc)) from exc
        if args.grpc_port is not None:
            # gRPC next to HTTP, on the same A2AServer: one engine, one store, one drain.
            from relaykit.grpc import GrpcServer

            server.grpc = GrpcServer(app, host=args.host, port=args.grpc_port, credentials=grpc_credentials(args))
            try:
                await server.grpc.start()
            except OSError as exc:  # GrpcServer's message names the address and why
                await app.state.relaykit.stop()
                raise CliError(str(exc)) from exc
            print(f"relaykit: gRPC (lf.a2a.v1.A2AService) on {args.host}:{args.grpc_port}", flush=True)
        scrape = await _serve_metrics_port(app, metrics_sock, args)
        freeze_startup_heap()
        try:
            await server.serve(sockets=[sock])
        finally:
            if scrape is not None:
                scrape.close()
            if server.grpc is not None:
                await server.grpc.stop(1.0)
        return 0 if server.started_ok else 1

    try:
        # On the event loop uvicorn.run would choose (``--loop auto``: uvloop when installed, as uvicorn[standard]
        # installs it), not asyncio's default loop: the pure-Python loop costs a large share of a short request.
        with asyncio.Runner(loop_factory=loop_factory(config)) as runner:
            return runner.run(main())
    except KeyboardInterrupt:
        return 0
    finally:
        sock.close()
        if metrics_sock is not None:
            metrics_sock.close()


def freeze_startup_heap() -> None:
    """Move everything made so far (modules, schemas, the app, its stores) out of the cyclic collector's reach, and
    let the youngest generation grow to 10,000 objects (Python's default is 700) before a collection.

    What startup made lives as long as the process, and a full collection would walk it every time: ~55k objects,
    tens of milliseconds a pass. A request leaves no garbage cycles behind (refcounting frees it), so collections
    find next to nothing: in the benchmark's SendMessage phase (~100k requests) the default threshold ran ~1,400
    young collections (0.28 s of CPU), 10,000 ran 28 (0.1 s), for at most 10,000 small objects more in memory. Only
    ``relaykit serve`` and ``relaykit worker`` do this (they own the process); an app mounted elsewhere leaves the
    collector to its host.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


async def _serve_metrics_port(app: Any, sock: socket.socket | None, args: argparse.Namespace) -> Any:
    """``--metrics-port``: ``GET /metrics`` on its own socket (relaykit.telemetry.serve_metrics), or None."""
    telemetry = getattr(app.state.relaykit, "telemetry", None)
    if sock is None:
        return None
    if telemetry is None or telemetry.metrics is None:
        raise CliError("--metrics-port: this app records no metrics (make it with create_app(..., metrics=True))")
    from relaykit.telemetry import serve_metrics

    sock.listen(128)
    scrape = await serve_metrics(telemetry.metrics, sock=sock)
    print(f"relaykit: metrics at http://{args.host}:{args.metrics_port}/metrics", flush=True)
    return scrape


def _run_reload(args: argparse.Namespace) -> int:
    """``--reload``: uvicorn's reloader over a worker that runs ``reload_factory`` (the options go as JSON)."""
    import uvicorn
    from uvicorn.supervisors import ChangeReload

    if args.grpc_port is not None:
        raise CliError("--grpc-port cannot be combined with --reload")
    if getattr(args, "metrics_port", None) is not None:
        raise CliError("--metrics-port cannot be combined with --reload")
    # watchfiles logs every file event at INFO (a log file in a watched directory would be a line per write).
    logging.getLogger("watchfiles").setLevel(max(logging.WARNING, logging.getLogger().level))
    # What can be checked without the user's code is checked here, once; the rest in every reload worker.
    _checked_bus(args)
    agent_file = target_file(args.target)
    watched = [Path.cwd()]
    if agent_file is not None and not agent_file.parent.is_relative_to(Path.cwd()):
        watched.append(agent_file.parent)
    os.environ[_RELOAD_OPTIONS] = json.dumps({k: v for k, v in vars(args).items() if k != "func"})
    config = uvicorn.Config(
        "relaykit.cli._serve:reload_factory",
        factory=True,
        host=args.host,
        port=args.port,
        reload=True,
        reload_dirs=[str(d) for d in watched],
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=max(1, int(args.grace) + 1),
    )
    sock = bind_socket(args.host, args.port)
    try:
        server = ListeningServer(config, target=args.target, public_url=args.public_url)
        ChangeReload(config, target=server.run, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


def reload_factory() -> Any:
    """Build the app inside a ``--reload`` worker from the options of the original command line."""
    args = argparse.Namespace(**json.loads(os.environ[_RELOAD_OPTIONS]))
    try:
        return build_app(args)
    except CliError as exc:
        # One line, and the worker ends; uvicorn's reloader keeps watching, and the next save starts a fresh one.
        report("relaykit serve", exc, debug=debug_enabled(getattr(args, "debug", False)))
        raise SystemExit(exc.code) from None
