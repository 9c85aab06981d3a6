"""The in-process event bus: per-task sequence numbers, a bounded replay ring, and bounded subscriber taps.

Rules (CONTRACT "SSE and resume"):

* every event of a task gets the next number of one per-task sequence; SSE ``id:`` is that number;
* a tap opened with ``after=X`` first receives exactly the retained events with seq > X, then every new event;
  if X is older than the ring (or unknown), ``open`` reports a gap and the caller sends a Task snapshot first;
* a tap holds at most ``tap_limit`` undelivered items; a full tap is cut off (never blocks the publisher) and its
  reader resumes from the ring with ``reopen``;
* a task's log is dropped when the task is terminal and has no taps; idle logs are evicted least-recently-used
  beyond ``max_logs``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Any

from relaykit._types import StreamResponse, stream_json

__all__ = ["END", "LocalEventBus", "Tap"]

# (seq, event object, encoded StreamResponse JSON)
Item = tuple[int, Any, bytes]  # in the ring, the bytes may still be None (encoded on first read)
END: Item = (-1, None, b"")


class Tap:
    """One subscriber's bounded buffer of items from one task's log."""

    __slots__ = ("_items", "_waiter", "finished", "last_seq", "limit", "overflowed", "task_id")

    def __init__(self, task_id: str, limit: int) -> None:
        self.task_id = task_id
        self.limit = limit
        self._items: deque[Item] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.overflowed = False
        self.finished = False
        self.last_seq = 0

    def push(self, item: Item) -> None:
        if self.overflowed or self.finished:
            return
        if len(self._items) >= self.limit:
            self.overflowed = True
        else:
            self._items.append(item)
        self._wake()

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
        self, task_id: str, event: Any, data: bytes | None, *, terminal: bool = False, base_seq: int = 0
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

    def open(self, task_id: str, *, after: int | None = None, base_seq: int = 0) -> tuple[Tap, bool]:
        """Register a tap. With ``after``, replay retained events past it; returns ``(tap, gap)``.

        ``gap`` is True when ``after`` is not covered by the ring, so events between it and the ring were lost to
        this subscriber and it must start from a snapshot instead.
        """
        log = self._log(task_id, base_seq)
        tap = Tap(task_id, self.tap_limit)
        gap = False
        if after is not None:
            gap = not self._replay_into(log, tap, after)
        tap.last_seq = log.seq if after is None or gap else tap.last_seq
        log.taps.add(tap)
        return tap, gap

    def reopen(self, tap: Tap) -> bool:
        """Refill an overflowed tap from the ring after its ``last_seq``; False when the ring no longer covers it."""
        log = self._logs.get(tap.task_id)
        tap.overflowed = False
        if log is None:
            return False
        tap._items.clear()
        log.taps.add(tap)
        return self._replay_into(log, tap, tap.last_seq)

    def _replay_into(self, log: _Log, tap: Tap, after: int) -> bool:
        tap.last_seq = after
        if after > log.seq or after < 0:
            return False
        if after == log.seq:
            return True
        if not log.ring or log.ring[0][0] > after + 1:
            return False
        for item in log.ring:
            if item[0] > after:
                tap._items.append(item)
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
