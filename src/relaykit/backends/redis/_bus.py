"""The Redis event bus: every task's events in a Redis Stream, readable from any replica.

Layout (``ns`` = the namespace, default ``relaykit``):

* ``{ns}:ev:{task_id}``: the task's events. Entry ids are ``{seq}-0``, ``seq`` being the per-task sequence number
  that is also the SSE ``id:`` (CONTRACT "SSE and resume": one sequence across replicas). Fields: ``d`` the encoded
  StreamResponse, ``x`` the message id of the execution that produced it, or ``e`` (instead of ``d``) an error
  that ended an execution without a task event (the caller waiting on another replica raises it), and ``p`` on an
  event for that execution's caller alone (``publish_private``: readers of no execution skip it; a replica that
  predates the field delivers it as any event, rather than fail on an entry it does not know). The stream is
  capped (``maxlen``, approximate) and expires ``ttl`` seconds after its last event (``live_ttl`` while the task is
  not terminal).
* Explicit ids make appends fenced: a writer that is not the task's current runner appends an id at or below the
  stream's top and gets ``ConflictError`` instead of interleaving its events.

One reader coroutine per process follows every stream some local tap watches with a single blocking ``XREAD``
(woken through a private wake stream when a new stream is added), and fans the entries out to the taps. The streams
of tasks this process runs itself (``run_here``) are left out: their events reach the local taps as they are
published. A tap that is handed an entry out of sequence (entries trimmed, or the stream lost with a Redis restart)
is cut off and its reader refills it from the stream, or restarts from a Task snapshot (``Tap``'s rules, shared with
the local bus).

Appends are batched (``_appends``: one pipeline per loop pass, on the hot path's own connection, ``_hot``). When
Redis is unreachable, appends are retried with backoff for ``outage_timeout`` seconds (the agent waits: no event is
dropped), then fail with ``ServiceUnavailableError``; opening and replaying a stream give up after ``read_patience``
seconds (the client gets 503 and comes back); the reader reconnects by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
from collections import OrderedDict
from typing import Any

from relaykit._errors import A2AError, error_from_jsonrpc
from relaykit._types import stream_json
from relaykit.backends._bus import Item, Tap
from relaykit.backends.redis._appends import Appends
from relaykit.backends.redis._hot import HotLine
from relaykit.backends.redis._retry import (
    BACKOFF,
    connect_redis,
    is_outage,
    redact_redis,
    redis_unavailable,
    retrying,
)

__all__ = ["RedisEventBus"]

log = logging.getLogger("relaykit.redis")


def _seq_of(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[0])


class _Watch:
    __slots__ = ("cursor", "taps")

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor
        self.taps: set[Tap] = set()


class RedisEventBus:
    """Task events in Redis Streams, shared by every replica.

    >>> bus = RedisEventBus("redis://127.0.0.1:6379/0", namespace="demo")
    >>> bus.key("t1")
    'demo:ev:t1'
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "relaykit",
        maxlen: int = 10_000,
        ttl: float = 3600.0,
        live_ttl: float = 86_400.0,
        tap_limit: int = 10_000,
        outage_timeout: float = 30.0,
        read_patience: float = 5.0,
        block: float = 5.0,
        client: Any = None,
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.maxlen = maxlen
        self.ttl = ttl
        self.live_ttl = live_ttl
        self.tap_limit = tap_limit
        self.outage_timeout = outage_timeout
        # Readers (opening a stream, replaying) answer 503 sooner than the writer gives up: a client can come back.
        self.read_patience = read_patience
        self.block = block
        self._client = client
        self._own_client = client is None
        self._seq: OrderedDict[str, int] = OrderedDict()
        self._watch: dict[str, _Watch] = {}
        self._reader: asyncio.Task[None] | None = None
        self._wake_key = f"{namespace}:wake:{secrets.token_hex(8)}"
        self._wake_id = b"0-0"
        self._blocked = False
        self._woken = False
        self._changed = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self._appends = Appends(self)
        self._hot: HotLine | None = None
        # Tasks this process runs (holding their claim): every event of theirs is published here and reaches the
        # local taps at once, so the reader does not read their streams back. ``_known``: those whose log top this
        # process knows (it wrote the task's first event, or read the top once since it took the task).
        self._here: set[str] = set()
        self._known: set[str] = set()
        self._closing = False
        self.woke = False
        self.connected = False

    def key(self, task_id: str) -> str:
        """The Redis key of a task's event stream."""
        return f"{self.namespace}:ev:{task_id}"

    @property
    def client(self) -> Any:
        """The redis-py client (shared with the work queue)."""
        if self._client is None:
            self._client = connect_redis(self.url)
        return self._client

    @property
    def hot(self) -> HotLine:
        """The hot path's own connection (appends; shared with the work queue's idempotency keys)."""
        if self._hot is None:
            self._hot = HotLine(self.client)
        return self._hot

    # --- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self.client.ping()
            self.connected = True
            await self._check_persistence()
        except Exception as exc:
            if not is_outage(exc):
                raise
            # Start anyway: readiness says "not ready" and everything reconnects when Redis is back.
            log.warning("Redis at %s is unreachable (%s); will keep trying", redact_redis(self.url), exc)
        self._reader = asyncio.create_task(self._read_loop(), name="relaykit-redis-reader")

    async def _check_persistence(self) -> None:
        """Say so when Redis would lose events a client has seen if it crashed: the README's Durability section
        requires ``appendonly yes`` with ``appendfsync always`` (``everysec``: up to a second of events on a crash).
        Managed services that refuse CONFIG are left alone."""
        try:
            config = await self.client.config_get("append*")
        except Exception:
            return
        aof = str(config.get("appendonly", "")).lower()
        fsync = str(config.get("appendfsync", "")).lower()
        if aof != "yes":
            log.warning(
                "Redis at %s runs without the AOF (appendonly %s): a Redis restart loses the events not yet "
                "checkpointed, and resuming clients get a snapshot; set appendonly yes, appendfsync always",
                redact_redis(self.url),
                aof or "?",
            )
        elif fsync != "always":
            log.info(
                "Redis at %s syncs its AOF %s: a Redis crash may lose up to a second of events (a clean restart "
                "loses none); appendfsync always loses none",
                redact_redis(self.url),
                fsync,
            )

    async def close(self) -> None:
        await self._appends.drain(2.0)
        if self._hot is not None:
            await self._hot.close()
        self._closing = True
        self._changed.set()
        if self._reader is not None:
            # redis-py may finish a blocking read normally although its task is being cancelled (it swallows the
            # CancelledError): the loop then sees ``_closing`` and ends. Bounded either way.
            self._reader.cancel()
            if not (await asyncio.wait({self._reader}, timeout=0.2))[0] and self._client is not None:
                # Still inside its blocking read: cut the connections under it.
                with contextlib.suppress(Exception):
                    await self._client.connection_pool.disconnect()
                await asyncio.wait({self._reader}, timeout=1.0)
            self._reader = None
        for watch in self._watch.values():
            for tap in watch.taps:
                tap.finish()
        self._watch.clear()
        if self._client is not None and self._own_client:
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None

    async def ping(self) -> None:
        try:
            await asyncio.wait_for(self.client.ping(), 2.0)
        except Exception as exc:
            raise redis_unavailable(self.url, exc) from exc

    # --- writing -------------------------------------------------------------------------------------------

    def last_seq(self, task_id: str, default: int = 0) -> int:
        return self._seq.get(task_id, default)

    def _set_seq(self, task_id: str, seq: int) -> None:
        self._seq[task_id] = seq
        self._seq.move_to_end(task_id)
        if len(self._seq) > 100_000:
            self._seq.popitem(last=False)

    async def _top(self, key: str) -> int:
        entries = await self.client.xrevrange(key, count=1)
        return _seq_of(entries[0][0]) if entries else 0

    def run_here(self, task_id: str, *, new: bool = False) -> None:
        """This process runs ``task_id`` now (it holds the task's claim): its events reach this process's taps as
        they are published, not read back from Redis. ``new``: a task this process just created, whose log is
        empty."""
        self._here.add(task_id)
        if new:
            self._set_seq(task_id, 0)
            self._known.add(task_id)

    def run_elsewhere(self, task_id: str) -> None:
        """``task_id`` no longer runs here: its local taps (if any) are followed from Redis again."""
        self._here.discard(task_id)
        self._known.discard(task_id)
        if task_id in self._watch:
            self._wake()

    async def prepare(self, task_id: str, stored_seq: int) -> int:
        await self._appends.settle(task_id)
        self._appends.forget(task_id)  # a new execution: an earlier one's failed append is its past
        if task_id in self._known:
            # Run here since its log began, or since the top was last read: nobody else appends (claims fence them).
            seq = max(self._seq.get(task_id, 0), stored_seq)
            self._set_seq(task_id, seq)
            return seq
        top = await retrying(self.url, self.outage_timeout, lambda: self._top(self.key(task_id)))
        seq = max(top, stored_seq)
        self._set_seq(task_id, seq)
        if task_id in self._here:
            self._known.add(task_id)
        return seq

    async def publish(
        self,
        task_id: str,
        event: Any,
        data: bytes | None,
        *,
        terminal: bool = False,
        base_seq: int = 0,
        execution: str = "",
        wait: bool = True,
    ) -> int:
        if data is None:
            data = stream_json(event)
        seq = max(self._seq.get(task_id, 0), base_seq) + 1
        fields: dict[bytes, bytes | str] = {b"d": data}
        if execution:
            fields[b"x"] = execution
        deliver = functools.partial(self._deliver, task_id, seq, event, data, execution, False)
        await self._add(task_id, seq, fields, terminal, deliver, wait)
        return seq

    async def publish_private(
        self, task_id: str, event: Any, data: bytes, *, execution: str, base_seq: int = 0, wait: bool = True
    ) -> int:
        """Append one event for the caller of ``execution`` alone, on whatever replica it waits (see
        ``EventBus.publish_private``)."""
        seq = max(self._seq.get(task_id, 0), base_seq) + 1
        deliver = functools.partial(self._deliver, task_id, seq, event, data, execution, True)
        await self._add(task_id, seq, {b"d": data, b"x": execution, b"p": b"1"}, False, deliver, wait)
        return seq

    async def publish_error(self, task_id: str, execution: str, error: A2AError, *, base_seq: int = 0) -> int:
        """Tell the caller of ``execution`` (on whatever replica) that it ended with ``error`` and no task event."""
        seq = max(self._seq.get(task_id, 0), base_seq) + 1
        body = json.dumps(error.to_jsonrpc()).encode()
        deliver = functools.partial(self._deliver, task_id, seq, error, b"", execution, True)
        await self._add(task_id, seq, {b"e": body, b"x": execution}, False, deliver, True)
        return seq

    async def _add(
        self, task_id: str, seq: int, fields: dict[bytes, bytes | str], terminal: bool, deliver: Any, wait: bool
    ) -> None:
        self._set_seq(task_id, seq)  # taken now: the next publish numbers after it, whether or not this one waits
        try:
            await self._appends.add(task_id, self.key(task_id), seq, fields, terminal, deliver, wait)
        except BaseException:
            if self._seq.get(task_id) == seq:
                self._set_seq(task_id, seq - 1)  # not in the log: the next publish may take the number again
            raise

    def _deliver(self, task_id: str, seq: int, event: Any, data: bytes, execution: str, private: bool) -> None:
        """Hand a just-published event to this process's taps. ``private``: for the caller of ``execution`` alone
        (an error that ended it, or its opening snapshot); ``event`` is then the error, if it is one."""
        self.woke = False
        watch = self._watch.get(task_id)
        if watch is None:
            return
        if seq > watch.cursor:
            watch.cursor = seq
        item: Item = (seq, event, data)
        for tap in watch.taps:
            if private and not tap.execution:
                tap.skip(seq)  # for its execution's caller only
            elif tap.execution and execution and execution != tap.execution:
                tap.skip(seq)
            else:
                self.woke |= tap.waiting
                tap.push(item)

    # --- reading -------------------------------------------------------------------------------------------

    async def open(
        self, task_id: str, *, after: int | None = None, base_seq: int = 0, execution: str = ""
    ) -> tuple[Tap, bool]:
        tap = Tap(task_id, self.tap_limit)
        tap.execution = execution
        gap = False
        if after is None:
            if task_id in self._known:
                top = self._seq.get(task_id, 0)
            else:
                top = await retrying(self.url, self.read_patience, lambda: self._top(self.key(task_id)))
            tap.fill((), max(top, base_seq, self._seq.get(task_id, 0)))
        else:
            gap = not await self._replay(tap, after, max(base_seq, self._seq.get(task_id, 0)), lenient=False)
            if gap:
                tap.fill((), after)
        self._watch_tap(tap)
        return tap, gap

    async def reopen(self, tap: Tap, *, lenient: bool = False) -> bool:
        ok = await self._replay(tap, tap.last_seq, self._seq.get(tap.task_id, 0), lenient=lenient)
        self._watch_tap(tap)
        return ok

    async def _replay(self, tap: Tap, after: int, known_top: int, *, lenient: bool) -> bool:
        """Fill ``tap`` with the stream's entries after ``after``; False when the stream no longer reaches back."""
        key = self.key(tap.task_id)

        async def job() -> tuple[list[Any], list[Any]]:
            pipe = self.client.pipeline(transaction=False)
            pipe.xrange(key, min=f"{after + 1}-0")
            pipe.xrevrange(key, count=1)
            entries, top = await pipe.execute()
            return entries, top

        entries, top_entries = await retrying(self.url, self.read_patience, job)
        top = max(_seq_of(top_entries[0][0]) if top_entries else 0, known_top)
        if after < 0 or after > top:
            if not lenient:
                return False
            after = min(max(after, 0), top)
        if entries and _seq_of(entries[0][0]) != after + 1 and not lenient:
            return False
        tap.overflowed = False
        items: list[Item] = []
        head = after
        if entries:
            head = _seq_of(entries[0][0]) - 1
        for entry_id, fields in entries:
            seq = _seq_of(entry_id)
            item = self._item(tap, seq, fields)
            if item is not None:
                items.append(item)
        last = _seq_of(entries[-1][0]) if entries else head
        tap.fill(items, head, top=last)
        tap.last_seq = after
        return True

    def _item(self, tap: Tap, seq: int, fields: dict[bytes, bytes]) -> Item | None:
        """The tap's item for one stream entry, or None when the entry is not for this tap."""
        execution = fields.get(b"x", b"").decode()
        # Events of no execution (a lost worker's task failed, an idle task canceled) concern every waiter.
        if tap.execution and execution and execution != tap.execution:
            return None
        error = fields.get(b"e")
        if error is not None:
            if not tap.execution:
                return None
            return (seq, error_from_jsonrpc(json.loads(error)), b"")
        if not tap.execution and b"p" in fields:
            return None  # for its execution's caller alone (``publish_private``)
        # The event object is decoded by the reader that needs it (Tap.get), not here.
        return (seq, None, fields[b"d"])

    def _watch_tap(self, tap: Tap) -> None:
        watch = self._watch.get(tap.task_id)
        if watch is None:
            watch = self._watch[tap.task_id] = _Watch(tap.head)
            if tap.task_id not in self._here:
                self._wake()
        watch.taps.add(tap)

    def _wake(self) -> None:
        self._changed.set()
        if self._blocked and not self._woken and self.connected:
            self._woken = True
            task = asyncio.create_task(self._send_wake())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _send_wake(self) -> None:
        with contextlib.suppress(Exception):
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(self._wake_key, {b"w": b"1"}, maxlen=1, approximate=False)
            pipe.expire(self._wake_key, 3600)
            await pipe.execute()

    async def _read_loop(self) -> None:
        attempt = 0
        while not self._closing:
            followed = [task_id for task_id in self._watch if task_id not in self._here]
            if not followed:
                self._changed.clear()
                await self._changed.wait()
                continue
            streams: dict[str, bytes | str] = {self._wake_key: self._wake_id}
            keyed: dict[bytes, str] = {}
            for task_id in followed:
                watch = self._watch[task_id]
                key = self.key(task_id)
                keyed[key.encode()] = task_id
                streams[key] = f"{watch.cursor}-0"
            self._changed.clear()
            self._blocked = True
            self._woken = False
            try:
                response = await self.client.xread(streams, count=1000, block=int(self.block * 1000))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._blocked = False
                if not is_outage(exc):
                    log.exception("Redis event reader failed; retrying")
                elif self.connected:
                    log.warning("Redis at %s is unreachable (%s); reconnecting", redact_redis(self.url), exc)
                self.connected = False
                await asyncio.sleep(BACKOFF[min(attempt, len(BACKOFF) - 1)])
                attempt += 1
                continue
            self._blocked = False
            if not self.connected:
                log.warning("Redis at %s is reachable again", redact_redis(self.url))
            self.connected = True
            attempt = 0
            for key, entries in response or ():
                stream_of = keyed.get(key)
                if stream_of is None:
                    if entries:
                        self._wake_id = entries[-1][0]
                    continue
                found = self._watch.get(stream_of)
                if found is None:
                    continue
                watch = found
                for entry_id, fields in entries:
                    seq = _seq_of(entry_id)
                    if seq <= watch.cursor:
                        continue
                    watch.cursor = seq
                    for tap in list(watch.taps):
                        item = self._item(tap, seq, fields)
                        if item is None:
                            tap.skip(seq)
                        else:
                            tap.push(item)

    def close_tap(self, tap: Tap) -> None:
        tap.finish()
        watch = self._watch.get(tap.task_id)
        if watch is None:
            return
        watch.taps.discard(tap)
        if not watch.taps:
            del self._watch[tap.task_id]

    def forget(self, task_id: str) -> None:
        self._seq.pop(task_id, None)
        self._appends.forget(task_id)
        self._known.discard(task_id)

    def tap_count(self, task_id: str | None = None) -> int:
        if task_id is not None:
            watch = self._watch.get(task_id)
            return len(watch.taps) if watch is not None else 0
        return sum(len(watch.taps) for watch in self._watch.values())

    def log_count(self) -> int:
        """Streams followed by this process."""
        return len(self._watch)
