"""The SSRF guard's DNS lookups (``_ssrf``): bounded, each on a thread of its own, answers kept briefly.

Why: the system resolver (``getaddrinfo``) holds a thread until it answers, however long after its caller stopped
waiting (a timeout ends the wait, not the thread). On the loop's default executor, names whose DNS answers slowly
(a hostile config, a resolver outage) could take every thread of it, and everything else that needs that executor
(``asyncio.to_thread``, other lookups) would wait behind them. Rules:

* a lookup holds a **place** of its kind until its thread returns: config-time checks have ``MAX_LOOKUPS`` (2),
  deliveries ``DELIVERY_LOOKUPS`` (4), so neither kind can take the other's places; a caller waits for a place at
  most ``timeout`` seconds, then gets ``LookupBusyError`` (retryable: this process is busy, the receiver did nothing
  wrong), and waits for the answer at most as long again (``TimeoutError``);
* a delivery's lookup also holds a place of its **owner** (``OWNER_LOOKUPS``, 2 of the 4), taken before the place of
  its kind: an owner whose names' DNS never answers holds 2 places and waits for its own, never for everyone's, so
  other owners' lookups still start. Only authenticated owners are bounded (the caller passes no owner for the
  anonymous one): with authentication off every task has that one owner, and a bound on it would only be a second,
  smaller global bound (as the per-principal quotas of ``relaykit.server._quotas`` exempt it too);
* each lookup runs on a daemon thread started for it, never on the loop's default executor or libuv's pool: the
  places bound how many run at once, and a resolver that never answers cannot hold up the process's exit;
* callers asking for a name while its lookup runs share that lookup (one thread, one place);
* a successful answer is kept ``ttl`` seconds (30: longer than the webhook client's keep-alive, short enough that a
  moved receiver is found soon) for at most ``CACHE_SIZE`` names, oldest dropped first. A failure (no such name, no
  address, the system resolver's own timeout: what a nameserver that never answers ends in) is kept
  ``NEGATIVE_TTL`` seconds (5) for at most ``CACHE_SIZE`` names, so a name that keeps failing holds a place once per
  5 s, not once per retry; a thread that could not be started is this process's trouble and is not kept.
  The cache holds addresses, never a verdict: the guard checks the addresses it is given on every use, so a cached
  answer reaches nothing the SSRF rules refuse;
* a name the system resolver cannot even encode (an empty label, one over 63 characters: ``UnicodeError``; other
  ``ValueError``/``TypeError``) is ``InvalidHostError``, an ``OSError`` like a name that does not resolve, so every
  caller handles it as one (the config-time check refuses it as an invalid URL).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import httpcore

from relaykit.push._slots import KeyedSlots

__all__ = ["CACHE_SIZE", "DNS_TTL", "NEGATIVE_TTL", "InvalidHostError", "LookupBusyError", "Resolver"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DNS_TTL = 30.0  # seconds a successful answer is reused
NEGATIVE_TTL = 5.0  # seconds a failed lookup's failure is reused
CACHE_SIZE = 1024  # names whose answers (and, apart, whose failures) are kept at most


class LookupBusyError(httpcore.ConnectError):
    """No lookup place came free in time: this process's lookups of that kind are all in progress.

    A connect error (a delivery that meets it at connect time fails like any connect), but the sender tells it
    apart before the attempt: it is this process's congestion, not the receiver's failure.
    """


class InvalidHostError(OSError):
    """Not a host name the system resolver can look up (an empty label, a label over 63 characters, …): handled
    like a name that does not resolve, but the config-time check refuses it (the URL can never work)."""


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

    def __init__(self, *, ttl: float = DNS_TTL, negative_ttl: float = NEGATIVE_TTL, size: int = CACHE_SIZE) -> None:
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.size = size
        # Insertion order is expiry order (one ttl for each table): the first key is the next to go.
        self._answers: dict[str, tuple[float, tuple[IPAddress, ...]]] = {}
        self._failures: dict[str, tuple[float, type[OSError], str]] = {}
        self._running: dict[str, asyncio.Future[tuple[IPAddress, ...]]] = {}

    def cached(self, host: str) -> tuple[IPAddress, ...] | None:
        """The kept answer for ``host``, if it has not expired; raises the kept failure (``OSError``) if one has
        not."""
        key = host.lower()
        answer = self._answers.get(key)
        if answer is not None:
            if answer[0] > time.monotonic():
                return answer[1]
            del self._answers[key]
        failure = self._failures.get(key)
        if failure is not None:
            if failure[0] > time.monotonic():
                raise failure[1](failure[2])
            del self._failures[key]
        return None

    async def resolve(
        self,
        host: str,
        port: int,
        places: asyncio.Semaphore,
        timeout: float,  # noqa: ASYNC109 - two bounds (the place, then the answer), not one deadline
        owner: tuple[KeyedSlots, Hashable] | None = None,
    ) -> tuple[IPAddress, ...]:
        """The addresses ``host`` resolves to: a kept answer, the running lookup's, or a new lookup holding one of
        ``places`` (and, with ``owner`` = ``(places per owner, the owner)``, one of its owner's, taken first).
        Raises ``LookupBusyError`` (no place within ``timeout``), ``TimeoutError`` (no answer within ``timeout``) or
        ``OSError`` (the name does not resolve, now or within ``NEGATIVE_TTL``; ``InvalidHostError``: it cannot)."""
        key = host.lower()
        answer = self.cached(key)
        if answer is not None:
            return answer
        lookup = self._running.get(key)
        if lookup is None:
            release = await self._take(host, places, owner, timeout)
            # Waiting took a while: another caller may have looked the name up meanwhile.
            try:
                answer = self.cached(key)
            except OSError:
                release()
                raise
            lookup = self._running.get(key)
            if answer is not None or lookup is not None:
                release()
                if answer is not None:
                    return answer
            else:
                lookup = self._start(key, host, port, release)
        assert lookup is not None
        # Shielded: the timeout (or the caller leaving) ends this wait; the lookup runs on, holding its place.
        return await asyncio.wait_for(asyncio.shield(lookup), timeout)

    @staticmethod
    async def _take(
        host: str,
        places: asyncio.Semaphore,
        owner: tuple[KeyedSlots, Hashable] | None,
        timeout: float,  # noqa: ASYNC109 - the bound of both waits together
    ) -> Callable[[], None]:
        """The owner's place (when bounded), then one of ``places``, within ``timeout`` together; returns what gives
        them back."""
        try:
            async with asyncio.timeout(timeout):
                if owner is not None:
                    await owner[0].acquire(owner[1])
                try:
                    await places.acquire()
                except BaseException:
                    if owner is not None:
                        owner[0].release(owner[1])
                    raise
        except TimeoutError:
            raise LookupBusyError(f"cannot look up webhook host {host} now: too many lookups in progress") from None
        if owner is None:
            return places.release
        owners, who = owner

        def release() -> None:
            places.release()
            owners.release(who)

        return release

    def _start(
        self, key: str, host: str, port: int, release: Callable[[], None]
    ) -> asyncio.Future[tuple[IPAddress, ...]]:
        loop = asyncio.get_running_loop()
        lookup: asyncio.Future[tuple[IPAddress, ...]] = loop.create_future()
        self._running[key] = lookup

        def answered(infos: list[Any] | None, error: BaseException | None, keep: bool = True) -> None:
            release()
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
            failure = _as_os_error(error)
            if keep:
                self._keep_failure(key, failure)
            lookup.set_exception(failure)
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
        except RuntimeError as exc:  # no thread can be started now: not the name's failure, so not kept
            answered(None, OSError(f"cannot look up webhook host {host}: {exc}"), keep=False)
        return lookup

    def _keep(self, key: str, addresses: tuple[IPAddress, ...]) -> None:
        self._failures.pop(key, None)
        if self.ttl <= 0:
            return
        self._answers.pop(key, None)
        while len(self._answers) >= self.size:
            del self._answers[next(iter(self._answers))]
        self._answers[key] = (time.monotonic() + self.ttl, addresses)

    def _keep_failure(self, key: str, failure: OSError) -> None:
        if self.negative_ttl <= 0:
            return
        self._failures.pop(key, None)
        while len(self._failures) >= self.size:
            del self._failures[next(iter(self._failures))]
        kind = InvalidHostError if isinstance(failure, InvalidHostError) else OSError
        self._failures[key] = (time.monotonic() + self.negative_ttl, kind, str(failure))


def _as_os_error(error: BaseException | None) -> OSError:
    """What a lookup raised, as the ``OSError`` every caller handles: ``getaddrinfo`` raises ``UnicodeError`` for a
    name it cannot encode (an empty label, one over 63 characters) and ``ValueError``/``TypeError`` for others (an
    embedded NUL), which are not ``OSError``, and would escape a caller that handles a name not resolving."""
    if isinstance(error, OSError):
        return error
    if isinstance(error, (ValueError, TypeError)):  # UnicodeError is a ValueError
        return InvalidHostError(f"not a valid host name ({type(error).__name__}: {str(error)[:120]})")
    return OSError(f"the lookup failed ({type(error).__name__})")
