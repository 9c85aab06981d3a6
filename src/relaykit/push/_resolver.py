"""The SSRF guard's DNS lookups (``_ssrf``): bounded, each on a thread of its own, answers kept briefly.

Why: the system resolver (``getaddrinfo``) holds a thread until it answers, however long after its caller stopped
waiting (a timeout ends the wait, not the thread). On the loop's default executor, names whose DNS answers slowly
(a hostile config, a resolver outage) could take every thread of it, and everything else that needs that executor
(``asyncio.to_thread``, other lookups) would wait behind them. Rules:

* a lookup holds a **place** of its kind until its thread returns: config-time checks have ``MAX_LOOKUPS`` (2),
  deliveries ``DELIVERY_LOOKUPS`` (4), so neither kind can take the other's places; a caller waits for a place at
  most ``timeout`` seconds, then gets ``LookupBusyError`` (retryable: this process is busy, the receiver did nothing
  wrong), and waits for the answer at most as long again (``TimeoutError``);
* each lookup runs on a daemon thread started for it, never on the loop's default executor or libuv's pool: the
  places bound how many run at once, and a resolver that never answers cannot hold up the process's exit;
* callers asking for a name while its lookup runs share that lookup (one thread, one place);
* a successful answer is kept ``ttl`` seconds (30: longer than the webhook client's keep-alive, short enough that a
  moved receiver is found soon) for at most ``CACHE_SIZE`` names, oldest dropped first; failures are never kept.
  The cache holds addresses, never a verdict: the guard checks the addresses it is given on every use, so a cached
  answer reaches nothing the SSRF rules refuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time
from typing import Any

import httpcore

__all__ = ["CACHE_SIZE", "DNS_TTL", "LookupBusyError", "Resolver"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DNS_TTL = 30.0  # seconds a successful answer is reused
CACHE_SIZE = 1024  # names whose answers are kept at most


class LookupBusyError(httpcore.ConnectError):
    """No lookup place came free in time: this process's lookups of that kind are all in progress.

    A connect error (a delivery that meets it at connect time fails like any connect), but the sender tells it
    apart before the attempt: it is this process's congestion, not the receiver's failure.
    """


def _parse(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)  # an IPv6 scope (``fe80::1%eth0``) is kept: the guard judges it
    except ValueError:
        return None


class Resolver:
    """Host names to addresses, looked up within a bound of places and kept ``ttl`` seconds (see the module).

    >>> resolver = Resolver()
    >>> async def look() -> list[str]:
    ...     return [str(a) for a in await resolver.resolve("localhost", 80, asyncio.Semaphore(1), 2.0)][:1]
    >>> asyncio.run(look()) in (["127.0.0.1"], ["::1"])
    True
    """

    def __init__(self, *, ttl: float = DNS_TTL, size: int = CACHE_SIZE) -> None:
        self.ttl = ttl
        self.size = size
        # Insertion order is expiry order (one ttl for all): the first key is the next to go.
        self._answers: dict[str, tuple[float, tuple[IPAddress, ...]]] = {}
        self._running: dict[str, asyncio.Future[tuple[IPAddress, ...]]] = {}

    def cached(self, host: str) -> tuple[IPAddress, ...] | None:
        """The kept answer for ``host``, if it has not expired."""
        key = host.lower()
        answer = self._answers.get(key)
        if answer is None:
            return None
        if answer[0] <= time.monotonic():
            del self._answers[key]
            return None
        return answer[1]

    async def resolve(
        self,
        host: str,
        port: int,
        places: asyncio.Semaphore,
        timeout: float,  # noqa: ASYNC109 - two bounds (the place, then the answer), not one deadline
    ) -> tuple[IPAddress, ...]:
        """The addresses ``host`` resolves to: a kept answer, the running lookup's, or a new lookup holding one of
        ``places``. Raises ``LookupBusyError`` (no place within ``timeout``), ``TimeoutError`` (no answer within
        ``timeout``) or ``OSError`` (the name does not resolve)."""
        key = host.lower()
        answer = self.cached(key)
        if answer is not None:
            return answer
        lookup = self._running.get(key)
        if lookup is None:
            try:
                await asyncio.wait_for(places.acquire(), timeout)
            except TimeoutError:
                raise LookupBusyError(f"cannot look up webhook host {host} now: too many lookups in progress") from None
            # Waiting took a while: another caller may have looked the name up meanwhile.
            answer = self.cached(key)
            lookup = self._running.get(key)
            if answer is not None or lookup is not None:
                places.release()
                if answer is not None:
                    return answer
            else:
                lookup = self._start(key, host, port, places)
        assert lookup is not None
        # Shielded: the timeout (or the caller leaving) ends this wait; the lookup runs on, holding its place.
        return await asyncio.wait_for(asyncio.shield(lookup), timeout)

    def _start(
        self, key: str, host: str, port: int, places: asyncio.Semaphore
    ) -> asyncio.Future[tuple[IPAddress, ...]]:
        loop = asyncio.get_running_loop()
        lookup: asyncio.Future[tuple[IPAddress, ...]] = loop.create_future()
        self._running[key] = lookup

        def answered(infos: list[Any] | None, error: BaseException | None) -> None:
            places.release()
            if self._running.get(key) is lookup:
                del self._running[key]
            if infos is not None:
                found: list[IPAddress] = []
                for info in infos:
                    ip = _parse(str(info[4][0]))
                    if ip is not None and ip not in found:
                        found.append(ip)
                if found:
                    self._keep(key, tuple(found))
                    lookup.set_result(tuple(found))
                    return
                error = OSError(f"{host} resolved to no address")
            lookup.set_exception(error if isinstance(error, Exception) else OSError(str(error)))
            lookup.exception()  # taken: every caller may have stopped waiting ("exception never retrieved")

        def run() -> None:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except BaseException as exc:  # handed to the loop, whatever it is
                outcome: tuple[list[Any] | None, BaseException | None] = (None, exc)
            else:
                outcome = (infos, None)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(answered, *outcome)

        try:
            threading.Thread(target=run, name=f"relaykit-dns-{host}"[:64], daemon=True).start()
        except RuntimeError as exc:  # no thread can be started now
            answered(None, OSError(f"cannot look up webhook host {host}: {exc}"))
        return lookup

    def _keep(self, key: str, addresses: tuple[IPAddress, ...]) -> None:
        if self.ttl <= 0:
            return
        self._answers.pop(key, None)
        while len(self._answers) >= self.size:
            del self._answers[next(iter(self._answers))]
        self._answers[key] = (time.monotonic() + self.ttl, addresses)
