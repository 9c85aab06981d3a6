"""How hard the client tries again: which errors are worth a retry, and how long to wait before each one.

``RetryPolicy`` governs unary calls, ``ResumePolicy`` the re-subscription of a dropped stream; both back off
exponentially with full jitter. ``retryable`` is the one place that decides whether an error may be retried.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from relaykit._errors import A2AConnectionError, A2AReconnectError, A2ATimeoutError, ServiceUnavailableError

__all__ = ["ResumePolicy", "RetryPolicy", "retryable"]


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of idempotent operations on connection errors, timeouts and unavailability (``retryable``)."""

    attempts: int = 3
    backoff: float = 0.2
    max_backoff: float = 5.0
    retry_send: bool = False

    def delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter for the ``attempt``-th retry (1-based)."""
        return random.uniform(0, min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class ResumePolicy:
    """How a dropped stream is resumed."""

    attempts: int = 5
    backoff: float = 0.2
    max_backoff: float = 5.0

    def delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter for the ``attempt``-th reconnection (1-based)."""
        return random.uniform(0, min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))


def retryable(exc: BaseException) -> bool:
    """Whether ``exc`` may go away on another attempt: a lost connection, a timeout, an unavailable service.

    ``ServiceUnavailableError`` is the server's UNAVAILABLE (a server draining, its database down) on every binding:
    JSON-RPC's -32000 with that reason and HTTP 200, REST's 503, gRPC's UNAVAILABLE, an SSE error event carrying it;
    and a 502/503/504 whose body is no A2A error (a proxy's page). It used to be retried only where a transport
    flagged it (REST's 503, gRPC), so a JSON-RPC client gave up at once on a server that was only restarting.
    """
    if isinstance(exc, A2AConnectionError | A2ATimeoutError) and not isinstance(exc, A2AReconnectError):
        return True
    return isinstance(exc, ServiceUnavailableError)
