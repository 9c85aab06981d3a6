"""The Redis engine (scale-out): the event bus (``_bus``, ``RedisEventBus``) and the work queue (``_queue``,
``RedisWorkQueue``), both in Redis Streams shared by every replica, and the per-principal quotas they share
(``_quotas``, ``RedisQuotas``).

redis-py is imported only when a client connects (``connect_redis``), not with this package.
"""

from relaykit.backends.redis._bus import RedisEventBus
from relaykit.backends.redis._queue import RedisWorkQueue, WorkItem
from relaykit.backends.redis._quotas import RedisQuotas
from relaykit.backends.redis._retry import connect_redis, redact_redis, redis_unavailable

__all__ = [
    "RedisEventBus",
    "RedisQuotas",
    "RedisWorkQueue",
    "WorkItem",
    "connect_redis",
    "redact_redis",
    "redis_unavailable",
]
