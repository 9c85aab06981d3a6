"""Server processes and a round-robin TCP proxy for the tests, all on 127.0.0.1.

Processes
    ``start_serve(target, log_dir, …)`` runs ``python -m relaykit.cli serve TARGET`` from the repository root on a
    free port (memory store, ``--grace 1``, ``--log-level warning``, ``--public-url`` its own URL unless told
    otherwise), stdout and stderr going to a log file in ``log_dir``, and waits until ``GET /readyz`` answers 200:
    a bounded poll of another process, which fails at once, with the log tail, when the process exits. A probed free
    port can be taken before the server binds it, so a process that exits before it is ready is retried on a fresh
    port (not when the port was given). ``start_process(command, log_dir, …)`` does the same for any command.
    ``ServerProcess.stop()``: SIGTERM, a bounded wait, then SIGKILL; it always reaps. ``kill9()``: SIGKILL now.
    ``start_replicas(target, n, log_dir, store=…, bus=…)`` starts n servers sharing a store and a bus, in parallel,
    on distinct ports; ``stop_all(servers)`` sends SIGTERM to all first, so they shut down in parallel.

Proxy
    ``RoundRobinProxy(backend_ports)`` listens on a free port and forwards each new client connection to the next
    backend in turn, skipping backends that refuse the connection. It runs its own event loop in a thread, so sync
    and async tests (and servers in the test's own loop) can all use it. ``routes`` lists the backend port each
    connection went to (``None``: no backend took it), ``refused`` every refused connection attempt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
READY_TIMEOUT = 20.0  # seconds for a process to answer its ready URL
STOP_TIMEOUT = 10.0  # seconds after SIGTERM before SIGKILL (and after SIGKILL before giving up)
POLL_INTERVAL = 0.05  # polling another process, never in-process code
START_ATTEMPTS = 3  # fresh ports tried when a process exits before it is ready
OWN_URL = "http://127.0.0.1:{port}"  # the default --public-url: the server's own address
PROXY_TIMEOUT = 5.0  # bound of every proxy start, control call and close

Env = Mapping[str, str | None]  # environment overrides; None removes the variable
T = TypeVar("T")

_log_numbers = itertools.count()
# The log file of every process started here, in order (support.credential_watch reads the ones a test started).
LAUNCHED_LOGS: list[Path] = []


class ServerNotReady(RuntimeError):
    """A process did not answer its ready URL in time, or exited first (the message carries its log tail)."""


def _port_range() -> range:
    """Ports below the kernel's ephemeral range (from 15000): no outgoing connection is ever given one of them."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return range(15000, low) if low > 16000 else range(0)


_PORTS = _port_range()
# A random start per process: two test processes on one machine walk different parts of the range.
_next_port = itertools.count(random.randrange(len(_PORTS))) if _PORTS else None


def free_port() -> int:
    """A port that was free a moment ago and that nothing else in this machine is about to be given.

    A port the kernel picks for ``bind(0)`` comes from the ephemeral range, the one outgoing connections take their
    local port from: between closing the probe and the server binding it, any connection (a client, a test's own
    httpx call) may take it, and the server fails with EADDRINUSE. Ports below that range are handed out by no one
    but us, walked in turn (never the same one twice in a row) and probed without ``SO_REUSEADDR`` so a port still
    in TIME_WAIT is skipped too.
    """
    if _next_port is not None:
        for _ in range(256):
            port = _PORTS[next(_next_port) % len(_PORTS)]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((HOST, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no usable range: the kernel's choice
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _reap(proc: subprocess.Popen[Any], timeout: float) -> int | None:
    """Wait (bounded) for a signalled process; SIGKILL it if it is still there."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
    return proc.returncode


def stop_process(proc: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT) -> int | None:
    """SIGTERM, a bounded wait, then SIGKILL; reaps the process and returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return _reap(proc, timeout)


class ServerProcess:
    """One server process on 127.0.0.1 with its log file."""

    def __init__(
        self, name: str, port: int, proc: subprocess.Popen[bytes], log_path: Path, grpc_port: int | None = None
    ) -> None:
        self.name = name
        self.port = port
        self.proc = proc
        self.log_path = log_path
        self.grpc_port = grpc_port
        self._relaunch: Callable[[], ServerProcess] | None = None  # set by start_serve / start_process

    def __repr__(self) -> str:
        return f"<ServerProcess {self.name} pid={self.proc.pid} port={self.port} rc={self.proc.returncode}>"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://{HOST}:{self.port}"

    @property
    def grpc_address(self) -> str:
        """``127.0.0.1:GRPC_PORT`` (servers started with ``grpc=True``)."""
        if self.grpc_port is None:
            raise ValueError(f"{self.name} serves no gRPC")
        return f"{HOST}:{self.grpc_port}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        """Everything the process wrote (stdout and stderr) so far."""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, size: int = 4000) -> str:
        """The last ``size`` characters of the log."""
        return self.log()[-size:]

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, a bounded wait, then SIGKILL; returns the exit code."""
        return stop_process(self.proc, timeout)

    def kill9(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGKILL: no shutdown code runs. Reaps the process and returns its exit code (``-9``)."""
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait(timeout=timeout)

    def restart(self) -> None:
        """After ``stop()`` or ``kill9()``: the same command again on the same HTTP port, ready when this returns
        (``proc``, ``log_path`` and ``grpc_port`` are the new process's)."""
        if self._relaunch is None:
            raise ValueError(f"{self.name} was not started by start_serve / start_process")
        if self.alive:
            raise RuntimeError(f"{self.name} is still running: stop() or kill9() it first")
        again = self._relaunch()
        self.proc, self.log_path, self.grpc_port = again.proc, again.log_path, again.grpc_port

    def wait_ready(self, path: str = "/readyz", timeout: float = READY_TIMEOUT) -> None:
        """Poll ``GET path`` until it answers 200; ``ServerNotReady`` (with the log tail) on exit or timeout."""
        problem = self._poll_ready(path, timeout)
        if problem is not None:
            raise ServerNotReady(f"{self.name} is not ready ({problem}); log tail:\n{self.log_tail()}")

    def _poll_ready(self, path: str, timeout: float) -> str | None:
        """None once ``GET path`` answers 200, else why not (the process exited, or the deadline passed)."""
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self.proc.poll() is not None:
                    return f"exited with code {self.proc.returncode}"
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}{path}").status_code == 200:
                        return None
                if time.monotonic() >= deadline:
                    return f"no 200 from {path} within {timeout:g} s"
                time.sleep(POLL_INTERVAL)


def environ(overrides: Env | None = None) -> dict[str, str]:
    """This process's environment, unbuffered Python output, and ``overrides`` (a ``None`` value removes)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name, value in (overrides or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _launch(
    name: str,
    port: int,
    command: Sequence[str],
    log_dir: Path,
    *,
    env: Env | None,
    cwd: Path,
    grpc_port: int | None = None,
) -> ServerProcess:
    log_path = log_dir / f"{next(_log_numbers):03d}-{name}-{port}.log"
    LAUNCHED_LOGS.append(log_path)
    with log_path.open("wb") as log:  # the child has its own copy of the descriptor
        proc = subprocess.Popen(
            list(command), cwd=cwd, env=environ(env), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    return ServerProcess(name, port, proc, log_path, grpc_port)


def _start_ready(
    launch: Callable[[int], ServerProcess], *, port: int | None, ready_path: str, ready_timeout: float, what: str
) -> ServerProcess:
    """``launch(port)`` until the process is ready; a fresh free port after an early exit (port not given)."""
    problem, tail = "", ""
    for _ in range(1 if port is not None else START_ATTEMPTS):
        server = launch(port if port is not None else free_port())
        problem = server._poll_ready(ready_path, ready_timeout) or ""
        if not problem:
            server._relaunch = functools.partial(
                _start_ready, launch, port=server.port, ready_path=ready_path, ready_timeout=ready_timeout, what=what
            )
            return server
        tail = server.log_tail()
        server.stop()
        if not problem.startswith("exited"):
            break  # alive but not ready: another port will not help
    raise ServerNotReady(f"{what} did not become ready ({problem}); log tail:\n{tail}")


def start_process(
    command: Callable[[int], Sequence[str]],
    log_dir: Path,
    *,
    name: str,
    env: Env | None = None,
    cwd: Path = REPO_ROOT,
    port: int | None = None,
    ready_path: str = "/readyz",
    ready_timeout: float = READY_TIMEOUT,
) -> ServerProcess:
    """Run ``command(port)`` (on ``port`` or a free one) and wait until ``GET ready_path`` answers 200."""

    def launch(p: int) -> ServerProcess:
        return _launch(name, p, command(p), log_dir, env=env, cwd=cwd)

    return _start_ready(launch, port=port, ready_path=ready_path, ready_timeout=ready_timeout, what=name)


def serve_command(
    target: str,
    port: int,
    *,
    store: str = "memory",
    bus: str | None = None,
    public_url: str | None = OWN_URL,
    grpc_port: int | None = None,
    grace: float = 1,
    log_level: str = "warning",
    args: Sequence[str] = (),
) -> list[str]:
    """``python -m relaykit.cli serve TARGET --host 127.0.0.1 --port PORT …`` (``args`` last, so they win)."""
    command = [sys.executable, "-m", "relaykit.cli", "serve", target, "--host", HOST, "--port", str(port)]
    if public_url is not None:
        command += ["--public-url", public_url.format(port=port)]
    if grpc_port is not None:
        command += ["--grpc-port", str(grpc_port)]
    command += ["--store", store]
    if bus is not None:
        command += ["--bus", bus]
    return [*command, "--grace", f"{grace:g}", "--log-level", log_level, *args]


def start_serve(
    target: str,
    log_dir: Path,
    *,
    args: Sequence[str] = (),
    store: str = "memory",
    bus: str | None = None,
    env: Env | None = None,
    cwd: Path = REPO_ROOT,
    port: int | None = None,
    public_url: str | None = OWN_URL,
    grpc: bool = False,
    grace: float = 1,
    log_level: str = "warning",
    ready_timeout: float = READY_TIMEOUT,
    name: str | None = None,
) -> ServerProcess:
    """``relaykit serve TARGET`` (a path relative to ``cwd``, or ``module:name``), ready (``GET /readyz`` 200).

    ``public_url`` may name the port as ``{port}`` (the default is the server's own URL); ``None`` leaves
    ``--public-url`` out (the CLI then says ``http://localhost:PORT``). The URL is also in the environment as
    ``RELAYKIT_TEST_PUBLIC_URL``, for test apps that build their own card. ``grpc=True`` adds ``--grpc-port`` on a
    free port (``server.grpc_address``). ``bus=None`` leaves ``--bus`` out. ``env`` overrides the environment
    (``None`` values remove a variable).
    """

    def launch(p: int) -> ServerProcess:
        grpc_port = free_port() if grpc else None
        command = serve_command(
            target,
            p,
            store=store,
            bus=bus,
            public_url=public_url,
            grpc_port=grpc_port,
            grace=grace,
            log_level=log_level,
            args=args,
        )
        extra: dict[str, str | None] = {}
        if public_url is not None:
            extra["RELAYKIT_TEST_PUBLIC_URL"] = public_url.format(port=p)
        label = name or target.replace("/", "_").replace(":", "-")
        return _launch(label, p, command, log_dir, env={**extra, **(env or {})}, cwd=cwd, grpc_port=grpc_port)

    what = f"relaykit serve {target}"
    return _start_ready(launch, port=port, ready_path="/readyz", ready_timeout=ready_timeout, what=what)


def stop_all(servers: Iterable[ServerProcess], timeout: float = STOP_TIMEOUT) -> None:
    """Stop every server: SIGTERM to all first (they shut down in parallel), then reap each (SIGKILL if need be)."""
    servers = list(servers)
    for server in servers:
        if server.proc.poll() is None:
            with contextlib.suppress(OSError):
                server.proc.send_signal(signal.SIGTERM)
    for server in servers:
        with contextlib.suppress(Exception):
            _reap(server.proc, timeout)


def start_parallel(starters: Sequence[Callable[[], ServerProcess]]) -> list[ServerProcess]:
    """Run the start functions at once (each bounded); if any fails, stop the ones that started and raise."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(starters))) as pool:
        futures = [pool.submit(start) for start in starters]
    started: list[ServerProcess] = []
    error: BaseException | None = None
    for future in futures:
        try:
            started.append(future.result())
        except BaseException as exc:
            error = error or exc
    if error is not None:
        stop_all(started)
        raise error
    return started


def start_replicas(
    target: str,
    count: int,
    log_dir: Path,
    *,
    store: str,
    bus: str,
    args: Sequence[str] = (),
    env: Env | None = None,
    public_url: str | None = OWN_URL,
    **options: Any,
) -> list[ServerProcess]:
    """``count`` replicas of ``relaykit serve TARGET --store STORE --bus BUS`` on distinct free ports, started in
    parallel (as a deployment starts them: schema migrations race); each ready. ``public_url`` is typically the
    proxy's URL; ``options`` are more ``start_serve`` keywords. Stop them with ``stop_all``."""
    start = functools.partial(
        start_serve, target, log_dir, store=store, bus=bus, args=args, env=env, public_url=public_url, **options
    )
    return start_parallel([functools.partial(start, name=f"replica{i}") for i in range(count)])


class ServerPool:
    """Servers started on first use and shared while they live, one per key; ``stop_all()`` at the end (or use it as
    a context manager: ``with ServerPool(log_dir) as pool: yield pool`` in a session fixture)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running: dict[Hashable, ServerProcess] = {}

    def get(self, key: Hashable, start: Callable[[Path], ServerProcess]) -> ServerProcess:
        """The live server for ``key``, started with ``start(log_dir)`` when there is none."""
        server = self.running.get(key)
        if server is None or not server.alive:
            server = start(self.log_dir)
            self.running[key] = server
        return server

    def stop_all(self) -> None:
        stop_all(self.running.values())
        self.running.clear()

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_all()


# --- the round-robin proxy ----------------------------------------------------------------------------------------

_Link = tuple[asyncio.StreamWriter, asyncio.StreamWriter]  # (client side, backend side)


class RoundRobinProxy:
    """A TCP proxy on 127.0.0.1 spreading new connections over backend ports in turn.

    ``with RoundRobinProxy([a.port, b.port]) as proxy:`` (or ``async with``, or ``start()`` / ``close()``).
    ``proxy.url`` is ``http://127.0.0.1:PORT``; ``port=`` fixes the listening port (0: a free one).
    """

    def __init__(self, backends: Iterable[int] = (), *, port: int = 0, connect_timeout: float = 2.0) -> None:
        self.port = port
        self.connect_timeout = connect_timeout
        self._backends = list(backends)
        self._next = 0
        self._routes: list[int | None] = []
        self._refused: list[int] = []
        self._lock = threading.Lock()  # backends, the rotation and the records (read from the test's thread)
        self._links: dict[int, set[_Link]] = {}  # live connections per backend (the proxy's loop only)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._listening = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def backends(self) -> list[int]:
        with self._lock:
            return list(self._backends)

    @property
    def routes(self) -> list[int | None]:
        """The backend port of each connection, in the order they were connected (``None``: every backend refused)."""
        with self._lock:
            return list(self._routes)

    @property
    def refused(self) -> list[int]:
        """The backend port of each refused (or timed-out) connection attempt."""
        with self._lock:
            return list(self._refused)

    def add_backend(self, port: int) -> None:
        """Put a backend (back) into the rotation, last."""
        with self._lock:
            self._backends.append(port)

    def remove_backend(self, port: int, *, cut: bool = True) -> None:
        """Take a backend out of the rotation; with ``cut``, abort its live connections too (RST both ways)."""
        with self._lock:
            self._backends.remove(port)
        if cut:
            self.cut(port)

    def cut(self, port: int | None = None) -> int:
        """Abort the live connections to ``port`` (all backends: ``None``); returns how many were cut."""
        return self._in_loop(lambda: self._abort(port))

    def live(self, port: int | None = None) -> int:
        """How many connections to ``port`` (all backends: ``None``) are open now."""
        return self._in_loop(lambda: sum(len(links) for p, links in self._links.items() if port in (None, p)))

    # --- life cycle ---

    def start(self) -> RoundRobinProxy:
        if self._thread is not None:
            raise RuntimeError("the proxy is already started")
        self._thread = threading.Thread(target=self._run, name="round-robin-proxy", daemon=True)
        self._thread.start()
        if not self._listening.wait(PROXY_TIMEOUT):
            raise RuntimeError(f"the proxy did not listen within {PROXY_TIMEOUT:g} s")
        if self._error is not None:
            error, self._error = self._error, None
            self.close()
            raise error
        return self

    def close(self, timeout: float = PROXY_TIMEOUT) -> None:
        """Stop listening, abort every live connection, stop the thread (bounded). Idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"the proxy on port {self.port} did not stop within {timeout:g} s")
        if self._error is not None:
            raise RuntimeError(f"the proxy on port {self.port} failed") from self._error

    async def aclose(self) -> None:
        """``close()`` without blocking the calling event loop (which may be serving the backends)."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> RoundRobinProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> RoundRobinProxy:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, _type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # --- the proxy's own thread and loop ---

    def _in_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in the proxy's loop and return its result (bounded); directly when the proxy is not running."""
        loop = self._loop
        if loop is None or self._thread is None or threading.current_thread() is self._thread:
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:
                done.set_exception(exc)

        loop.call_soon_threadsafe(call)
        return done.result(PROXY_TIMEOUT)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # kept for close(): an exception escaping a thread fails some other test
            self._error = exc
        finally:
            self._listening.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, HOST, self.port)
        self.port = int(server.sockets[0].getsockname()[1])
        self._listening.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            self._abort(None)
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=PROXY_TIMEOUT)
            await asyncio.wait_for(server.wait_closed(), PROXY_TIMEOUT)

    def _abort(self, port: int | None) -> int:
        count = 0
        for backend, links in self._links.items():
            if port in (None, backend):
                for link in list(links):
                    for writer in link:
                        writer.transport.abort()
                    count += 1
                links.clear()
        return count

    async def _connect(self) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The next backend that accepts a connection, in turn from where the rotation stands."""
        with self._lock:
            order = list(self._backends)
            start = self._next
            self._next = start + 1  # a connection arriving meanwhile starts at the next backend
        for step in range(len(order)):
            port = order[(start + step) % len(order)]
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), self.connect_timeout)
            except (OSError, TimeoutError):
                with self._lock:
                    self._refused.append(port)
                continue
            with self._lock:
                if step and self._next == start + 1:  # skipped dead backends: continue after the one that answered
                    self._next = start + step + 1
            return port, reader, writer
        return None

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            picked = await self._connect()
            with self._lock:
                self._routes.append(picked[0] if picked else None)
            if picked is None:
                client_writer.transport.abort()
                return
            port, backend_reader, backend_writer = picked
            link = (client_writer, backend_writer)
            self._links.setdefault(port, set()).add(link)
            try:
                await asyncio.gather(
                    self._pump(client_reader, backend_writer, link), self._pump(backend_reader, client_writer, link)
                )
            finally:
                self._links[port].discard(link)
                for writer in link:
                    writer.close()
        except asyncio.CancelledError:
            client_writer.transport.abort()
            raise
        finally:
            self._tasks.discard(task)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        """Copy one direction; pass an EOF on as an EOF, and a reset (or any error) on as a reset of both sides."""
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            for side in link:
                side.transport.abort()
