"""The SSRF guard's DNS lookups cannot tie up the resolver threads, and are never made for a task the caller cannot
see.

A lookup holds a thread until the system resolver answers: a timeout ends the wait, not the thread. Config-time
checks: names whose DNS answers slowly took every thread of the loop's default executor (6 here, 20 checks), and a
delivery-time lookup then timed out behind them. Now at most ``MAX_LOOKUPS`` run; a check whose lookup cannot start in
time is refused as retryable. Deliveries: each attempt's lookup ran on the default executor too, unbounded, so slow
names took all of its threads (what ``asyncio.to_thread`` and every other lookup need), and each retry looked the
name up again. Now at most ``DELIVERY_LOOKUPS`` run, on threads of their own; a delivery whose lookup cannot start is
put off, never dropped, callers share a running lookup, and an answer is kept 30 s (the SSRF check still applied to it
on every use). One authenticated owner's deliveries hold ``OWNER_LOOKUPS`` of the places at most, so its slow names
put off only its own deliveries; a failure is kept 5 s; a delivery's connect goes to the addresses looked up and
checked before its slots were taken, never looking the name up again; a name the resolver cannot encode (an empty
label, one over 63 characters) fails a delivery's attempt and is refused at config time. And a follow-up carrying an
inline push config for a task that is not the caller's answers TaskNotFound before its webhook host is looked up.

No name leaves the process: ``socket.getaddrinfo`` (what the resolver threads call) is replaced by ``FakeDNS`` for
each test.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpcore
import httpx
import pytest
from push_helpers import serving
from support.asgi import lifespan, read_body, respond
from support.servers import HOST

from relaykit import agent
from relaykit._errors import InvalidParamsError, ResourceExhaustedError
from relaykit.backends._base import OutboxChanges
from relaykit.backends.memory import MemoryPushConfigStore
from relaykit.http._app import create_app
from relaykit.push import DeliveryPolicy, MemoryPushOutbox, OutboxEntry, PushSender, WebhookGuard
from relaykit.push._resolver import Resolver
from relaykit.push._ssrf import DELIVERY_LOOKUPS, MAX_LOOKUPS, OWNER_LOOKUPS
from relaykit.testing import StreamingASGITransport
from relaykit.types import TaskPushNotificationConfig

WAIT = 5.0
PUBLIC = "93.184.215.14"  # what the fake resolver answers for *.fast.test (never connected to)
PRIVATE = "10.1.2.3"  # ... for *.private.test


class FakeDNS:
    """``socket.getaddrinfo`` for the resolver threads: ``*.slow.test`` blocks its thread until ``release`` (counting
    the threads held at once) and then fails, ``*.late.test`` blocks the same way and then answers 127.0.0.1 (at once
    after ``release``), ``*.local.test`` answers 127.0.0.1 at once, ``*.flip.test`` 127.0.0.1 the first time and
    127.0.0.2 after (a DNS answer that changes), ``*.fast.test`` a public address at once, ``*.private.test`` a
    private one; every name asked is recorded. IP literals are answered as themselves; anything else fails as an
    unknown name. A name is IDNA-encoded first, as ``socket.getaddrinfo`` does (an empty label or one over 63
    characters raises ``UnicodeError``)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.names: list[str] = []
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def _block(self) -> None:
        with self._lock:
            self.held += 1
            self.peak = max(self.peak, self.held)
        try:
            self.release.wait(WAIT)
        finally:
            with self._lock:
                self.held -= 1

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if isinstance(host, str):
            host.encode("idna")  # what socket.getaddrinfo does with a str host before asking anybody
        name = host.decode() if isinstance(host, bytes) else str(host)
        try:
            ipaddress.ip_address(name)
        except ValueError:
            pass
        else:
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (name, int(port or 0)))]
        with self._lock:
            self.names.append(name)
            flipped = name.endswith(".flip.test") and self.names.count(name) > 1
        answer = {".fast.test": PUBLIC, ".private.test": PRIVATE, ".late.test": HOST, ".local.test": HOST}
        answer[".flip.test"] = "127.0.0.2" if flipped else HOST
        if name.endswith((".slow.test", ".late.test")) and not self.release.is_set():
            self._block()
        if name.endswith(".slow.test"):
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        for suffix, address in answer.items():
            if name.endswith(suffix):
                return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 0)))]
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
    # While the stuck lookups hold their places, a config-time check is refused, not queued behind them (a name
    # not looked up yet: the answer for hooks.fast.test is kept, and a kept answer needs no place).
    with pytest.raises(ResourceExhaustedError):
        await asyncio.wait_for(guard.check_config("https://other.fast.test/hook", "url"), WAIT)

    # Once the resolver answers them, their places are free again.
    dns.release.set()
    await asyncio.wait_for(guard.check_config("https://other.fast.test/hook", "url"), WAIT)


async def _until(probe: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


async def test_delivery_lookups_hold_at_most_their_bound_of_threads_and_every_notification_arrives(
    dns: FakeDNS,
) -> None:
    """10 webhooks on names whose DNS hangs: at most ``DELIVERY_LOOKUPS`` lookups run, on threads of their own (the
    loop's default executor stays free), the deliveries that cannot get a lookup are put off, not dropped, and once
    the resolver answers every notification arrives, each name looked up once (retries share the running lookup,
    then the kept answer)."""
    names = [f"h{i}.late.test" for i in range(10)]
    arrived: set[str] = set()
    everyone = asyncio.Event()

    async def receiver(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        await read_body(receive)
        arrived.add(scope["path"])
        if len(arrived) == len(names):
            everyone.set()
        await respond(send, 200, b"")

    async with serving(receiver) as base:
        port = int(base.rsplit(":", 1)[1])
        configs, outbox = MemoryPushConfigStore(), MemoryPushOutbox()
        entries = []
        for i, name in enumerate(names):
            await configs.put(TaskPushNotificationConfig(task_id=f"t{i}", id="c", url=f"http://{name}:{port}/n{i}"))
            entries.append(OutboxEntry(f"e{i}", f"t{i}", "c", 1, b"{}", created_at=time.time()))
        await outbox.commit(OutboxChanges(added=entries))
        guard = WebhookGuard((HOST,), lookup_timeout=0.2)
        policy = DeliveryPolicy(backoff=0.05, max_backoff=0.2, max_attempts=1000, suspend_after=0)
        sender = PushSender(configs, outbox, guard=guard, policy=policy)
        await sender.start()
        try:
            await _until(lambda: dns.held >= DELIVERY_LOOKUPS, "the lookups hang")
            # Everything else that needs the loop's default executor still gets a thread at once.
            loop = asyncio.get_running_loop()
            assert await asyncio.wait_for(loop.run_in_executor(None, int), 1.0) == 0
            dns.release.set()
            await asyncio.wait_for(everyone.wait(), WAIT)
            await asyncio.wait_for(sender.drained(), WAIT)
            dead = [e for i in range(len(names)) for e in await outbox.dead_letters(f"t{i}")]
        finally:
            await sender.stop(drain=0)
    assert dns.peak == DELIVERY_LOOKUPS
    assert dead == []
    assert sorted(dns.names) == sorted(names)


async def test_an_answer_is_kept_briefly_and_still_checked_on_every_use(dns: FakeDNS) -> None:
    guard = WebhookGuard()
    many = [guard.connect_addresses("hooks.fast.test", 443) for _ in range(20)]
    assert await asyncio.wait_for(asyncio.gather(*many), WAIT) == [[PUBLIC]] * 20
    assert await asyncio.wait_for(guard.connect_addresses("hooks.fast.test", 8443), WAIT) == [PUBLIC]
    assert dns.names == ["hooks.fast.test"]  # one lookup: the callers shared it, then its kept answer

    # A kept answer is checked on every use: a private address stays refused, never named to the caller.
    for _ in range(2):
        with pytest.raises(httpcore.ConnectError, match="resolves to a private address") as refused:
            await asyncio.wait_for(guard.connect_addresses("db.private.test", 443), WAIT)
        assert PRIVATE not in str(refused.value)
    assert dns.names.count("db.private.test") == 1

    # ... for its ttl only.
    brief = WebhookGuard(dns_ttl=0.05)
    await asyncio.wait_for(brief.connect_addresses("ttl.fast.test", 443), WAIT)
    await _until(lambda: brief.resolver.cached("ttl.fast.test") is None, "the answer expires")
    await asyncio.wait_for(brief.connect_addresses("ttl.fast.test", 443), WAIT)
    assert dns.names.count("ttl.fast.test") == 2


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


async def test_a_failure_is_kept_briefly(dns: FakeDNS) -> None:
    """A name that does not resolve is looked up once per ``NEGATIVE_TTL``, not once per delivery attempt: a lookup
    of it holds no place meanwhile. The failures kept are bounded like the answers."""
    guard = WebhookGuard()
    for _ in range(3):
        with pytest.raises(httpcore.ConnectError, match=r"cannot resolve webhook host gone\.missing\.test"):
            await asyncio.wait_for(guard.connect_addresses("gone.missing.test", 443), WAIT)
    assert dns.names == ["gone.missing.test"]

    brief = WebhookGuard(dns_negative_ttl=0.05)
    with pytest.raises(httpcore.ConnectError):
        await asyncio.wait_for(brief.connect_addresses("again.missing.test", 443), WAIT)
    await _until(lambda: _forgotten(brief.resolver, "again.missing.test"), "the failure expires")
    with pytest.raises(httpcore.ConnectError):
        await asyncio.wait_for(brief.connect_addresses("again.missing.test", 443), WAIT)
    assert dns.names.count("again.missing.test") == 2

    small = Resolver(size=2)
    for name in ("n0.missing.test", "n1.missing.test", "n2.missing.test", "n0.missing.test"):
        with pytest.raises(OSError, match="Name or service not known"):
            await asyncio.wait_for(small.resolve(name, 443, asyncio.Semaphore(1), WAIT), WAIT)
    assert dns.names.count("n0.missing.test") == 2  # dropped, oldest first, when the third failed


def _forgotten(resolver: Resolver, name: str) -> bool:
    try:
        resolver.cached(name)
    except OSError:
        return False
    return True


async def _sender_for(
    urls: list[tuple[str, str]], guard: WebhookGuard, policy: DeliveryPolicy
) -> tuple[PushSender, MemoryPushOutbox]:
    """A sender whose outbox holds one notification per ``(owner, url)``, each on a task of its own (resumed in that
    order: the outbox sorts by owner, then task id)."""
    configs, outbox = MemoryPushConfigStore(), MemoryPushOutbox()
    entries = []
    for i, (owner, url) in enumerate(urls):
        await configs.put(TaskPushNotificationConfig(task_id=f"t{i:03d}", id="c", url=url), owner=owner)
        entries.append(OutboxEntry(f"e{i}", f"t{i:03d}", "c", 1, b"{}", owner=owner, created_at=time.time()))
    await outbox.commit(OutboxChanges(added=entries))
    return PushSender(configs, outbox, guard=guard, policy=policy), outbox


class Arrivals:
    """An ASGI receiver answering 200; ``await arrived(path, timeout)`` returns once a POST to ``path`` came."""

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


async def test_one_owner_whose_dns_never_answers_holds_only_its_share_of_the_lookups(dns: FakeDNS) -> None:
    """An authenticated owner's 6 webhooks are on names whose DNS hangs: they took all 4 delivery lookup places, and
    every other owner's delivery to a host name was put off until they ended. Now that owner's lookups hold
    ``OWNER_LOOKUPS`` (2) places at most (its others are put off), and another owner's notification arrives at
    once, while the hung lookups still hang."""
    receiver = Arrivals()
    async with serving(receiver) as base:
        port = int(base.rsplit(":", 1)[1])
        hung = [("jwt:attacker", f"http://h{i}.slow.test:{port}/stuck") for i in range(6)]
        guard = WebhookGuard((HOST,), lookup_timeout=0.2)
        policy = DeliveryPolicy(backoff=0.05, max_backoff=0.2, max_attempts=1000, suspend_after=0)
        sender, _ = await _sender_for([*hung, ("jwt:victim", f"http://v.local.test:{port}/fine")], guard, policy)
        await sender.start()
        try:
            await _until(lambda: dns.held >= OWNER_LOOKUPS, "the attacker's lookups hang")
            await receiver.arrived("/fine", 2.0)
            assert dns.held == OWNER_LOOKUPS  # still hanging: the victim got a place beside them
        finally:
            await sender.stop(drain=0)
    assert dns.peak == OWNER_LOOKUPS


async def test_a_delivery_connects_to_the_addresses_it_checked_without_a_second_lookup(dns: FakeDNS) -> None:
    """Nothing kept (``dns_ttl=0``), and the name's answer changes after its first lookup: the connect looked the
    name up again (a second lookup, which could also find no place and fail the attempt) and went to the new answer,
    127.0.0.2, which the SSRF guard refuses here, so the attempt failed. Now it goes to the address looked up and
    checked before the slots were taken, and the name is looked up once per attempt."""
    receiver = Arrivals()
    async with serving(receiver) as base:
        port = int(base.rsplit(":", 1)[1])
        guard = WebhookGuard((HOST,), dns_ttl=0)
        policy = DeliveryPolicy(max_attempts=1, suspend_after=0)
        sender, outbox = await _sender_for([("anonymous", f"http://hooks.flip.test:{port}/n")], guard, policy)
        await sender.start()
        try:
            await asyncio.wait_for(sender.drained(), WAIT)
            dead = await outbox.dead_letters("t000")
        finally:
            await sender.stop(drain=0)
    assert [e.last_error for e in dead] == []
    assert receiver.paths == ["/n"]
    assert dns.names == ["hooks.flip.test"]


INVALID_NAMES = ["a" * 64 + ".fast.test", "a..fast.test"]  # a label over 63 characters; an empty label


async def test_a_host_name_the_resolver_cannot_encode_fails_the_attempt(dns: FakeDNS) -> None:
    """``getaddrinfo`` raises ``UnicodeError`` (not an ``OSError``) for such a name: it escaped the delivery step, the
    runner logged it every second and nothing was counted until ``max_age``. Now it is an attempt that failed as a
    name that does not resolve, and with one attempt allowed the notification is a dead letter saying why."""
    guard = WebhookGuard()
    policy = DeliveryPolicy(max_attempts=1, suspend_after=0)
    sender, outbox = await _sender_for([("anonymous", f"http://{name}/hook") for name in INVALID_NAMES], guard, policy)
    await sender.start()
    try:
        await asyncio.wait_for(sender.drained(), WAIT)
        dead = [e for i in range(len(INVALID_NAMES)) for e in await outbox.dead_letters(f"t{i:03d}")]
    finally:
        await sender.stop(drain=0)
    assert len(dead) == len(INVALID_NAMES)
    for entry in dead:
        assert entry.attempts == 1
        assert "ConnectError: cannot resolve webhook host" in entry.last_error
        assert "not a valid host name" in entry.last_error


@pytest.mark.parametrize("name", INVALID_NAMES, ids=["long-label", "empty-label"])
async def test_a_host_name_the_resolver_cannot_encode_is_refused_at_config_time(dns: FakeDNS, name: str) -> None:
    guard = WebhookGuard()
    with pytest.raises(InvalidParamsError) as refused:
        await asyncio.wait_for(guard.check_config(f"https://{name}/hook", "url"), WAIT)
    assert "is not a valid URL" in refused.value.message
    [(field, reason)] = refused.value.field_violations
    assert field == "url"
    assert "not a valid host name" in reason
