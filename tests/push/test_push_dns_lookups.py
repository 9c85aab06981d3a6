"""The config-time DNS lookups of the SSRF guard cannot tie up the resolver threads, and are never made for a task the
caller cannot see.

A lookup runs on a resolver thread (the loop's default executor here; libuv's pool of 4 under uvloop) until the
system resolver answers: the check's timeout ends the wait, not the thread. Names whose DNS answers slowly took every
thread (6 here, 20 checks), and a delivery-time lookup then timed out behind them. Now at most ``MAX_LOOKUPS`` run;
a check whose lookup cannot start in time is refused as retryable. And a follow-up carrying an inline push config
for a task that is not the caller's answers TaskNotFound before its webhook host is looked up.

No name leaves the process: ``socket.getaddrinfo`` (what the asyncio loop's resolver threads call) is replaced by
``FakeDNS`` for each test.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from relaykit import agent
from relaykit._errors import ResourceExhaustedError
from relaykit.http._app import create_app
from relaykit.push import WebhookGuard
from relaykit.push._ssrf import MAX_LOOKUPS
from relaykit.testing import StreamingASGITransport

WAIT = 5.0
PUBLIC = "93.184.215.14"  # what the fake resolver answers for *.fast.test (never connected to)


class FakeDNS:
    """``socket.getaddrinfo`` for the resolver threads: ``*.slow.test`` blocks its thread until ``release`` (counting
    the threads held at once), ``*.fast.test`` answers a public address at once; every name asked is recorded.
    Anything else fails as an unknown name (IP literals, which never reach a resolver thread, excepted)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.names: list[str] = []
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        with self._lock:
            self.names.append(name)
        if name.endswith(".slow.test"):
            with self._lock:
                self.held += 1
                self.peak = max(self.peak, self.held)
            try:
                self.release.wait(WAIT)
            finally:
                with self._lock:
                    self.held -= 1
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if name.endswith(".fast.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (PUBLIC, int(port or 0)))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDNS]:
    fake = FakeDNS()
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    yield fake
    fake.release.set()  # no thread stays blocked after the test


async def test_config_time_lookups_hold_at_most_their_bound_of_threads(dns: FakeDNS) -> None:
    guard = WebhookGuard(resolve_timeout=0.3)
    checks = [guard.check_config(f"https://h{i}.slow.test/hook", "url") for i in range(8)]
    outcomes = await asyncio.wait_for(asyncio.gather(*checks, return_exceptions=True), WAIT)

    # The lookups that started timed out (a name that does not resolve yet passes: the connect-time check decides);
    # the others could not start within the timeout and were refused, retryable, naming no host.
    busy = [o for o in outcomes if isinstance(o, ResourceExhaustedError)]
    assert outcomes.count(None) == MAX_LOOKUPS
    assert len(busy) == len(outcomes) - MAX_LOOKUPS
    assert all(o.metadata.get("retryAfter") == "1" and "slow.test" not in o.message for o in busy)
    # The timed-out lookups still hold their threads (nothing stops the system resolver), and no more than those.
    assert dns.peak == MAX_LOOKUPS
    assert dns.held == MAX_LOOKUPS

    # Delivery-time lookups still get a thread.
    addresses = await asyncio.wait_for(guard.connect_addresses("hooks.fast.test", 443, timeout=1.0), WAIT)
    assert addresses == [PUBLIC]
    # While the stuck lookups hold their places, a config-time check is refused, not queued behind them.
    with pytest.raises(ResourceExhaustedError):
        await asyncio.wait_for(guard.check_config("https://hooks.fast.test/hook", "url"), WAIT)

    # Once the resolver answers them, their places are free again.
    dns.release.set()
    await asyncio.wait_for(guard.check_config("https://hooks.fast.test/hook", "url"), WAIT)


@agent
async def echo(context: Any) -> str:
    return str(context.text)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(echo)
    await app.state.relaykit.start()
    try:
        transport = StreamingASGITransport(app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://relaykit.test", headers={"A2A-Version": "1.0"}, timeout=WAIT
        ) as c:
            yield c
    finally:
        await app.state.relaykit.stop()


async def send(c: httpx.AsyncClient, *, task_id: str = "", tenant: str = "", push: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    if task_id:
        message["taskId"] = task_id
    params: dict[str, Any] = {"message": message, "tenant": tenant}
    if push:
        params["configuration"] = {"taskPushNotificationConfig": {"url": "https://hooks.fast.test/hook"}}
    r = await c.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_an_inline_config_for_a_task_not_yours_looks_nothing_up(client: httpx.AsyncClient, dns: FakeDNS) -> None:
    task_id = (await send(client, tenant="a"))["result"]["task"]["id"]

    unknown = await send(client, task_id=str(uuid.uuid4()), tenant="a", push=True)
    assert unknown["error"]["code"] == -32001  # TaskNotFound
    elsewhere = await send(client, task_id=task_id, tenant="b", push=True)  # another tenant's task: not yours
    assert elsewhere["error"]["code"] == -32001
    r = await client.post(
        "/b/message:send",
        json={
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": "hi"}],
                "taskId": task_id,
            },
            "configuration": {"taskPushNotificationConfig": {"url": "https://hooks.fast.test/hook"}},
        },
    )
    assert r.status_code == 404, r.text
    assert dns.names == []

    # The caller's own task does get its webhook host checked (then the message is refused: the task is COMPLETED).
    own = await send(client, task_id=task_id, tenant="a", push=True)
    assert own["error"]["code"] == -32004  # UnsupportedOperation: terminal tasks take no more messages
    assert dns.names == ["hooks.fast.test"]
