"""Fair delivery slots (``relaykit.push._slots``): a receiver that never answers holds only its share of the sender's
requests in flight, so every other webhook's notifications keep flowing.

Real sockets on 127.0.0.1: a tarpit (accepts, reads, never answers) and a healthy receiver on other ports. Every
wait is bounded (``asyncio.wait_for``) and on an event the servers set, never a sleep.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from push_helpers import serving
from support.asgi import lifespan, read_body, respond
from support.servers import HOST

from relaykit.backends._base import OutboxChanges
from relaykit.backends.memory import MemoryPushConfigStore
from relaykit.push import DeliveryPolicy, MemoryPushOutbox, OutboxEntry, PushSender, WebhookGuard
from relaykit.push._slots import DeliverySlots, destination
from relaykit.types import TaskPushNotificationConfig

TARPIT_TIMEOUT = 3.0  # seconds each attempt to the tarpit holds its slots
PROMPT = 1.0  # seconds within which the healthy receiver must get its notification: well under TARPIT_TIMEOUT
WAIT = 10.0
BODY = b'{"statusUpdate":{"taskId":"t"}}'


class Tarpit:
    """Accepts connections and reads them, never answers; counts the connections open at once."""

    def __init__(self) -> None:
        self.open = 0
        self.most = 0
        self.port = 0
        self._changed = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Tarpit:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.wait_for(self._server.wait_closed(), WAIT)

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.open += 1
        self.most = max(self.most, self.open)
        self._changed.set()
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            self.open -= 1
            self._writers.discard(writer)
            writer.transport.abort()

    async def until_open(self, count: int) -> None:
        async def wait() -> None:
            while self.open < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), WAIT)


class Healthy:
    """An ASGI receiver answering 200 at once; ``await arrived(path)`` returns once a POST to ``path`` came."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._changed = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        await read_body(receive)
        self.paths.append(scope["path"])
        self._changed.set()
        await respond(send, 200, b"")

    async def arrived(self, path: str, timeout: float) -> None:  # noqa: ASYNC109
        async def wait() -> None:
            while path not in self.paths:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)


async def sender_with(
    policy: DeliveryPolicy, streams: list[tuple[str, str]], make_last: tuple[str, str]
) -> tuple[PushSender, MemoryPushOutbox]:
    """A sender whose outbox holds one notification per ``(owner, url)`` of ``streams``, then ``make_last``'s; each on
    its own task and config. Resumed in that order at start (the outbox sorts by owner, then task id)."""
    configs = MemoryPushConfigStore()
    outbox = MemoryPushOutbox()
    entries = []
    for i, (owner, url) in enumerate([*streams, make_last]):
        task_id = f"t{i:03d}"
        await configs.put(TaskPushNotificationConfig(task_id=task_id, id="c", url=url), owner=owner)
        entries.append(OutboxEntry(f"e{i}", task_id, "c", 1, BODY, owner=owner, created_at=time.time()))
    await outbox.commit(OutboxChanges(added=entries))
    sender = PushSender(configs, outbox, guard=WebhookGuard((HOST,)), policy=policy)
    return sender, outbox


@pytest.fixture
async def healthy() -> AsyncIterator[tuple[Healthy, str]]:
    receiver = Healthy()
    async with serving(receiver) as base:
        yield receiver, base


async def test_a_tarpit_holds_only_its_destinations_share_and_other_webhooks_keep_flowing(
    healthy: tuple[Healthy, str],
) -> None:
    """16 configs point at a tarpit, as many as the sender may have requests in flight: the tarpit gets 8 at once
    (``per_destination``), and a notification to another receiver (another port of the same host) arrives at once,
    not after the tarpit's timeout."""
    receiver, base = healthy
    policy = DeliveryPolicy(timeout=TARPIT_TIMEOUT, concurrency=16, max_attempts=1, suspend_after=0)
    assert policy.per_destination == 8
    async with Tarpit() as tarpit:
        stuck = [("anonymous", tarpit.url(f"/stuck/{i}")) for i in range(16)]
        sender, _ = await sender_with(policy, stuck, ("anonymous", f"{base}/fine"))
        await sender.start()
        try:
            await tarpit.until_open(8)
            started = time.monotonic()
            await receiver.arrived("/fine", PROMPT)
            assert time.monotonic() - started < PROMPT
            assert tarpit.most == 8
        finally:
            await sender.stop(drain=0)


@pytest.fixture
def test_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """``*.tarpit.test`` and ``*.cdn.test`` resolve to 127.0.0.1 (no name leaves the process)."""
    real = socket.getaddrinfo

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name.endswith((".tarpit.test", ".cdn.test")):
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (HOST, int(port or 0)))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


@pytest.mark.usefixtures("test_names")
async def test_names_sharing_an_address_share_its_slots(healthy: tuple[Healthy, str]) -> None:
    """16 configs point at one tarpit through 16 host names that all resolve to its address: keyed by name alone,
    each got slots of its own and the tarpit held all 16 requests the sender may have in flight; the names share the
    address's ``per_address`` (8 here), and another receiver's notification arrives at once."""
    receiver, base = healthy
    policy = DeliveryPolicy(timeout=TARPIT_TIMEOUT, concurrency=16, per_address=8, max_attempts=1, suspend_after=0)
    async with Tarpit() as tarpit:
        stuck = [("anonymous", f"http://n{i}.tarpit.test:{tarpit.port}/stuck") for i in range(16)]
        sender, _ = await sender_with(policy, stuck, ("anonymous", f"{base}/fine"))
        await sender.start()
        try:
            await tarpit.until_open(8)
            started = time.monotonic()
            await receiver.arrived("/fine", PROMPT)
            assert time.monotonic() - started < PROMPT
            assert tarpit.most == 8
        finally:
            await sender.stop(drain=0)


class SharedFront:
    """One address:port serving many names, as a CDN or load balancer does: requests whose ``Host`` starts with
    ``slow.`` are read and never answered, the others answered 200 at once (their paths recorded)."""

    def __init__(self) -> None:
        self.port = 0
        self.stuck = 0
        self.most_stuck = 0
        self.paths: list[str] = []
        self._changed = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> SharedFront:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.wait_for(self._server.wait_closed(), WAIT)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:  # one request after another on a kept-alive connection
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                fields = dict(line.split(":", 1) for line in head[1:] if ":" in line)
                fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
                await reader.readexactly(int(fields.get("content-length", "0")))
                if fields.get("host", "").startswith("slow."):
                    self.stuck += 1
                    self.most_stuck = max(self.most_stuck, self.stuck)
                    self._changed.set()
                    try:
                        while await reader.read(65536):
                            pass
                    finally:
                        self.stuck -= 1
                    return
                self.paths.append(head[0].split(" ")[1])
                self._changed.set()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def until(self, probe: Any, timeout: float) -> None:  # noqa: ASYNC109
        async def wait() -> None:
            while not probe():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)


@pytest.mark.usefixtures("test_names")
async def test_one_name_behind_a_shared_address_holds_only_its_hosts_share() -> None:
    """A slow server and a healthy one behind one shared address (a CDN's): keyed by the address alone, the slow
    name's 12 configs took its 8 slots and the healthy name's notification waited for the slow requests' timeout;
    now the slow name holds its host's 8 (``per_destination``) and the healthy name's notification, to the same
    address, arrives at once."""
    policy = DeliveryPolicy(timeout=TARPIT_TIMEOUT, concurrency=16, max_attempts=1, suspend_after=0)
    assert (policy.per_destination, policy.per_address) == (8, 32)
    async with SharedFront() as front:
        stuck = [("attacker", f"http://slow.cdn.test:{front.port}/stuck/{i}") for i in range(12)]
        sender, _ = await sender_with(policy, stuck, ("victim", f"http://fine.cdn.test:{front.port}/fine"))
        await sender.start()
        try:
            await front.until(lambda: front.stuck >= 8, WAIT)
            started = time.monotonic()
            await front.until(lambda: "/fine" in front.paths, PROMPT)
            assert time.monotonic() - started < PROMPT
            assert front.most_stuck == 8
        finally:
            await sender.stop(drain=0)


async def test_one_owner_holds_only_its_share_with_per_owner(healthy: tuple[Healthy, str]) -> None:
    """One owner's configs point at two tarpits (two destinations: their 8 each would take all 16 slots); with
    ``per_owner=8`` it holds 8, and another owner's notification arrives at once."""
    receiver, base = healthy
    policy = DeliveryPolicy(timeout=TARPIT_TIMEOUT, concurrency=16, per_owner=8, max_attempts=1, suspend_after=0)
    async with Tarpit() as first, Tarpit() as second:
        stuck = [("attacker", pit.url(f"/stuck/{i}")) for pit in (first, second) for i in range(8)]
        sender, _ = await sender_with(policy, stuck, ("victim", f"{base}/fine"))
        await sender.start()
        try:
            await first.until_open(8)
            started = time.monotonic()
            await receiver.arrived("/fine", PROMPT)
            assert time.monotonic() - started < PROMPT
            assert first.most + second.most == 8
        finally:
            await sender.stop(drain=0)


async def test_the_slot_tables_forget_destinations_and_owners_once_idle() -> None:
    """Keys are tracked only while an attempt holds or awaits their slots; a waiter cancelled (its runner stopped)
    leaves nothing behind."""
    slots = DeliverySlots(DeliveryPolicy(concurrency=4, per_destination=1, per_address=3, per_owner=2))
    release = asyncio.Event()
    entered: list[str] = []

    async def attempt(dest: str, address: str | None, owner: str) -> None:
        async with slots.hold(dest, address, ("", owner)):
            entered.append(dest)
            await release.wait()

    held = [asyncio.create_task(attempt(f"h{i}:443", "a0:443", "o0")) for i in range(2)]  # o0's 2 slots taken
    for_owner = asyncio.create_task(attempt("h9:443", None, "o0"))  # h9 taken, waits for o0
    for_destination = asyncio.create_task(attempt("h0:443", "a1:443", "o5"))  # waits for h0's one slot
    for _ in range(5):
        await asyncio.sleep(0)  # a few loop passes: each task runs until it waits on a semaphore
    assert entered == ["h0:443", "h1:443"]
    assert slots.tracked == 3 + 1 + 1  # h0, h1, h9; a0; o0
    for_owner.cancel()
    for_destination.cancel()
    await asyncio.gather(for_owner, for_destination, return_exceptions=True)
    assert slots.tracked == 2 + 1 + 1  # h9 forgotten, a1 and o5 never tracked
    release.set()
    await asyncio.wait_for(asyncio.gather(*held), WAIT)
    assert slots.tracked == 0


async def test_the_two_levels_bound_each_and_never_deadlock() -> None:
    """Names crossing addresses (each name on two addresses, each address under two names), one slot per host and
    per address: at most one attempt per host and per address at once, and every attempt gets through (the slots
    are taken in one order, so no two attempts wait for each other)."""
    slots = DeliverySlots(DeliveryPolicy(concurrency=3, per_destination=1, per_address=1))
    busy: dict[str, int] = {}
    most = 0
    done = 0

    async def attempt(host: str, address: str) -> None:
        nonlocal most, done
        async with slots.hold(host, address, ("", "anonymous")):
            for key in (host, address):
                busy[key] = busy.get(key, 0) + 1
                most = max(most, busy[key])
            await asyncio.sleep(0)  # let the others run into the held slots
            for key in (host, address):
                busy[key] -= 1
        done += 1

    crossing = [(f"h{i}:443", f"a{(i + j) % 4}:443") for i in range(4) for j in range(2) for _ in range(5)]
    await asyncio.wait_for(asyncio.gather(*(attempt(h, a) for h, a in crossing)), WAIT)
    assert (done, most, slots.tracked) == (len(crossing), 1, 0)


def test_the_destination_is_host_and_port() -> None:
    assert destination("http://127.0.0.1:8080/a") != destination("http://127.0.0.1:8081/a")
    assert destination("http://a.test:8080/", "192.0.2.1") == destination("http://b.test:8080/x", "192.0.2.1")
    assert destination("http://a.test:8080/", "192.0.2.1") != destination("http://a.test:8081/", "192.0.2.1")
    assert destination("https://Hooks.Example.com/a2a?x=1") == destination("https://hooks.example.com:443/b")
    assert destination("http://[::1]/x") == "::1:80"
    assert destination("http://h:99999/x") == "h:80"  # no valid port: the request fails; counted under its host
