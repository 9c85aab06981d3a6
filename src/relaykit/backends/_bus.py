"""The event-bus interface (``EventBus``) and the bounded subscriber taps every bus hands out.

Rules every bus keeps (CONTRACT "SSE and resume"):

* every event of a task gets the next number of one per-task sequence; SSE ``id:`` is that number;
* a tap opened with ``after=X`` first receives exactly the retained events with seq > X, then every new event;
  if X is older than the ring (or unknown), ``open`` reports a gap and the caller sends a Task snapshot first;
* a tap holds at most ``tap_limit`` undelivered items and about ``TAP_BYTES`` of them (a stalled reader of big
  events must not pin memory by the event count alone); a full tap is cut off (never blocks the publisher) and its
  reader resumes from the ring with ``reopen``; so is a tap that is handed an event out of sequence (a bus fed from
  outside the process can skip: the reader refills the gap from the log the same way), while an event it already has
  is dropped (two feeds may carry the same event);
* an event published for one execution alone (``publish_private``: a continuation's opening Task snapshot, which a
  send's own stream starts with but which is no event of the task, spec §3.1.6) takes the next number and reaches only
  the taps opened for that execution; every other tap counts it as seen, and no replay gives it to them.

The buses: ``memory.LocalEventBus`` (one process), ``redis.RedisEventBus`` (shared by replicas).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Protocol, runtime_checkable

from relaykit._types import StreamResponse, stream_json

__all__ = ["END", "TAP_BYTES", "EventBus", "Tap", "TapOverflowError"]

# (seq, event object, encoded StreamResponse JSON)
Item = tuple[int, Any, bytes]  # in the ring, the bytes may still be None (encoded on first read)
END: Item = (-1, None, b"")
TAP_BYTES = 4 * 1024 * 1024  # undelivered bytes per tap before it is cut off (the reader then resumes from the log)
_UNENCODED = 256  # what an item not yet encoded counts for (chunk events: a few hundred bytes)


class Tap:
    """One subscriber's bounded buffer of items from one task's log."""

    __slots__ = (
        "_bytes",
        "_items",
        "_waiter",
        "execution",
        "finished",
        "head",
        "last_seq",
        "limit",
        "max_bytes",
        "overflowed",
        "task_id",
    )

    def __init__(self, task_id: str, limit: int, max_bytes: int = TAP_BYTES) -> None:
        self.task_id = task_id
        self.limit = limit
        self.max_bytes = max_bytes
        self._bytes = 0  # about what the buffered items hold
        self._items: deque[Item] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.overflowed = False
        self.finished = False
        self.last_seq = 0  # the newest item read
        self.head = 0  # the newest item accepted
        self.execution = ""  # only this execution's events (a bus shared by processes; "" = all)

    def push(self, item: Item) -> None:
        seq = item[0]
        if self.overflowed or self.finished or seq <= self.head:
            return
        size = len(item[2]) if item[2] is not None else _UNENCODED
        # An empty tap takes any one item, however big: a reader always makes progress.
        over = self._items and self._bytes + size > self.max_bytes
        if seq != self.head + 1 or len(self._items) >= self.limit or over:
            self.overflowed = True
        else:
            self._items.append(item)
            self._bytes += size
            self.head = seq
        self._wake()

    def skip(self, seq: int) -> None:
        """Event ``seq`` is not for this tap: count it as seen (the sequence stays gapless)."""
        if self.overflowed or self.finished or seq <= self.head:
            return
        if seq != self.head + 1:
            self.overflowed = True
            self._wake()
        else:
            self.head = seq

    def fill(self, items: Any, after: int, *, top: int | None = None) -> None:
        """Start over after ``after`` with ``items`` replayed from the log, in order; ``top``: the newest seq the
        replay covered (default: the last item's, for a gapless replay)."""
        self._items.clear()
        self._bytes = 0
        self.overflowed = False
        self.last_seq = self.head = after
        for item in items:
            # A replay is taken whole (the ring bounds it), so the reader always makes progress.
            self._items.append(item)
            self._bytes += len(item[2]) if item[2] is not None else _UNENCODED
            self.head = item[0]
        if top is not None and top > self.head:
            self.head = top

    @property
    def waiting(self) -> bool:
        """True while the reader is blocked waiting for the next item."""
        return self._waiter is not None and not self._waiter.done()

    def finish(self) -> None:
        """No more items will come (the producer's execution ended, or the log closed)."""
        self.finished = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> Item:
        """The next item; ``END`` once finished and drained. On overflow, raises ``TapOverflow`` after draining."""
        while not self._items:
            if self.overflowed:
                raise TapOverflowError(self.last_seq)
            if self.finished:
                return END
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.take()

    def take(self) -> Item:
        """The next item, when one is buffered (``pending()``): what ``get`` returns, without awaiting (a reader
        taking a burst pays no coroutine per item)."""
        item = self._items.popleft()
        self._bytes -= len(item[2]) if item[2] is not None else _UNENCODED
        self.last_seq = item[0]
        if item[2] is None:
            # Replayed from the ring, where nobody had needed it encoded yet.
            item = (item[0], item[1], stream_json(item[1]))
        elif item[1] is None:
            # A task snapshot the ring kept as bytes only (nobody listened when it was published).
            item = (item[0], StreamResponse.model_validate_json(item[2]).payload, item[2])
        return item

    def pending(self) -> int:
        """Items buffered and not yet read."""
        return len(self._items)


class TapOverflowError(Exception):
    """A tap fell behind and was cut off; resume from ``last_seq``."""

    def __init__(self, last_seq: int) -> None:
        self.last_seq = last_seq
        super().__init__(f"subscriber fell behind after event {last_seq}")


@runtime_checkable
class EventBus(Protocol):
    """How task events reach subscribers: one per-task sequence, a replay log, bounded taps.

    The engine is the only publisher of a task (one process at a time runs it); any process may read it.
    ``LocalEventBus`` serves one process; ``RedisEventBus`` (``relaykit.backends.redis``) shares the log between
    replicas.
    """

    woke: bool
    """Set by ``publish``: whether a reader in this process was waiting for the event."""

    async def start(self) -> None:
        """Connect."""

    async def close(self) -> None:
        """Finish every tap and disconnect."""

    async def ping(self) -> None:
        """Raise ``ServiceUnavailableError`` when the bus cannot be reached (readiness)."""

    async def prepare(self, task_id: str, stored_seq: int) -> int:
        """Before this process publishes for a task: learn the newest sequence number (the log may be ahead of the
        stored task: chunks are published before their checkpoint). Returns it."""

    def last_seq(self, task_id: str, default: int = 0) -> int:
        """The newest sequence number this process knows for a task (``default`` if none)."""

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
        """Append one event (``data``: its StreamResponse JSON, or ``None`` to encode lazily); returns its seq.

        ``execution`` names the request whose execution produced the event (its message id), so a reader waiting
        for one execution's events can tell them from another's. ``wait=False`` (artifact chunks): a bus that writes
        elsewhere may return before the append landed; its failure is then raised by the task's next publish.
        """

    async def publish_private(
        self, task_id: str, event: Any, data: bytes, *, execution: str, base_seq: int = 0, wait: bool = True
    ) -> int:
        """Append one event for the caller of ``execution`` alone; returns its seq.

        For a continuation's opening Task snapshot: the stream of the send that resumes a task starts with it (spec
        §5.5), but it is no event of the task, so a subscriber, a resume from a Last-Event-ID, or another execution's
        caller must never get it (a subscription is one Task, then status and artifact updates only: §3.1.6). It
        takes the task's next sequence number, so the ids of the caller's stream go on rising; every other tap counts
        it as seen. ``wait`` as for ``publish``.
        """

    async def open(
        self, task_id: str, *, after: int | None = None, base_seq: int = 0, execution: str = ""
    ) -> tuple[Tap, bool]:
        """Register a tap: the events after ``after`` (or from now), then every new one. ``(tap, gap)``: ``gap`` when
        the log no longer reaches back to ``after``. With ``execution``, only that execution's events, and its
        private ones (``publish_private``)."""

    async def reopen(self, tap: Tap, *, lenient: bool = False) -> bool:
        """Refill a cut-off tap from the log after its ``last_seq``; False when the log no longer covers it.

        ``lenient``: when the log no longer covers it, take whatever the log still holds after ``last_seq`` (the
        reader has just been given a snapshot, and the events in between are gone for everyone)."""

    def close_tap(self, tap: Tap) -> None:
        """Unregister a tap."""

    def forget(self, task_id: str) -> None:
        """The task is terminal: its log may go once nobody reads it (kept a while when it was read: clients resuming
        after the end get exactly the events they missed)."""

    def tap_count(self, task_id: str | None = None) -> int:
        """Open taps in this process (of one task, or all)."""
