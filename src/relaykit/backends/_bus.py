"""The in-process event bus: per-task sequence numbers, a bounded replay ring, and bounded subscriber taps.

Rules (CONTRACT "SSE and resume"):

* every event of a task gets the next number of one per-task sequence; SSE ``id:`` is that number;
* a tap opened with ``after=X`` first receives exactly the retained events with seq > X, then every new event;
  if X is older than the ring (or unknown), ``open`` reports a gap and the caller sends a Task snapshot first;
* a tap holds at most ``tap_limit`` undelivered items; a full tap is cut off (never blocks the publisher) and its
  reader resumes from the ring with ``reopen``; so is a tap that is handed an event out of sequence (a bus fed from
  outside the process can skip: the reader refills the gap from the log the same way), while an event it already has
  is dropped (two feeds may carry the same event);
* a task's log is dropped when the task is terminal and has no taps; idle logs are evicted least-recently-used
  beyond ``max_logs``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Any, Protocol, runtime_checkable

from relaykit._types import StreamResponse, stream_json

__all__ = ["END", "EventBus", "LocalEventBus", "Tap", "TapOverflowError"]

# (seq, event object, encoded StreamResponse JSON)
Item = tuple[int, Any, bytes]  # in the ring, the bytes may still be None (encoded on first read)
END: Item = (-1, None, b"")


class Tap:
    """One subscriber's bounded buffer of items from one task's log."""

    __slots__ = ("_items", "_waiter", "execution", "finished", "head", "last_seq", "limit", "overflowed", "task_id")

    def __init__(self, task_id: str, limit: int) -> None:
        self.task_id = task_id
        self.limit = limit
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
        if seq != self.head + 1 or len(self._items) >= self.limit:
            self.overflowed = True
        else:
            self._items.append(item)
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
        self.overflowed = False
        self.last_seq = self.head = after
        for item in items:
            self._items.append(item)
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
        item = self._items.popleft()
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


class _Log:
    __slots__ = ("ring", "seq", "taps", "terminal")

    def __init__(self, seq: int, replay: int) -> None:
        self.seq = seq
        self.ring: deque[Item] = deque(maxlen=replay)
        self.taps: set[Tap] = set()
        self.terminal = False


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
    ) -> int:
        """Append one event (``data``: its StreamResponse JSON, or ``None`` to encode lazily); returns its seq.

        ``execution`` names the request whose execution produced the event (its message id), so a reader waiting
        for one execution's events can tell them from another's.
        """

    async def open(
        self, task_id: str, *, after: int | None = None, base_seq: int = 0, execution: str = ""
    ) -> tuple[Tap, bool]:
        """Register a tap: the events after ``after`` (or from now), then every new one. ``(tap, gap)``: ``gap`` when
        the log no longer reaches back to ``after``. With ``execution``, only that execution's events."""

    async def reopen(self, tap: Tap, *, lenient: bool = False) -> bool:
        """Refill a cut-off tap from the log after its ``last_seq``; False when the log no longer covers it.

        ``lenient``: when the log no longer covers it, take whatever the log still holds after ``last_seq`` (the
        reader has just been given a snapshot, and the events in between are gone for everyone)."""

    def close_tap(self, tap: Tap) -> None:
        """Unregister a tap."""

    def forget(self, task_id: str) -> None:
        """The task is terminal: its log may go once nobody reads it."""

    def tap_count(self, task_id: str | None = None) -> int:
        """Open taps in this process (of one task, or all)."""


class LocalEventBus:
    """Single-process event bus.

    >>> bus = LocalEventBus(replay=1000)
    """

    def __init__(self, *, replay: int = 1000, tap_limit: int = 10_000, max_logs: int = 10_000) -> None:
        self.replay = replay
        self.tap_limit = tap_limit
        self.max_logs = max_logs
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self.woke = False

    async def start(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def prepare(self, task_id: str, stored_seq: int) -> int:
        return self.last_seq(task_id, stored_seq)

    async def close(self) -> None:
        for log in self._logs.values():
            for tap in log.taps:
                tap.finish()
        self._logs.clear()

    def _log(self, task_id: str, seq: int = 0) -> _Log:
        log = self._logs.get(task_id)
        if log is None:
            log = self._logs[task_id] = _Log(seq, self.replay)
            self._evict()
        else:
            self._logs.move_to_end(task_id)
        return log

    def _evict(self) -> None:
        if len(self._logs) <= self.max_logs:
            return
        for task_id in list(self._logs):
            if len(self._logs) <= self.max_logs:
                break
            if not self._logs[task_id].taps:
                del self._logs[task_id]

    def last_seq(self, task_id: str, default: int = 0) -> int:
        """The newest sequence number of a task (``default`` if the bus has no log for it)."""
        log = self._logs.get(task_id)
        return log.seq if log is not None else default

    async def publish(
        self,
        task_id: str,
        event: Any,
        data: bytes | None,
        *,
        terminal: bool = False,
        base_seq: int = 0,
        execution: str = "",
    ) -> int:
        """Append one event to the task's log, fan it out, and return its sequence number.

        ``data`` (the encoded StreamResponse) may be ``None``: it is then encoded here only if a tap is listening,
        and readers of the replay ring encode what they replay. Nobody listening costs no encoding at all.
        ``woke`` tells the caller whether a reader was waiting for this event.
        """
        log = self._log(task_id, base_seq)
        log.seq += 1
        self.woke = False
        if log.taps:
            if data is None:
                data = stream_json(event)
            item = (log.seq, event, data)
            for tap in log.taps:
                self.woke |= tap.waiting
                tap.push(item)
        else:
            item = (log.seq, event, data)  # type: ignore[assignment]
        log.ring.append(item)
        if terminal:
            log.terminal = True
        return log.seq

    async def open(
        self, task_id: str, *, after: int | None = None, base_seq: int = 0, execution: str = ""
    ) -> tuple[Tap, bool]:
        """Register a tap. With ``after``, replay retained events past it; returns ``(tap, gap)``.

        ``gap`` is True when ``after`` is not covered by the ring, so events between it and the ring were lost to
        this subscriber and it must start from a snapshot instead. (In one process, one execution runs at a time
        and its streaming caller's tap opens as it starts, so ``execution`` needs no filtering here.)
        """
        log = self._log(task_id, base_seq)
        tap = Tap(task_id, self.tap_limit)
        gap = False
        if after is not None:
            gap = not self._replay_into(log, tap, after)
        if after is None or gap:
            tap.fill((), log.seq)
        log.taps.add(tap)
        return tap, gap

    async def reopen(self, tap: Tap, *, lenient: bool = False) -> bool:
        """Refill an overflowed tap from the ring after its ``last_seq``; False when the ring no longer covers it.

        ``lenient``: when the ring no longer covers it, take whatever the ring holds after ``last_seq``."""
        log = self._logs.get(tap.task_id)
        tap.overflowed = False
        if log is None:
            return lenient
        log.taps.add(tap)
        ok = self._replay_into(log, tap, tap.last_seq)
        if ok or not lenient:
            return ok
        after = tap.last_seq
        newer = [item for item in log.ring if item[0] > after]
        tap.fill(newer, newer[0][0] - 1 if newer else max(after, log.seq))
        tap.last_seq = after
        return True

    def _replay_into(self, log: _Log, tap: Tap, after: int) -> bool:
        tap.fill((), after)
        if after > log.seq or after < 0:
            return False
        if after == log.seq:
            return True
        if not log.ring or log.ring[0][0] > after + 1:
            return False
        tap.fill((item for item in log.ring if item[0] > after), after)
        return True

    def close_tap(self, tap: Tap) -> None:
        """Unregister a tap; drops the log of a terminal task once its last tap is gone."""
        tap.finish()
        log = self._logs.get(tap.task_id)
        if log is None:
            return
        log.taps.discard(tap)
        if log.terminal and not log.taps:
            del self._logs[tap.task_id]

    def forget(self, task_id: str) -> None:
        """Drop a terminal task's log now if nobody is reading it."""
        log = self._logs.get(task_id)
        if log is not None and not log.taps:
            del self._logs[task_id]

    def tap_count(self, task_id: str | None = None) -> int:
        """Open taps (of one task, or all): for limits and leak tests."""
        if task_id is not None:
            log = self._logs.get(task_id)
            return len(log.taps) if log is not None else 0
        return sum(len(log.taps) for log in self._logs.values())

    def log_count(self) -> int:
        """Task logs held."""
        return len(self._logs)
