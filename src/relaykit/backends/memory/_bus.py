"""The in-process event bus (``LocalEventBus``): per-task sequence numbers and a bounded replay ring per task.

It keeps the rules of every bus (``relaykit.backends._bus``), and its own:

* a task's log is dropped when the task is terminal and has no taps; idle logs are evicted least-recently-used
  beyond ``max_logs``;
* the replay ring holds every event but the private ones (``publish_private``): those are for the one tap of their
  execution, open when they are published, and for no replay.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from relaykit._types import stream_json
from relaykit.backends._bus import Item, Tap

__all__ = ["LocalEventBus"]


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
        log = self._log(task_id, base_seq)
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
        newer = [item for item in log.ring if item[0] > after]
        tap.fill(newer, newer[0][0] - 1 if newer else max(after, log.seq), top=log.seq)
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
        # Up to the log's top: a private event newer than the ring's last is not for this tap, and counts as seen.
        tap.fill((item for item in log.ring if item[0] > after), after, top=log.seq)
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
