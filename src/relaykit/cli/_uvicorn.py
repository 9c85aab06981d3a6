"""How ``relaykit serve`` runs uvicorn: the socket bound before anything else, the loop uvicorn picks, a banner
printed only once the server listens, and a first SIGTERM/SIGINT that drains the engine before HTTP stops."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
from typing import Any

from relaykit.cli._fail import CliError

__all__ = ["DrainingServer", "ListeningServer", "bind_socket", "loop_factory"]


def bind_socket(host: str, port: int, flag: str = "--port", what: str = "listen") -> socket.socket:
    """The HTTP socket, bound (not yet listening) as uvicorn binds it; ``CliError`` when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = f": is another server running? Stop it or pick another {flag}" if exc.errno == errno.EADDRINUSE else ""
        raise CliError(f"cannot {what} on {host}:{port}: {exc.strerror or exc}{hint}") from exc
    sock.set_inheritable(True)  # the reload worker inherits it
    return sock


def loop_factory(config: Any) -> Any:
    """The loop factory of a uvicorn config (uvicorn >= 0.36), or None after installing its loop policy (older)."""
    get_loop_factory = getattr(config, "get_loop_factory", None)
    if get_loop_factory is not None:
        return get_loop_factory()
    config.setup_event_loop()  # pragma: no cover - uvicorn < 0.36 sets an event loop policy instead
    return None


try:
    import uvicorn as _uvicorn

    _Base: Any = _uvicorn.Server
except ImportError:  # pragma: no cover - uvicorn is a core dependency
    _Base = object


class ListeningServer(_Base):  # type: ignore[misc]
    """A uvicorn server that announces itself only once its start-up completed and its socket listens.

    Picklable (``--reload`` sends it to the worker process): it holds strings only, besides uvicorn's own state.
    """

    def __init__(self, config: Any, *, target: str, public_url: str | None) -> None:
        super().__init__(config)
        self.target = target
        self.public_url = public_url
        self.started_ok = False
        self.extra_lines: list[str] = []  # printed after the banner (e.g. where the inspector is)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.should_exit:
            return
        self.started_ok = True
        port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        scheme = "https" if self.config.is_ssl else "http"
        public = (self.public_url or f"{scheme}://localhost:{port}").rstrip("/")
        print(
            f"relaykit: serving {self.target} on {scheme}://{host}:{port} — agent card at "
            f"{public}/.well-known/agent-card.json (Ctrl-C stops)",
            flush=True,
        )
        for line in self.extra_lines:
            print(line, flush=True)


class DrainingServer(ListeningServer):
    """A uvicorn server whose first SIGTERM/SIGINT drains the engine before the HTTP server stops.

    Draining first lets running executions finish (up to ``--grace``), marks the rest FAILED, and ends open SSE
    streams cleanly, so uvicorn is not left waiting on streams that would never close by themselves.
    """

    def __init__(self, config: Any, app: Any, *, target: str, public_url: str | None) -> None:
        super().__init__(config, target=target, public_url=public_url)
        self.relaykit = app.state.relaykit
        self._draining: asyncio.Task[None] | None = None
        self.grpc: Any = None  # relaykit.grpc.GrpcServer when --grpc-port is given

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._draining is not None or sig not in (signal.SIGINT, signal.SIGTERM):
            super().handle_exit(sig, frame)
            return
        self._draining = asyncio.get_event_loop().create_task(self._drain_then_exit(sig, frame))

    async def _drain_then_exit(self, sig: int, frame: Any) -> None:
        # gRPC stops taking calls at once; the calls in flight end with the drain (blocking sends answer, streams
        # close), and whatever is left after the grace period is cancelled.
        grpc_stopped = None
        if self.grpc is not None:
            grpc_stopped = asyncio.ensure_future(self.grpc.stop(self.relaykit.grace + 1.0))
        try:
            await self.relaykit.stop()
            if grpc_stopped is not None:
                await grpc_stopped
        finally:
            super().handle_exit(sig, frame)
            # uvicorn re-raises a captured signal after shutdown, so the process would die by SIGTERM. A drained,
            # intentional stop is a success: exit 0 instead.
            self._captured_signals.clear()
