"""Fair delivery slots: how many webhook requests may be in flight in all, per destination, and per owner.

A receiver that accepts the connection and never answers (a tarpit) keeps each attempt in flight until the request
timeout. With one bound for every webhook, 64 configs pointing at one tarpit held every slot, and every other
caller's notifications waited behind them. Rules:

* an attempt holds, while its request is in flight, a slot of its **destination** (the ``address:port`` its webhook
  URL connects to: ``DeliveryPolicy.per_destination``), one of its **owner** ((tenant, owner): ``per_owner``, when
  set) and one of the **total** (``concurrency``); so a slow or hostile receiver holds its own share and no more;
* the destination is the address the host name resolves to (the first checked address, the one the connection goes
  to first), looked up before the slots are taken: any number of names pointing at one tarpit share its 8 slots, and
  a name cannot be multiplied into more slots. Only when the address is not known (the sender was given its own HTTP
  client, which does not connect through the SSRF guard, or the URL cannot be split) is it the URL's ``host:port``;
* the slots are taken in that order, the total last, and given back in reverse: a runner waiting for a busy
  destination or owner holds nothing another destination needs (a tarpit's queue of runners takes no total slot),
  and with one order for everyone no two runners wait for each other's slots;
* each key waits in FIFO order (``asyncio.Semaphore``), and per-stream order is the runner's (one request at a
  time per stream), not this module's;
* the tables keep a key only while somebody holds or awaits one of its slots (at most one key per runner), and
  drop it when its last user leaves: nothing grows with the number of destinations or owners ever seen.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable
from urllib.parse import urlsplit

from relaykit.push._policy import DeliveryPolicy

__all__ = ["DeliverySlots", "destination"]

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


class _Keyed:
    """``limit`` slots per key; a key is tracked only while it has users."""

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

    >>> slots = DeliverySlots(DeliveryPolicy(concurrency=4, per_destination=2))
    >>> async def one() -> int:
    ...     async with slots.hold("hooks.example.com:443", ("", "anonymous")):
    ...         return slots.tracked
    >>> asyncio.run(one()), slots.tracked
    (1, 0)
    """

    def __init__(self, policy: DeliveryPolicy) -> None:
        self._total = asyncio.Semaphore(policy.concurrency)
        self._destinations = _Keyed(policy.per_destination)
        self._owners = _Keyed(policy.per_owner) if policy.per_owner else None

    @property
    def tracked(self) -> int:
        """Destinations and owners with an attempt in flight or waiting (observability, tests)."""
        return len(self._destinations) + (len(self._owners) if self._owners is not None else 0)

    @contextlib.asynccontextmanager
    async def hold(self, destination: str, owner: tuple[str, str]) -> AsyncIterator[None]:
        """Hold a slot of ``destination``, of ``owner`` and of the total for the block."""
        owners = self._owners
        await self._destinations.acquire(destination)
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
            self._destinations.release(destination)
