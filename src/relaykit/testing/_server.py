"""``ServerThread``: a real uvicorn server for an executor or app on 127.0.0.1, in a background thread.

For tests that need real sockets (an outside client, the CLI, another process) without a subprocess: the port is
bound before the app is built, so the agent card's URLs name the real port.

>>> from relaykit.testing import ScriptedAgent, ServerThread, complete
>>> with ServerThread(ScriptedAgent([complete("done")])) as url:   # doctest: +SKIP
...     print(url)   # http://127.0.0.1:<port>
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from relaykit.testing._inprocess import build_app

__all__ = ["ServerThread"]

START_TIMEOUT = 15.0  # seconds for the server to accept connections
STOP_TIMEOUT = 15.0  # seconds for it to shut down (running executions get ``grace`` of these)
_POLL = 0.01  # waiting on another thread's event loop, not on code of ours


class ServerThread:
    """Serve ``target`` (an ``AgentExecutor`` instance or class, or an ASGI app) until ``stop()``.

    An executor is served with ``create_app(executor, store="memory", public_url=<the real URL>, grace=grace)``
    (``app_options`` go to ``create_app``); an app is served as it is, so its card shows whatever ``public_url``
    it was made with.
    """

    def __init__(
        self,
        target: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        grace: float = 1.0,
        log_level: str = "warning",
        app_options: dict[str, Any] | None = None,
    ) -> None:
        self.target = target
        self.host = host
        self.port = port
        self.grace = grace
        self.log_level = log_level
        self.app_options = dict(app_options or {})
        self.app: Any = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """The base URL (``http://127.0.0.1:PORT``)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Bind, build the app, start serving; returns the base URL once connections are accepted."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self._socket = sock
        self.port = int(sock.getsockname()[1])
        options = {"grace": self.grace, **self.app_options}
        self.app = build_app(self.target, public_url=self.url, **options)
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            lifespan="on",
            loop="asyncio",
            access_log=False,
            ws="none",  # A2A needs no WebSockets (and importing an implementation can warn)
            timeout_graceful_shutdown=max(1, int(self.grace) + 1),
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name=f"relaykit server {self.url}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server for {self.target!r} did not start: {self._error or 'timeout'}")
            time.sleep(_POLL)
        return self.url

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        except BaseException as exc:  # reported by start(); a thread must not die with an unhandled exception
            self._error = exc

    def stop(self) -> None:
        """Stop serving (running executions get ``grace`` seconds), join the thread, close the socket."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(STOP_TIMEOUT)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(STOP_TIMEOUT)
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._thread = None
        self._server = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
