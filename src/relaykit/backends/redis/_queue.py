"""The Redis work queue (scale-out): accepted messages wait in a Redis Stream read by a consumer group.

Layout (``ns`` = the namespace):

* ``{ns}:work``: one entry per accepted message (fields are the ``WorkItem``); the consumer group ``workers`` hands
  each entry to one worker. A worker acknowledges an entry once it has claimed the task and its engine has taken
  the message; from then on the task's claim (in the store) is the lease. An entry whose worker died before that is
  re-delivered to another worker after ``reclaim_after`` seconds (``XAUTOCLAIM``).
* ``{ns}:cancel:{worker}``: a pub/sub channel per worker; a CancelTask on any replica asks the task's claimant there.
* ``{ns}:idem:[tenant, owner, kind, scope, messageId]``: idempotency keys (SendMessage with a repeated ``messageId``),
  expiring after the window; ``kind`` is ``t`` (a continuation: ``scope`` is the task it names) or ``c`` (a new
  message: its context id, maybe empty).

After a Redis restart the stream and group are recreated on the next read; entries lost with it are recovered from
the store (unstarted SUBMITTED tasks) or re-sent by the replica still waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from relaykit.backends.redis._hot import HotLine
from relaykit.backends.redis._retry import connect_redis, is_outage, redis_unavailable, retrying

__all__ = ["REMEMBER_PATIENCE", "RedisWorkQueue", "WorkItem"]

REMEMBER_PATIENCE = 2.0  # seconds the idempotency check rides out a Redis outage before answering 503

_GROUP = "workers"


@dataclass(slots=True)
class WorkItem:
    """One accepted message for a worker."""

    task_id: str
    tenant: str
    owner: str
    request: bytes  # the SendMessageRequest, ProtoJSON
    call: bytes  # the CallContext as JSON (user, tenant, extensions, forwarded headers)
    fresh: bool  # the message starts the task (the accepting replica stored it SUBMITTED)
    entry_id: bytes = b""
    trace: bytes = b""  # the accepting request's trace context (W3C headers as JSON), when tracing is on

    def fields(self) -> dict[bytes, bytes]:
        fields = self._fields()
        if self.trace:
            fields[b"x"] = self.trace
        return fields

    def _fields(self) -> dict[bytes, bytes]:
        return {
            b"t": self.task_id.encode(),
            b"n": self.tenant.encode(),
            b"o": self.owner.encode(),
            b"r": self.request,
            b"c": self.call,
            b"f": b"1" if self.fresh else b"0",
        }

    @classmethod
    def from_fields(cls, entry_id: bytes, fields: dict[bytes, bytes]) -> WorkItem:
        return cls(
            task_id=fields[b"t"].decode(),
            tenant=fields.get(b"n", b"").decode(),
            owner=fields.get(b"o", b"anonymous").decode(),
            request=fields[b"r"],
            call=fields.get(b"c", b"{}"),
            fresh=fields.get(b"f") == b"1",
            entry_id=entry_id,
            trace=fields.get(b"x", b""),
        )


class RedisWorkQueue:
    """Work queue, cancel signals and idempotency keys on Redis.

    >>> queue = RedisWorkQueue("redis://127.0.0.1:6379/0", namespace="demo")
    >>> queue.stream
    'demo:work'
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "relaykit",
        client: Any = None,
        hot: HotLine | None = None,
        maxlen: int = 100_000,
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.stream = f"{namespace}:work"
        self.maxlen = maxlen
        self._client = client
        self._own_client = client is None
        self._hot = hot  # the event bus's hot line when shared (``client`` is then the bus's too)
        self._own_hot = hot is None
        self._group_ready = False
        self._listening = True

    def stop_listening(self) -> None:
        """End the pub/sub listeners at their next turn (a swallowed cancellation must not keep them going)."""
        self._listening = False

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect_redis(self.url)
        return self._client

    @property
    def hot(self) -> HotLine:
        if self._hot is None:
            self._hot = HotLine(self.client)
        return self._hot

    async def close(self) -> None:
        if self._hot is not None and self._own_hot:
            await self._hot.close()
            self._hot = None
        if self._client is not None and self._own_client:
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None

    async def _call(self, job: Any) -> Any:
        try:
            return await job
        except Exception as exc:
            if is_outage(exc):
                raise redis_unavailable(self.url, exc) from exc
            raise

    # --- the queue ---------------------------------------------------------------------------------------------

    async def ensure_group(self) -> None:
        try:
            await self._call(self.client.xgroup_create(self.stream, _GROUP, id="0", mkstream=True))
        except Exception as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def backlog(self) -> tuple[int, float]:
        """``(entries no worker has taken yet, age in seconds of the oldest of them)`` (the queue metrics)."""
        depth = 0
        last = b"0-0"
        for group in await self._call(self.client.xinfo_groups(self.stream)):
            name = group.get("name")
            if name in (_GROUP, _GROUP.encode()):
                depth = int(group.get("lag") or 0)
                last = group.get("last-delivered-id") or last
        if not depth:
            return 0, 0.0
        marker = last.decode() if isinstance(last, bytes) else str(last)
        entries = await self._call(self.client.xrange(self.stream, min="(" + marker, count=1))
        if not entries:
            return depth, 0.0
        entry_id = entries[0][0]
        millis = int((entry_id.decode() if isinstance(entry_id, bytes) else entry_id).split("-", 1)[0])
        return depth, max(0.0, time.time() - millis / 1000)

    async def enqueue(self, item: WorkItem) -> None:
        """Add an accepted message (sets ``item.entry_id``); ``ServiceUnavailableError`` when Redis is unreachable."""
        item.entry_id = await self._call(
            self.client.xadd(self.stream, item.fields(), maxlen=self.maxlen, approximate=True)
        )

    async def waiting(self, item: WorkItem) -> bool:
        """Whether the item's entry is still in the queue (not yet taken, or taken and not yet acknowledged)."""
        return bool(await self._call(self.client.xrange(self.stream, min=item.entry_id, max=item.entry_id)))

    async def read(self, worker: str, count: int, block: float) -> list[WorkItem]:
        """Up to ``count`` new entries for ``worker``, waiting up to ``block`` seconds."""
        if not self._group_ready:
            await self.ensure_group()
        try:
            response = await self._call(
                self.client.xreadgroup(_GROUP, worker, {self.stream: ">"}, count=count, block=int(block * 1000))
            )
        except Exception as exc:
            if "NOGROUP" in str(exc):
                # Redis lost the group (a restart without persistence): make it again.
                self._group_ready = False
                return []
            raise
        return [WorkItem.from_fields(entry_id, fields) for _, entries in response or () for entry_id, fields in entries]

    async def ack(self, item: WorkItem) -> None:
        """The entry is taken care of: remove it."""
        pipe = self.client.pipeline(transaction=False)
        pipe.xack(self.stream, _GROUP, item.entry_id)
        pipe.xdel(self.stream, item.entry_id)
        await self._call(pipe.execute())

    async def reclaim(self, worker: str, idle: float, count: int = 100) -> list[WorkItem]:
        """Entries delivered to some worker more than ``idle`` seconds ago and never acknowledged (it died)."""
        if not self._group_ready:
            await self.ensure_group()
        try:
            response = await self._call(
                self.client.xautoclaim(self.stream, _GROUP, worker, min_idle_time=int(idle * 1000), count=count)
            )
        except Exception as exc:
            if "NOGROUP" in str(exc):
                self._group_ready = False
                return []
            raise
        entries = response[1] if response else []
        return [WorkItem.from_fields(entry_id, fields) for entry_id, fields in entries if fields]

    # --- cancel signals ------------------------------------------------------------------------------------------

    def _cancel_channel(self, worker: str) -> str:
        return f"{self.namespace}:cancel:{worker}"

    async def signal_cancel(self, worker: str, task_id: str, tenant: str, owner: str) -> None:
        payload = json.dumps({"t": task_id, "n": tenant, "o": owner})
        await self._call(self.client.publish(self._cancel_channel(worker), payload))

    async def cancel_signals(self, worker: str) -> AsyncIterator[tuple[str, str, str]]:
        """``(task_id, tenant, owner)`` of every cancel asked of ``worker``; reconnects through outages."""
        async for data in self._listen(self._cancel_channel(worker)):
            if data is not None:
                yield data["t"], data.get("n", ""), data.get("o", "anonymous")

    def _config_channel(self) -> str:
        return f"{self.namespace}:push-configs"

    async def announce_config_change(self, tenant: str, owner: str, task_id: str) -> None:
        """Tell every replica that a task's push configs changed (they drop their cached copy)."""
        payload = json.dumps({"t": task_id, "n": tenant, "o": owner})
        await self._call(self.client.publish(self._config_channel(), payload))

    async def config_changes(self) -> AsyncIterator[tuple[str, str, str] | None]:
        """``(tenant, owner, task_id)`` of every push-config change announced; ``None`` after a (re)connect, when
        announcements may have been missed."""
        async for data in self._listen(self._config_channel()):
            yield None if data is None else (data.get("n", ""), data.get("o", "anonymous"), data["t"])

    async def _listen(self, channel: str) -> AsyncIterator[dict[str, Any] | None]:
        """The JSON messages of a pub/sub channel; ``None`` at each (re)subscription. Reconnects through outages."""
        while self._listening:
            pubsub = self.client.pubsub()
            try:
                await pubsub.subscribe(channel)
                yield None
                while self._listening:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                    if message is None or message.get("type") != "message":
                        continue
                    try:
                        data = json.loads(message["data"])
                    except (ValueError, TypeError):
                        continue
                    if isinstance(data, dict) and "t" in data:
                        yield data
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not is_outage(exc):
                    raise
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    # --- idempotency keys ------------------------------------------------------------------------------------------

    def idem_key(self, tenant: str, owner: str, task_id: str, context_id: str, message_id: str) -> str:
        """The key of a message: a continuation's by the task it names, a new message's by its context. The kind is
        part of the key: a client may name one id as a task and as a context, and a continuation and a new message
        are never repeats of each other (the value of one names a task the other may not see, or not its own).

        >>> RedisWorkQueue("redis://127.0.0.1:6379/0").idem_key("", "bob", "T", "", "m1")
        'relaykit:idem:["","bob","t","T","m1"]'
        """
        kind = "t" if task_id else "c"
        scope = task_id or context_id
        return f"{self.namespace}:idem:{json.dumps([tenant, owner, kind, scope, message_id], separators=(',', ':'))}"

    async def remember(self, key: str, value: str, window: float) -> str | None:
        """Set ``key`` to ``value`` unless it exists; returns the existing value (a repeat) or None (first)."""

        async def job() -> Any:
            # On the hot path's connection, in one pipeline with the other hot commands of this loop pass.
            *_, result = await self.hot.run(
                (("MULTI",), ("SET", key, value, "NX", "PX", int(window * 1000)), ("GET", key), ("EXEC",))
            )
            if isinstance(result, Exception):
                raise result
            return result

        # Every new message passes here first, so a connection that went stale in a Redis restart would fail the
        # first message after it: retried through a short outage instead. A retry can find its own write (the
        # reply of the first attempt was lost): ``value`` names a fresh task, so that is still a first.
        created, current = await retrying(self.url, REMEMBER_PATIENCE, job)
        found = current.decode() if current is not None else None
        if created or found == value:
            return None
        return found

    async def recall(self, key: str) -> str | None:
        """What ``key`` holds now (None once dropped or expired)."""
        value = await self._call(self.client.get(key))
        return value.decode() if isinstance(value, bytes) else value

    async def update(self, key: str, value: str, window: float) -> None:
        await self._call(self.client.set(key, value, xx=True, px=int(window * 1000)))

    async def drop(self, key: str) -> None:
        with contextlib.suppress(Exception):
            await self.client.delete(key)
