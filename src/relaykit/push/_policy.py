"""How hard the push sender tries: the request timeout, retries with backoff and jitter, and when to give up.

``PushSender`` asks its ``DeliveryPolicy`` how long to wait before the next attempt and when an entry becomes a dead
letter; the policy is plain configuration (``create_app(push_policy=...)``, ``--push-*`` options).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["DeliveryPolicy"]


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """How hard the sender tries.

    ``timeout``: seconds for one whole request. A failed attempt ``n`` (1-based) waits
    ``min(max_backoff, backoff * 2**(n-1))`` seconds, minus up to ``jitter`` of it at random (and at least a
    ``Retry-After`` the receiver asked for, up to ``max_backoff``). An entry is given up on (dead letter) after
    ``max_attempts`` attempts, or once it is ``max_age`` seconds old. ``concurrency``: requests in flight at once;
    ``per_destination``: of those, to one ``host:port`` of a webhook URL at most; ``per_address``: to one
    ``address:port`` (the address the webhook's host resolves to) at most, whatever the names pointing at it (so a
    receiver that never answers holds only its own share, and many names on one address cannot take every slot, while
    one name behind a shared CDN or load balancer address cannot take that address's share from the other names
    behind it); ``per_owner``: to the webhooks of one (tenant, owner) at most (``0``: no such bound; everything is one
    owner on a server without authentication) (``relaykit.push._slots``).
    A config is suspended after ``suspend_after`` failed deliveries in a row spanning at least ``suspend_seconds``
    (``relaykit.push._suspend``; ``suspend_after=0`` never suspends).

    >>> DeliveryPolicy(backoff=0.05, max_attempts=3).max_attempts
    3
    """

    timeout: float = 10.0
    max_attempts: int = 8
    backoff: float = 1.0
    max_backoff: float = 300.0
    jitter: float = 0.5
    max_age: float = 86400.0
    concurrency: int = 64
    per_destination: int = 8
    per_address: int = 32  # half of ``concurrency``'s default: one address (a CDN's, a tarpit's) never takes it all
    per_owner: int = 0
    suspend_after: int = 10
    suspend_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.max_attempts < 1 or self.backoff < 0 or self.concurrency < 1:
            raise ValueError("DeliveryPolicy: timeout > 0, max_attempts >= 1, backoff >= 0, concurrency >= 1")
        if self.per_destination < 1 or self.per_address < 1 or self.per_owner < 0:
            raise ValueError(
                "DeliveryPolicy: per_destination >= 1, per_address >= 1, per_owner >= 0 (0: no bound per owner)"
            )
        if not 0 <= self.jitter <= 1:
            raise ValueError("DeliveryPolicy: jitter is a fraction between 0 and 1")

    def delay(self, attempts: int, retry_after: float | None = None) -> float:
        """Seconds to wait after ``attempts`` failed attempts."""
        base = min(self.max_backoff, self.backoff * 2.0 ** max(0, attempts - 1))
        delay = base * (1.0 - self.jitter * random.random())
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay
