"""Per-principal quotas: what one caller may take of a shared server (issue 14, Build 2).

The principal is the call context's ``user`` (the authenticated principal; ``anonymous`` while auth is off).
Invariants:

* ``anonymous`` is exempt: with auth off every caller is that one principal, so a per-principal quota would only be a
  second, smaller global limit; the global limits (``max_concurrent``, ``max_queued``, ``max_subscribers``, the
  HTTP connection cap) bound an anonymous server.
* Each overflow is ``ResourceExhaustedError`` (HTTP 429, gRPC RESOURCE_EXHAUSTED) whose ErrorInfo metadata carries
  ``retryAfter`` (whole seconds), which the HTTP bindings also send as ``Retry-After``.
* Requests per second: a token bucket per principal (``rate`` per second, ``burst`` deep), charged once per
  operation in ``RequestHandler.dispatch``; the table of buckets is bounded (full buckets are forgotten first).
* Concurrent executions per principal: counted by the runner (``Runner._enqueue`` / ``_run``), next to the global
  count. Queued messages per principal are bounded through it: at most ``executions`` tasks times ``max_queued``.
* Open streams per principal: counted from a stream's start to its end, however it ends.
* Push configs per task (every principal): at most ``push_configs``; the next create is refused.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

from relaykit._errors import ResourceExhaustedError
from relaykit.server._context import ANONYMOUS

__all__ = ["QuotaLedger", "Quotas", "exhausted"]

_T = TypeVar("_T")
_MAX_BUCKETS = 10_000  # principals tracked at once; beyond, the full (idle) buckets are dropped


@dataclass(frozen=True, slots=True)
class Quotas:
    """Per-principal limits; ``relaykit serve --quota-*`` flags change them, 0 turns one off."""

    executions: int = 100
    streams: int = 100
    rate: float = 200.0
    burst: int = 400
    push_configs: int = 500


def exhausted(message: str, retry_after: float) -> ResourceExhaustedError:
    """The 429 of a quota, saying when to retry (whole seconds, at least 1)."""
    return ResourceExhaustedError(message, retry_after=str(max(1, math.ceil(retry_after))))


class QuotaLedger:
    """The live counts behind ``Quotas`` for one process."""

    def __init__(self, quotas: Quotas | None = None) -> None:
        self.quotas = quotas if quotas is not None else Quotas()
        self._buckets: dict[str, tuple[float, float]] = {}  # principal -> (tokens, time of last refill)
        self.streams: dict[str, int] = {}

    def charge(self, principal: str) -> None:
        """Take one request's token from ``principal``'s bucket, or refuse with the wait until the next one."""
        rate = self.quotas.rate
        if principal == ANONYMOUS or rate <= 0:
            return
        now = time.monotonic()
        burst = float(self.quotas.burst or 1)
        tokens, then = self._buckets.get(principal, (burst, now))
        tokens = min(burst, tokens + (now - then) * rate)
        if tokens < 1.0:
            self._buckets[principal] = (tokens, now)
            raise exhausted(
                f"more than {rate:g} requests per second from {principal}; slow down", (1.0 - tokens) / rate
            )
        if len(self._buckets) >= _MAX_BUCKETS and principal not in self._buckets:
            self._forget_idle(now)
        self._buckets[principal] = (tokens - 1.0, now)

    def _forget_idle(self, now: float) -> None:
        rate, burst = self.quotas.rate, float(self.quotas.burst or 1)
        idle = [p for p, (tokens, then) in self._buckets.items() if tokens + (now - then) * rate >= burst]
        for principal in idle:
            del self._buckets[principal]

    async def stream(self, principal: str, items: AsyncIterator[_T]) -> AsyncIterator[_T]:
        """``items``, counted as one open stream of ``principal`` until it ends (the count is taken before)."""
        try:
            async for item in items:
                yield item
        finally:
            self.close_stream(principal)
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()

    def close_stream(self, principal: str) -> None:
        """Uncount a stream counted by ``open_stream`` that never started."""
        left = self.streams.get(principal, 1) - 1
        if left > 0:
            self.streams[principal] = left
        else:
            self.streams.pop(principal, None)

    def open_stream(self, principal: str) -> bool:
        """Count a new stream of ``principal``; False (nothing counted) for an exempt principal."""
        cap = self.quotas.streams
        if principal == ANONYMOUS or cap <= 0:
            return False
        count = self.streams.get(principal, 0)
        if count >= cap:
            raise exhausted(f"{principal} already has {cap} open streams; close one first", 1.0)
        self.streams[principal] = count + 1
        return True
