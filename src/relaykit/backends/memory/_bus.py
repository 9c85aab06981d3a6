"""The in-process event bus (``LocalEventBus``): per-task sequence numbers and a bounded replay ring per task.

It keeps the rules of every bus (``relaykit.backends._bus``), and its own:

* a finished task's log (terminal, no taps left) stays for resumes when a tap was ever opened on it (its event ids
  went out: a stream, a subscriber), as the Redis bus keeps a finished task's stream: ``ended_ttl`` seconds
  (``RedisEventBus.ttl``'s default) from when it is kept (Redis counts from the last event: the same moment when
  the reader left before the end), its encoded events only, within ``max_ended`` logs and ``max_ended_bytes`` all
  told, the oldest dropped first; a log nobody ever read (a blocking send's) is dropped at once, as before: nobody
  holds an id to resume from;
* idle logs are evicted least-recently-used beyond ``max_logs``;
* the replay ring holds every event but the private ones (``publish_private``): those are for the one tap of their
  execution, open when they are published, and for no replay (nor are they in a finished task's kept log).

Costs stay proportional to what caused them: a log's events are taken once, when it is kept (those nobody listened
to are encoded then); each kept log is dropped once, oldest first.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from typing import Any

from relaykit._types import Message, stream_json
from relaykit.backends._bus import Item, Tap

__all__ = ["LocalEventBus"]

# What one kept event costs beside its bytes: its slot in the list and its bytes object's header, rounded up.
_ITEM_OVERHEAD = 64


class _Log:
    __slots__ = ("ring", "seq", "taps", "terminal", "watched")

    def __init__(self, seq: int, replay: int) -> None:
        self.seq = seq
        self.ring: deque[Item] = deque(maxlen=replay)
        self.taps: set[Tap] = set()
        self.terminal = False
        self.watched = False  # a tap was opened on it: its event ids went out, a resume may come back with one


class _Kept:
    """A finished task's log kept for resumes: its encoded events, numbered ``first``, ``first + 1``, … or, when a
    private event (``publish_private``, never in the ring) left a gap in the ring's numbers, by ``seqs``; the time it
    goes, and what it holds. Its ``_Log`` stays (seq, taps), its ring emptied: the event objects are several times
    the size of their bytes, and a replay decodes what it reads (``Tap.take``).
    """

    __slots__ = ("datas", "deadline", "first", "seqs", "size")

    def __init__(self, first: int, datas: list[bytes], deadline: float, seqs: list[int] | None = None) -> None:
        self.first = first
        self.datas = datas
        self.deadline = deadline
        self.seqs = seqs
        self.size = sum(map(len, datas)) + _ITEM_OVERHEAD * len(datas) * (1 if seqs is None else 2)

    def after(self, after: int) -> list[Item]:
        """The kept events past ``after``, as a replay hands them out."""
        if self.seqs is not None:
            start = bisect_right(self.seqs, after)
            return list(zip(self.seqs[start:], repeat(None), self.datas[start:], strict=False))
        start = max(after + 1, self.first)
        top = self.first + len(self.datas)
        return list(zip(range(start, top), repeat(None), self.datas[start - self.first :], strict=False))


class LocalEventBus:
    """Single-process event bus.

    >>> bus = LocalEventBus(replay=1000)
    """

    def __init__(
        self,
        *,
        replay: int = 1000,
        tap_limit: int = 10_000,
        max_logs: int = 10_000,
        ended_ttl: float = 3600.0,
        max_ended: int = 1000,
        max_ended_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.replay = replay
        self.tap_limit = tap_limit
        self.max_logs = max_logs
        self.ended_ttl = ended_ttl
        self.max_ended = max_ended
        self.max_ended_bytes = max_ended_bytes
        self.clock: Callable[[], float] = time.monotonic
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        # The finished logs kept for resumes, oldest first. A deadline is the moment its log was kept plus one fixed
        # ttl, so this order is also the order in which they expire.
        self._ended: OrderedDict[str, _Kept] = OrderedDict()
        self._ended_bytes = 0
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
        self._ended.clear()
        self._ended_bytes = 0

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
                self._remove(task_id)

    def _remove(self, task_id: str) -> None:
        del self._logs[task_id]
        kept = self._ended.pop(task_id, None)
        if kept is not None:
            self._ended_bytes -= kept.size

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
        wait: bool = True,
    ) -> int:
        """``append``, as the ``EventBus`` interface has it."""
        return self.append(task_id, event, data, terminal=terminal, base_seq=base_seq)

    def append(self, task_id: str, event: Any, data: bytes | None, *, terminal: bool = False, base_seq: int = 0) -> int:
        """Append one event to the task's log, fan it out, and return its sequence number. Nothing here waits: the
        engine calls this directly (no coroutine per event) when its bus is this one.

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

    async def publish_private(
        self, task_id: str, event: Any, data: bytes, *, execution: str, base_seq: int = 0, wait: bool = True
    ) -> int:
        """Hand one event to the taps of ``execution`` alone (see ``EventBus.publish_private``); it is not kept in
        the ring, which replays to subscribers and resumes."""
        log = self._log(task_id, base_seq)
        log.seq += 1
        seq = log.seq
        item = (seq, event, data)
        self.woke = False
        for tap in log.taps:
            if execution and tap.execution == execution:
                self.woke |= tap.waiting
                tap.push(item)
            else:
                tap.skip(seq)
        return seq

    async def open(
        self, task_id: str, *, after: int | None = None, base_seq: int = 0, execution: str = ""
    ) -> tuple[Tap, bool]:
        """Register a tap. With ``after``, replay retained events past it; returns ``(tap, gap)``.

        ``gap`` is True when ``after`` is not covered by the ring, so events between it and the ring were lost to
        this subscriber and it must start from a snapshot instead. (In one process, one execution runs at a time
        and its streaming caller's tap opens as it starts, so ``execution`` filters nothing here: it only names the
        tap that gets that execution's private events.)
        """
        if self._ended:
            # This task's kept log past its time is gone before anyone reads it (as a Redis stream). Only this one is
            # looked at here (one lookup per open); the others expire as new ones are kept (``_end``).
            kept = self._ended.get(task_id)
            if kept is not None and kept.deadline <= self.clock():
                self._drop(task_id)
        log = self._log(task_id, base_seq)
        log.watched = True
        tap = Tap(task_id, self.tap_limit)
        tap.execution = execution
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
        kept = self._ended.get(tap.task_id) if self._ended else None
        newer = kept.after(after) if kept is not None else [item for item in log.ring if item[0] > after]
        tap.fill(newer, newer[0][0] - 1 if newer else max(after, log.seq), top=log.seq)
        tap.last_seq = after
        return True

    def _replay_into(self, log: _Log, tap: Tap, after: int) -> bool:
        tap.fill((), after)
        if after > log.seq or after < 0:
            return False
        if after == log.seq:
            return True
        kept = self._ended.get(tap.task_id) if self._ended else None
        if kept is not None:
            if kept.first > after + 1:
                return False
            tap.fill(kept.after(after), after, top=log.seq)  # a private event after its last counts as seen
            return True
        if not log.ring or log.ring[0][0] > after + 1:
            return False
        # Up to the log's top: a private event newer than the ring's last is not for this tap, and counts as seen.
        tap.fill((item for item in log.ring if item[0] > after), after, top=log.seq)
        return True

    def close_tap(self, tap: Tap) -> None:
        """Unregister a tap; a terminal task's log is kept or dropped (``_end``) once its last tap is gone."""
        tap.finish()
        log = self._logs.get(tap.task_id)
        if log is None:
            return
        log.taps.discard(tap)
        if log.terminal and not log.taps:
            self._end(tap.task_id, log)

    def forget(self, task_id: str) -> None:
        """The task is terminal: its log is kept for resumes or dropped (``_end``) now if nobody is reading it, else
        when its last tap closes."""
        log = self._logs.get(task_id)
        if log is None:
            return
        if not log.watched and not log.taps:
            # Nobody ever had its event ids (a blocking send's): nothing to resume, and nothing more to do here.
            del self._logs[task_id]
            return
        log.terminal = True
        if not log.taps:
            self._end(task_id, log)

    def _end(self, task_id: str, log: _Log) -> None:
        """A finished task's log that nobody reads any more: kept for resumes when a tap was ever opened on it and
        it holds events of a task (not a bare Message reply, which belongs to no task), else dropped now."""
        if task_id in self._ended:
            return  # kept already (a resumed reader left): its time runs from when it was first kept
        ring = log.ring
        if not log.watched or not ring or self.ended_ttl <= 0 or isinstance(ring[-1][1], Message):
            del self._logs[task_id]
            return
        # Its bytes only (``_Kept``), taken by C loops (map, all, sum), not an interpreted one per event: this runs
        # at the end of every stream, beside its own per-chunk work. (Nothing is appended to it after: its task is
        # terminal, and the engine admits nothing more for it.)
        datas: list[Any] = list(map(itemgetter(2), ring))
        if not all(datas):
            # Events published while nobody listened were not encoded: encoded now, once.
            datas = [data if data is not None else stream_json(item[1]) for item, data in zip(ring, datas, strict=True)]
        now = self.clock()
        first = ring[0][0]
        # Numbered without a gap unless a continuation's private opening snapshot took a number (not in the ring).
        seqs = None if ring[-1][0] - first + 1 == len(ring) else [item[0] for item in ring]
        kept = self._ended[task_id] = _Kept(first, datas, now + self.ended_ttl, seqs)
        ring.clear()
        self._ended_bytes += kept.size
        self._trim(now)

    def _trim(self, now: float) -> None:
        """Drop the kept logs past their time, then the oldest ones beyond ``max_ended`` / ``max_ended_bytes``."""
        ended = self._ended
        while ended:
            task_id, kept = next(iter(ended.items()))
            if kept.deadline > now and len(ended) <= self.max_ended and self._ended_bytes <= self.max_ended_bytes:
                return
            self._drop(task_id)

    def _drop(self, task_id: str) -> None:
        """A kept log goes (its time is up, or the caps need room)."""
        log = self._logs.get(task_id)
        if log is not None:
            # A resume being read right now holds its items already (and was told the log ends there).
            for tap in log.taps:
                tap.finish()
        self._remove(task_id)

    def tap_count(self, task_id: str | None = None) -> int:
        """Open taps (of one task, or all): for limits and leak tests."""
        if task_id is not None:
            log = self._logs.get(task_id)
            return len(log.taps) if log is not None else 0
        return sum(len(log.taps) for log in self._logs.values())

    def log_count(self) -> int:
        """Task logs held (the finished ones kept for resumes included)."""
        return len(self._logs)

    def ended_count(self) -> int:
        """Finished tasks' logs kept for resumes."""
        return len(self._ended)

    def ended_bytes(self) -> int:
        """What the finished logs kept for resumes hold, about (their encoded events, plus a fixed cost each)."""
        return self._ended_bytes
