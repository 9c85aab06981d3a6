"""Processes for the push tests: the webhook recorder and ``relaykit serve``, both on 127.0.0.1.

Waiting is always bounded and always on another process (polling its HTTP endpoint), never a sleep standing in for
synchronisation with code in this process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from cryptography.hazmat.primitives import serialization
from support.servers import HOST, ServerProcess, environ, start_serve, stop_process

HERE = Path(__file__).resolve().parent
A2A = {"A2A-Version": "1.0", "Content-Type": "application/json"}
POLL = 0.05  # seconds between polls of another process
WAIT = 20.0  # default bound of a wait

T = TypeVar("T")


def wait_until(probe: Callable[[], T | None], *, timeout: float = WAIT, what: str = "condition") -> T:
    """Poll ``probe`` (which asks another process) until it returns something truthy; bounded."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(POLL)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Recorder:
    """``webhook_recorder.py`` in a subprocess."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "webhook_recorder.py"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environ(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        assert line.startswith("PORT "), f"recorder did not start: {line!r}"
        self.port = int(line.split()[1])
        self.base = f"http://{HOST}:{self.port}"
        self.client = httpx.Client(timeout=5.0)
        wait_until(self._ready, what="the webhook recorder")

    def _ready(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return self.client.get(f"{self.base}/_ready").status_code == 200
        return False

    def url(self, path: str = "/webhook", host: str = HOST) -> str:
        return f"http://{host}:{self.port}{path}"

    def records(self, path: str | None = None) -> list[dict[str, Any]]:
        records = self.client.get(f"{self.base}/_records").json()["records"]
        for record in records:
            record["body"] = base64.b64decode(record["body_b64"])
            record["json"] = json.loads(record["body"])
        return [r for r in records if path is None or r["path"] == path]

    def accepted(self, path: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.records(path) if r["status"] == 200]

    def control(self, **settings: Any) -> None:
        self.client.post(f"{self.base}/_control", json=settings).raise_for_status()

    def wait_accepted(self, path: str, count: int, *, timeout: float = WAIT) -> list[dict[str, Any]]:
        def probe() -> list[dict[str, Any]] | None:
            got = self.accepted(path)
            return got if len(got) >= count else None

        return wait_until(probe, timeout=timeout, what=f"{count} accepted POSTs to {path}")

    def close(self) -> None:
        self.client.close()
        stop_process(self.proc)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Server:
    """``relaykit serve TARGET`` in a subprocess (``support.servers.start_serve``), with A2A calls over HTTP+JSON."""

    def __init__(
        self, target: str, *args: str, store: str = "memory", log_dir: Path, env: dict[str, str] | None = None
    ):
        self.target = target
        self.args = args
        self.store = store
        self.log_dir = log_dir
        self.env = env or {}
        self.process: ServerProcess | None = None
        self.start()

    @property
    def port(self) -> int:
        assert self.process is not None
        return self.process.port

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, port: int | None = None) -> None:
        """Start (again, after ``kill``/``stop``) on ``port`` or a free one; ready when this returns."""
        self.process = start_serve(self.target, self.log_dir, args=self.args, store=self.store, env=self.env, port=port)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None:
            self.process.kill9()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=15)

    # --- A2A over HTTP+JSON ----------------------------------------------------------------------------

    def send(self, text: str, *, push: dict[str, Any] | None = None, task_id: str | None = None, **config: Any) -> Any:
        message: dict[str, Any] = {
            "messageId": f"m-{time.monotonic_ns()}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if task_id:
            message["taskId"] = task_id
        configuration = dict(config)
        if push is not None:
            configuration["taskPushNotificationConfig"] = push
        body: dict[str, Any] = {"message": message}
        if configuration:
            body["configuration"] = configuration
        return httpx.post(f"{self.base}/message:send", json=body, headers=A2A, timeout=30)

    def status(self, task_id: str) -> dict[str, Any]:
        reply = httpx.get(f"{self.base}/relaykit/push/status/{task_id}", headers=A2A, timeout=10)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())


def stream_kinds(records: list[dict[str, Any]]) -> list[str]:
    """The StreamResponse member of each recorded body."""
    return [next(iter(r["json"])) for r in records]


def state_of(body: dict[str, Any]) -> str | None:
    if "task" in body:
        return str(body["task"]["status"]["state"])
    if "statusUpdate" in body:
        return str(body["statusUpdate"]["status"]["state"])
    return None


def pem(key: Any) -> bytes:
    """A private key as unencrypted PKCS#8 PEM."""
    return bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on 127.0.0.1 inside this event loop; yields its base URL.

    The socket listens before uvicorn starts, so a request made at once waits in the backlog: no start-up wait.
    """
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (else Nagle + delayed
    # ACK cost 40 ms per response).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind((HOST, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)
        sock.close()
