"""Fair delivery slots: how many webhook requests may be in flight in all, per host, per address, and per owner.

A receiver that accepts the connection and never answers (a tarpit) keeps each attempt in flight until the request
timeout. With one bound for every webhook, 64 configs pointing at one tarpit held every slot, and every other
caller's notifications waited behind them. Rules:

* an attempt holds, while its request is in flight, a slot of its **host** (the ``host:port`` of its webhook URL:
  ``DeliveryPolicy.per_destination``, 8), one of its **address** (the ``address:port`` the connection goes to:
  ``per_address``, 32), one of its **owner** ((tenant, owner): ``per_owner``, when set) and one of the **total**
  (``concurrency``, 64); so a slow or hostile receiver holds its own share and no more;
* why two levels: most webhook receivers sit behind shared addresses (CDNs, load balancers), so a bound per address
  alone lets one owner's slow server behind a shared address take every slot of it, and every other receiver
  behind that address waits; a bound per host alone lets any number of names pointing at one tarpit take 8 slots
  each. Per host, one name holds 8 at most, and other names behind its address keep flowing; per address, all the
  names on one address hold ``per_address`` (half the total by default) at most, so one address (however many names
  point at it) never takes every slot. The price: many hostile names on a shared address can still take its
  ``per_address`` and delay the other receivers behind that address (not those elsewhere); ``per_owner`` bounds one
  caller's share of that too;
* the address is the first the host resolves to and the SSRF guard checked, looked up before the slots are taken
  (the connection goes to it first: ``_delivery`` hands the checked addresses to the connect). When the address is
  not known (the sender was given its own HTTP client, which does not connect through the guard, or the URL cannot
  be split) only the host's slot is taken;
* the slots are taken in that order, host, address, owner, total, and given back in reverse: a runner waiting for a
  busy host holds nothing, one waiting for a busy address only its host's slot (a tarpit's queue of runners takes no
  total slot), and with one order for everyone a runner only ever waits for a slot of a later level than all those
  it holds, so no two runners wait for each other's slots (no deadlock);
* each key waits in FIFO order (``asyncio.Semaphore``), and per-stream order is the runner's (one request at a
  time per stream), not this module's;
* the tables keep a key only while somebody holds or awaits one of its slots (at most one key of each level per
  runner), and drop it when its last user leaves: nothing grows with the number of destinations or owners ever seen.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable
from urllib.parse import urlsplit

from relaykit.push._policy import DeliveryPolicy

__all__ = ["DeliverySlots", "KeyedSlots", "destination"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def destination(url: str, address: str = "") -> str:
    """The ``host:port`` a webhook URL connects to (its scheme's default port when it names none), or
    ``address:port`` when the address its host resolves to is known.

    >>> destination("https://Hooks.example.com/a2a"), destination("http://127.0.0.1:8080/x")
    ('hooks.example.com:443', '127.0.0.1:8080')
    >>> destination("https://a.example.com/a2a", "93.184.215.14"), destination("https://b.example.com", "93.184.215.14")
    ('93.184.215.14:443', '93.184.215.14:443')
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None  # not a port: the request fails anyway; its attempt counts under the URL's host
    return f"{address or parts.hostname or ''}:{port or _DEFAULT_PORTS.get(parts.scheme, 0)}"


class _Slot:
    __slots__ = ("semaphore", "users")

    def __init__(self, limit: int) -> None:
        self.semaphore = asyncio.Semaphore(limit)
        self.users = 0  # holders and waiters


class KeyedSlots:
    """``limit`` slots per key; a key is tracked only while it has users (also the delivery lookups' places per
    owner: ``_resolver``).

    >>> owners = KeyedSlots(1)
    >>> async def once() -> int:
    ...     await owners.acquire("alice")
    ...     held = len(owners)
    ...     owners.release("alice")
    ...     return held
    >>> asyncio.run(once()), len(owners)
    (1, 0)
    """

    __slots__ = ("_slots", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: dict[Hashable, _Slot] = {}

    def __len__(self) -> int:
        return len(self._slots)

    async def acquire(self, key: Hashable) -> None:
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(self.limit)
        slot.users += 1
        try:
            await slot.semaphore.acquire()
        except BaseException:
            self._leave(key, slot)  # cancelled while waiting: it holds nothing
            raise

    def release(self, key: Hashable) -> None:
        slot = self._slots[key]
        slot.semaphore.release()
        self._leave(key, slot)

    def _leave(self, key: Hashable, slot: _Slot) -> None:
        slot.users -= 1
        if not slot.users:
            del self._slots[key]


class DeliverySlots:
    """The slots of one sender's delivery attempts (see the module docstring).

    >>> slots = DeliverySlots(DeliveryPolicy(concurrency=4, per_destination=2, per_address=3))
    >>> async def one() -> int:
    ...     async with slots.hold("hooks.example.com:443", "93.184.215.14:443", ("", "anonymous")):
    ...         return slots.tracked
    >>> asyncio.run(one()), slots.tracked
    (2, 0)
    """

    def __init__(self, policy: DeliveryPolicy) -> None:
        self._total = asyncio.Semaphore(policy.concurrency)
        self._hosts = KeyedSlots(policy.per_destination)
        self._addresses = KeyedSlots(policy.per_address)
        self._owners = KeyedSlots(policy.per_owner) if policy.per_owner else None

    @property
    def tracked(self) -> int:
        """Hosts, addresses and owners with an attempt in flight or waiting (observability, tests)."""
        return len(self._hosts) + len(self._addresses) + (len(self._owners) if self._owners is not None else 0)

    @contextlib.asynccontextmanager
    async def hold(self, host: str, address: str | None, owner: tuple[str, str]) -> AsyncIterator[None]:
        """Hold a slot of ``host`` (``host:port``), of ``address`` (``address:port``; ``None``: not known), of
        ``owner`` and of the total for the block, taken in that order (see the module)."""
        owners = self._owners
        await self._hosts.acquire(host)
        try:
            if address is not None:
                await self._addresses.acquire(address)
            try:
                if owners is not None:
                    await owners.acquire(owner)
                try:
                    async with self._total:
                        yield
                finally:
                    if owners is not None:
                        owners.release(owner)
            finally:
                if address is not None:
                    self._addresses.release(address)
        finally:
            self._hosts.release(host)
