"""``relaykit inspect URL [--port P] [--header 'NAME: VALUE']…``: the web inspector for any A2A agent.

It listens on 127.0.0.1 only (the inspector makes requests on the page's behalf) and prints its address once it is
listening. A port already in use is one line on stderr and exit code 2, like ``serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import socket
import sys
from typing import Any
from urllib.parse import urlsplit

__all__ = ["add_inspect_parser", "run_inspect"]

HOST = "127.0.0.1"
DEFAULT_PORT = 8100


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"not a header: {text!r} (use 'Name: value')")
    return name.strip(), value.strip()


def add_inspect_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help="open the web inspector for any A2A agent (http://127.0.0.1:8100/)")
    p.add_argument("url", help="the agent's base URL (or its card's URL)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"local port (default {DEFAULT_PORT})")
    p.add_argument(
        "--header",
        action="append",
        default=[],
        type=_header,
        metavar="'NAME: VALUE'",
        help="a header the page starts its session with, e.g. 'Authorization: Bearer …' (repeatable)",
    )
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    import uvicorn

    from relaykit.inspector import create_inspector

    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        print(f"relaykit inspect: not an http(s) URL: {args.url!r}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, args.port))
    except OSError as exc:
        sock.close()
        why = "already in use" if exc.errno == errno.EADDRINUSE else str(exc)
        print(f"relaykit inspect: cannot listen on {HOST}:{args.port}: {why}", file=sys.stderr)
        return 2
    app = create_inspector(args.url, headers=tuple(args.header))
    # Open page streams end with the process: a short graceful-shutdown bound, not uvicorn's wait-for-ever.
    config = uvicorn.Config(
        app, log_level=args.log_level, access_log=False, lifespan="off", timeout_graceful_shutdown=2
    )
    server = _Server(config, f"http://{HOST}:{sock.getsockname()[1]}/", args.url)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        return 0
    finally:
        sock.close()
    return 0 if server.started_ok else 1


try:
    import uvicorn as _uvicorn

    _Base: Any = _uvicorn.Server
except ImportError:  # pragma: no cover - uvicorn is a core dependency
    _Base = object


class _Server(_Base):  # type: ignore[misc]
    """A uvicorn server that prints the inspector's address once it listens."""

    def __init__(self, config: Any, address: str, target: str) -> None:
        super().__init__(config)
        self.address = address
        self.target = target
        self.started_ok = False

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        self.started_ok = not self.should_exit
        if self.started_ok:
            print(f"relaykit: inspector for {self.target} at {self.address}", flush=True)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises a captured SIGTERM/SIGINT after shutdown; stopping the inspector is a success (exit 0).
        captured = getattr(self, "_captured_signals", None)
        if captured is not None:
            captured.clear()
