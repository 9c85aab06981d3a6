"""How many notifications one task may send: a bound on push amplification (issue 14, Build 4).

One SendMessage whose agent streams 5,000 chunks used to become 5,000 webhook POSTs per config, to a URL of the
caller's choosing. Invariants:

* every change of a task's state (a new task, a status update to another state, the terminal state) is always
  notified: a receiver never misses where the task is;
* every other event (artifact chunks, status updates that keep the state) spends a token of the task's bucket:
  ``rate`` per second, ``burst`` deep; without a token the event is not queued (coalesced: the next notification,
  at the latest the terminal one, carries the task as it stands, and GetTask has everything);
* the table of tasks is bounded (least recently notified forgotten first); a terminal task is forgotten at once.
"""

from __future__ import annotations

import collections
import time

from relaykit._enums import TaskState

__all__ = ["NotificationGate"]

_MAX_TASKS = 65_536


class NotificationGate:
    """Per-task budget of push notifications beyond state changes.

    >>> gate = NotificationGate(rate=1.0, burst=2)
    >>> [gate.allow("t", None) for _ in range(3)]
    [True, True, False]
    >>> gate.allow("t", TaskState.COMPLETED)
    True
    """

    def __init__(self, rate: float = 100.0, burst: int = 1000) -> None:
        self.rate = rate
        self.burst = float(burst)
        # task id -> (tokens, time of last refill, last state notified)
        self._tasks: collections.OrderedDict[str, tuple[float, float, TaskState | None]] = collections.OrderedDict()

    def allow(self, task_id: str, state: TaskState | None) -> bool:
        """Whether an event of ``task_id`` (carrying ``state``, or None for an artifact update) is notified."""
        if self.rate <= 0:
            return True
        now = time.monotonic()
        tokens, then, last = self._tasks.get(task_id, (self.burst, now, None))
        if state is not None and state.is_terminal:
            self._tasks.pop(task_id, None)
            return True
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if state is not None and state is not last:
            allowed = True
        elif tokens >= 1.0:
            tokens -= 1.0
            allowed = True
        else:
            allowed = False
        self._tasks[task_id] = (tokens, now, state if state is not None else last)
        self._tasks.move_to_end(task_id)
        if len(self._tasks) > _MAX_TASKS:
            self._tasks.popitem(last=False)
        return allowed
