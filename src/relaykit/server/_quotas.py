"""Per-principal quotas: what one caller may take of a shared server (issue 14, Build 2).

The principal is the call context's ``user`` (the authenticated principal; ``anonymous`` while auth is off).
Invariants:

* ``anonymous`` is exempt: with auth off nothing tells two callers apart (a client address is not an identity: NAT
  and proxies put many callers behind one, and one caller can spread over many), so a per-principal quota would only
  be a second, smaller global limit; the global limits (``max_concurrent``, ``max_queued``, ``max_subscribers``, the
  HTTP connection cap) bound an anonymous server. A deployment that must tell callers apart turns auth on.
* Each overflow is ``ResourceExhaustedError`` (HTTP 429, gRPC RESOURCE_EXHAUSTED) whose ErrorInfo metadata carries
  ``retryAfter`` (whole seconds), which the HTTP bindings also send as ``Retry-After``.
* Requests per second: a token bucket per principal (``rate`` per second, ``burst`` deep), charged once per
  operation in ``RequestHandler.dispatch``; the table of buckets is bounded (full buckets are forgotten first).
* Concurrent executions and queued messages (accepted, not yet running) per principal: counted by the runner
  (``Runner._enqueue`` / ``_run``), next to the global counts.
* Open streams per principal: counted from a stream's start to its end, however it ends.
* Push configs per task (every principal): at most ``push_configs``; the next create is refused, and so is a
  follow-up message whose inline config would be one more (``RequestHandler._check_push_cap``).
* Scale-out (``QuotaLedger(shared=...)``, the Redis ``RedisQuotas``): every count above is kept in one place for all
  replicas, each check one atomic round trip; executions and queued messages are counted when a replica accepts the
  message (before anything is stored), released by the worker that starts / ends them. A shared hold lives
  ``HOLD_LEASE`` seconds unless its holder refreshes it, so the holds of a crashed replica lapse. With a quota off
  (0) or an anonymous caller, nothing is asked of the shared store.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from relaykit._errors import ResourceExhaustedError
from relaykit.server._context import ANONYMOUS

__all__ = ["HOLD_LEASE", "MemoryQuotaStore", "QuotaLedger", "QuotaStore", "Quotas", "exhausted"]

_T = TypeVar("_T")
_MAX_BUCKETS = 10_000  # principals tracked at once; beyond, the full (idle) buckets are dropped
HOLD_LEASE = 15.0  # seconds a shared hold lives unless refreshed; holders refresh every third of it
EXECUTIONS, QUEUED, STREAMS = "executions", "queued", "streams"

log = logging.getLogger("relaykit.quotas")


@dataclass(frozen=True, slots=True)
class Quotas:
    """Per-principal limits; ``relaykit serve --quota-*`` flags change them, 0 turns one off."""

    executions: int = 100
    streams: int = 100
    rate: float = 200.0
    burst: int = 400
    push_configs: int = 500
    queued: int = 100


def exhausted(message: str, retry_after: float) -> ResourceExhaustedError:
    """The 429 of a quota, saying when to retry (whole seconds, at least 1)."""
    return ResourceExhaustedError(message, retry_after=str(max(1, math.ceil(retry_after))))


class QuotaStore(Protocol):
    """Where the counts behind ``Quotas`` live when replicas share them. ``MemoryQuotaStore`` is the reference;
    ``relaykit.backends.redis.RedisQuotas`` the shared one. Each call is atomic."""

    async def take_token(self, principal: str, rate: float, burst: float) -> float:
        """Take one token of ``principal``'s bucket: 0.0, or (nothing taken) the seconds until the next token."""
        ...

    async def hold(self, principal: str, holds: Sequence[tuple[str, str, int]], lease: float) -> str | None:
        """Hold each ``(kind, holder, cap)`` for ``principal``, all or none, for ``lease`` seconds: None, or the
        first kind already at its cap. A holder already held is refreshed, never refused."""
        ...

    async def release(self, principal: str, holds: Sequence[tuple[str, str]]) -> None:
        """Drop the ``(kind, holder)`` holds of ``principal``."""
        ...

    async def refresh(self, holds: Sequence[tuple[str, str, str]], lease: float) -> None:
        """Extend the ``(principal, kind, holder)`` holds that are still held (a released one stays released)."""
        ...


class MemoryQuotaStore:
    """``QuotaStore`` in this process (the reference; the ledger uses ``take_now`` directly when not shared)."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}  # principal -> (tokens, time of last refill)
        self._holds: dict[tuple[str, str], dict[str, float]] = {}  # (principal, kind) -> holder -> expiry

    def take_now(self, principal: str, rate: float, burst: float) -> float:
        now = time.monotonic()
        tokens, then = self._buckets.get(principal, (burst, now))
        tokens = min(burst, tokens + (now - then) * rate)
        if tokens < 1.0:
            self._buckets[principal] = (tokens, now)
            return (1.0 - tokens) / rate
        if len(self._buckets) >= _MAX_BUCKETS and principal not in self._buckets:
            idle = [p for p, (k, t) in self._buckets.items() if k + (now - t) * rate >= burst]
            for name in idle:
                del self._buckets[name]
        self._buckets[principal] = (tokens - 1.0, now)
        return 0.0

    async def take_token(self, principal: str, rate: float, burst: float) -> float:
        return self.take_now(principal, rate, burst)

    async def hold(self, principal: str, holds: Sequence[tuple[str, str, int]], lease: float) -> str | None:
        now = time.monotonic()
        for kind, holder, cap in holds:
            held = self._holds.setdefault((principal, kind), {})
            for name in [h for h, expiry in held.items() if expiry <= now]:
                del held[name]
            if holder not in held and len(held) >= cap:
                return kind
        for kind, holder, _ in holds:
            self._holds[(principal, kind)][holder] = now + lease
        return None

    async def release(self, principal: str, holds: Sequence[tuple[str, str]]) -> None:
        for kind, holder in holds:
            self._holds.get((principal, kind), {}).pop(holder, None)

    async def refresh(self, holds: Sequence[tuple[str, str, str]], lease: float) -> None:
        now = time.monotonic()
        for principal, kind, holder in holds:
            held = self._holds.get((principal, kind), {})
            if holder in held:
                held[holder] = now + lease


class QuotaLedger:
    """The live counts behind ``Quotas``: in this process, or in a ``QuotaStore`` shared by the replicas."""

    def __init__(
        self, quotas: Quotas | None = None, shared: QuotaStore | None = None, *, lease: float = HOLD_LEASE
    ) -> None:
        self.quotas = quotas if quotas is not None else Quotas()
        self.shared = shared
        self.lease = lease  # of each shared hold; refreshed every third of it
        self._local = MemoryQuotaStore()
        self.streams: dict[str, int] = {}
        self._held: dict[tuple[str, str, str], None] = {}  # shared stream holds of this process, refreshed here
        self._engine: Any = None
        self._refresher: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[None]] = set()

    # --- requests per second -------------------------------------------------------------------------------

    async def charge(self, principal: str) -> None:
        """Take one request's token from ``principal``'s bucket, or refuse with the wait until the next one."""
        rate = self.quotas.rate
        if principal == ANONYMOUS or rate <= 0:
            return
        burst = float(self.quotas.burst or 1)
        if self.shared is None:
            wait = self._local.take_now(principal, rate, burst)
        else:
            wait = await self.shared.take_token(principal, rate, burst)
        if wait > 0:
            raise exhausted(f"more than {rate:g} requests per second from {principal}; slow down", wait)

    # --- open streams --------------------------------------------------------------------------------------

    async def open_stream(self, principal: str) -> str | None:
        """Count a new stream of ``principal``: its hold (for ``stream`` / ``close_stream``), None when not counted."""
        cap = self.quotas.streams
        if principal == ANONYMOUS or cap <= 0:
            return None
        refusal = f"{principal} already has {cap} open streams; close one first"
        if self.shared is None:
            count = self.streams.get(principal, 0)
            if count >= cap:
                raise exhausted(refusal, 1.0)
            self.streams[principal] = count + 1
            return ""
        holder = secrets.token_hex(8)
        if await self.shared.hold(principal, [(STREAMS, holder, cap)], self.lease) is not None:
            raise exhausted(refusal, 1.0)
        self._held[(principal, STREAMS, holder)] = None
        return holder

    async def close_stream(self, principal: str, holder: str) -> None:
        """Uncount a stream counted by ``open_stream``."""
        if self.shared is None:
            left = self.streams.get(principal, 1) - 1
            if left > 0:
                self.streams[principal] = left
            else:
                self.streams.pop(principal, None)
            return
        self._held.pop((principal, STREAMS, holder), None)
        try:
            await self.shared.release(principal, [(STREAMS, holder)])
        except Exception as exc:  # the hold lapses with its lease
            log.warning("could not release a stream hold of %s: %s", principal, exc)

    def stream(self, principal: str, holder: str, items: AsyncIterator[_T]) -> AsyncIterator[_T]:
        """``items``, counted as one open stream of ``principal`` until it ends or is closed (the count is taken
        before, by ``open_stream``)."""
        return _Counted(self, principal, holder, items)

    # --- executions and queued messages --------------------------------------------------------------------

    def bind(self, engine: Any) -> None:
        """Set the engine's per-principal execution and queue caps (in this process), or, shared, count them at
        acceptance (``engine.quota_gate``, awaited by the scale-out front) and release them as the engine starts
        messages (``on_start``) and ends executions (``on_idle``)."""
        self._engine = engine
        q = self.quotas
        if self.shared is None:
            engine.max_per_principal = q.executions
            engine.max_queued_per_principal = q.queued
            return
        # Counted across replicas when accepted; a worker's own count would refuse what was already accepted.
        engine.max_per_principal = engine.max_queued_per_principal = 0
        if q.executions <= 0 and q.queued <= 0:
            return
        engine.quota_gate = self.admit
        if q.queued > 0:
            engine.on_start = self._started
        if q.executions > 0:
            previous = engine.on_idle

            def on_idle(active: Any) -> None:
                if previous is not None:
                    previous(active)
                if active.owner != ANONYMOUS:
                    self._spawn(self._release(active.owner, [(EXECUTIONS, active.task_id)]))

            engine.on_idle = on_idle

    async def admit(self, principal: str, task_id: str, message_id: str) -> Callable[[], Awaitable[None]] | None:
        """Count a message accepted for ``task_id`` (shared): its execution (none more when the task runs already)
        and its place in the queue. Returns what undoes the queue count should the acceptance fail."""
        q = self.quotas
        if principal == ANONYMOUS or self.shared is None:
            return None
        holds: list[tuple[str, str, int]] = []
        if q.executions > 0:
            holds.append((EXECUTIONS, task_id, q.executions))
        if q.queued > 0:
            holds.append((QUEUED, f"{task_id}:{message_id}", q.queued))
        refused = await self.shared.hold(principal, holds, self.lease)
        if refused == EXECUTIONS:
            raise exhausted(f"{principal} is running its limit of {q.executions} executions", 1.0)
        if refused == QUEUED:
            raise exhausted(f"{principal} already has {q.queued} messages waiting; retry later", 1.0)
        if q.queued <= 0:
            return None
        # The execution's hold is left to lapse: the task may run already (a continuation), under that hold.
        undo = [(QUEUED, f"{task_id}:{message_id}")]
        return lambda: self._release(principal, undo)

    def _started(self, active: Any, pending: Any) -> None:
        if active.owner != ANONYMOUS:
            self._spawn(self._release(active.owner, [(QUEUED, f"{active.task_id}:{pending.message.message_id}")]))

    async def _release(self, principal: str, holds: list[tuple[str, str]]) -> None:
        assert self.shared is not None
        try:
            await self.shared.release(principal, holds)
        except Exception as exc:  # the hold lapses with its lease
            log.warning("could not release a quota hold of %s: %s", principal, exc)

    def _spawn(self, coro: Awaitable[None]) -> None:
        job: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    # --- lifecycle (shared): refresh this process's holds ----------------------------------------------------

    def start(self) -> None:
        """Begin refreshing this process's shared holds (its open streams, its executions, their queued messages)."""
        if self.shared is not None and self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_loop(), name="relaykit-quota-holds")

    async def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.wait({self._refresher}, timeout=2.0)
            self._refresher = None
        if self._jobs:
            await asyncio.wait(self._jobs, timeout=2.0)

    def holds(self) -> list[tuple[str, str, str]]:
        """The ``(principal, kind, holder)`` shared holds this process keeps alive."""
        held = list(self._held)
        registry = getattr(self._engine, "registry", None) or {}
        for active in list(registry.values()):
            owner = active.owner
            if owner == ANONYMOUS:
                continue
            if active.runner is not None:
                held.append((owner, EXECUTIONS, active.task_id))
            held.extend((owner, QUEUED, f"{active.task_id}:{p.message.message_id}") for p in active.requests)
        return held

    async def _refresh_loop(self) -> None:
        assert self.shared is not None
        while True:
            await asyncio.sleep(self.lease / 3)
            held = self.holds()
            if not held:
                continue
            try:
                await self.shared.refresh(held, self.lease)
            except Exception as exc:
                log.warning("could not refresh %d quota hold(s): %s", len(held), exc)


class _Counted:
    """A stream counted against its principal until it ends or is closed (the bindings always close a stream).

    A class, not an async generator, so the writers still see ``pending()`` (the events ready now: an SSE writer
    sends a burst in one write; behind a generator it would write and flush every event)."""

    __slots__ = ("_holder", "_items", "_ledger", "_principal")

    def __init__(self, ledger: QuotaLedger, principal: str, holder: str, items: AsyncIterator[Any]) -> None:
        self._ledger: QuotaLedger | None = ledger
        self._principal = principal
        self._holder = holder
        self._items = items

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._items.__anext__()
        except Exception:  # StopAsyncIteration or a failure: the stream is over
            await self._release()
            raise

    def pending(self) -> int:
        pending = getattr(self._items, "pending", None)
        return int(pending()) if pending is not None else 0

    async def aclose(self) -> None:
        try:
            close = getattr(self._items, "aclose", None)
            if close is not None:
                await close()
        finally:
            await self._release()

    async def _release(self) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            await ledger.close_stream(self._principal, self._holder)
