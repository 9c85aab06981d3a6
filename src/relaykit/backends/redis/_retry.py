"""Connecting to Redis and riding out its outages: the client every Redis piece shares, retries with backoff, and
the A2A error for "Redis is not there"."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from relaykit._errors import ServiceUnavailableError

__all__ = ["BACKOFF", "connect_redis", "is_outage", "redact_redis", "redis_unavailable", "retrying"]

_T = TypeVar("_T")
BACKOFF = (0.05, 0.1, 0.2, 0.5, 1.0)


def _redis_module() -> Any:
    try:
        import redis.asyncio as aioredis
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("the Redis bus needs redis-py: pip install 'relaykit[redis]'") from exc
    return aioredis


def redact_redis(url: str) -> str:
    """``url`` without its password (for logs and error messages)."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user + ':***' if ':' in creds else user}@{host}"


def connect_redis(url: str) -> Any:
    """A redis-py asyncio client for ``url`` (bytes in and out; bounded connect and socket timeouts)."""
    aioredis = _redis_module()
    return aioredis.Redis.from_url(
        url,
        decode_responses=False,
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        health_check_interval=0,
        max_connections=512,
    )


def redis_unavailable(url: str, exc: BaseException) -> ServiceUnavailableError:
    """The A2A error for "Redis is not there": retryable, with a message a person can act on."""
    return ServiceUnavailableError(f"the event bus (Redis at {redact_redis(url)}) is unreachable: {exc}; retry later")


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` means Redis could not be reached (as opposed to a command error)."""
    from redis import exceptions

    return isinstance(exc, exceptions.ConnectionError | exceptions.TimeoutError | ConnectionError | OSError)


async def retrying(url: str, patience: float, job: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``job``, retrying through a Redis outage for up to ``patience`` seconds."""
    deadline = time.monotonic() + patience
    attempt = 0
    while True:
        try:
            return await job()
        except Exception as exc:
            if not is_outage(exc):
                raise
            if time.monotonic() >= deadline:
                raise redis_unavailable(url, exc) from exc
            delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
            attempt += 1
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
