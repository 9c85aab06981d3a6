"""Per-principal quotas shared by the replicas (scale-out): ``QuotaStore`` (``relaykit.server._quotas``) on Redis.

Layout (``ns`` = the namespace, ``P`` = the principal):

* ``{ns}:quota:rate:P``: a hash ``{k: tokens, t: time of the last refill}``, the principal's token bucket; it expires
  once it would be full again, so idle principals cost nothing.
* ``{ns}:quota:KIND:P``: a sorted set of holds (KIND = executions, queued, streams), member = holder (a task id, a
  ``task:message`` id, a stream id), score = when its lease ends (Redis server time, ms). Expired members are pruned
  at every check, and the key itself expires a lease after its last write: the holds of a crashed replica lapse.

Each check is one Lua script (one round trip, atomic on the server, Redis' clock for every replica).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relaykit.backends.redis._retry import is_outage, redis_unavailable

__all__ = ["RedisQuotas"]

_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

# KEYS[1]: the bucket; ARGV: rate per second, burst. Returns the seconds to wait (as a string: Lua numbers are
# truncated to integers on the way out), "0" when a token was taken.
_TAKE = (
    _NOW
    + """
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'k', 't')
local tokens, last = tonumber(b[1]) or burst, tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - last) * rate / 1000)
local wait = 0
if tokens < 1 then wait = (1 - tokens) / rate else tokens = tokens - 1 end
redis.call('HSET', KEYS[1], 'k', tostring(tokens), 't', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
return tostring(wait)
"""
)

# KEYS: one sorted set per hold; ARGV[1]: lease (ms), then holder, cap per key. All or none: returns 0 when held,
# else the 1-based index of the first hold at its cap.
_HOLD = (
    _NOW
    + """
local lease = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if not redis.call('ZSCORE', key, ARGV[2 * i]) and redis.call('ZCARD', key) >= tonumber(ARGV[2 * i + 1]) then
    return i
  end
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + lease, ARGV[2 * i])
  redis.call('PEXPIRE', key, lease)
end
return 0
"""
)

# KEYS: sorted sets; ARGV[1]: lease (ms), then one holder per key. Only holds still present are extended.
_REFRESH = (
    _NOW
    + """
local lease = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  if redis.call('ZSCORE', key, ARGV[i + 1]) then
    redis.call('ZADD', key, now + lease, ARGV[i + 1])
    redis.call('PEXPIRE', key, lease)
  end
end
return 0
"""
)

_RELEASE = """
for i, key in ipairs(KEYS) do redis.call('ZREM', key, ARGV[i]) end
return 0
"""


class RedisQuotas:
    """Per-principal counts in Redis, shared by every replica of a namespace.

    >>> # quotas = RedisQuotas(bus.client, namespace="relaykit", url=bus.url)
    >>> # await quotas.take_token("alice", 200.0, 400.0)  # 0.0: served
    """

    def __init__(self, client: Any, *, namespace: str = "relaykit", url: str = "") -> None:
        self.client = client
        self.namespace = namespace
        self.url = url
        self._take = client.register_script(_TAKE)
        self._hold = client.register_script(_HOLD)
        self._refresh = client.register_script(_REFRESH)
        self._release = client.register_script(_RELEASE)

    def key(self, kind: str, principal: str) -> str:
        """The Redis key of ``principal``'s ``kind`` (``rate`` or a hold kind)."""
        return f"{self.namespace}:quota:{kind}:{principal}"

    async def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return await script(keys=keys, args=args)
        except Exception as exc:
            if is_outage(exc):
                raise redis_unavailable(self.url, exc) from exc
            raise

    async def take_token(self, principal: str, rate: float, burst: float) -> float:
        wait = await self._run(self._take, [self.key("rate", principal)], [repr(rate), repr(burst)])
        return float(wait)

    async def hold(self, principal: str, holds: Sequence[tuple[str, str, int]], lease: float) -> str | None:
        args: list[Any] = [int(lease * 1000)]
        for _, holder, cap in holds:
            args += [holder, cap]
        refused = int(await self._run(self._hold, [self.key(kind, principal) for kind, _, _ in holds], args))
        return holds[refused - 1][0] if refused else None

    async def release(self, principal: str, holds: Sequence[tuple[str, str]]) -> None:
        await self._run(
            self._release, [self.key(kind, principal) for kind, _ in holds], [holder for _, holder in holds]
        )

    async def refresh(self, holds: Sequence[tuple[str, str, str]], lease: float) -> None:
        keys = [self.key(kind, principal) for principal, kind, _ in holds]
        await self._run(self._refresh, keys, [int(lease * 1000), *(holder for _, _, holder in holds)])
