"""How many notifications one task may send: a bound on push amplification (issue 14, Build 4).

One SendMessage whose agent streams 5,000 chunks used to become 5,000 webhook POSTs per config, to a URL of the
caller's choosing. Invariants:

* every change of a task's state (a new task, a status update to another state, the terminal state) is always
  notified: a receiver never misses where the task is;
* every other event (artifact chunks, status updates that keep the state) spends a token of the task's bucket:
  ``rate`` per second, ``burst`` deep; without a token the event is not queued (coalesced);
* after a coalesced event, the task's next notification (at the latest the terminal one) is a snapshot of the task
  as it stands (``SNAPSHOT``; the sender then sends ``{"task": ...}``, not the event's delta): a receiver that
  rebuilds the task from deltas (an ``append`` artifact) would otherwise have a silent gap;
* the table of tasks is bounded (least recently notified forgotten first); a terminal task is forgotten at once.
  (A task forgotten from a full table with an event coalesced loses its snapshot: its next notification is the
  delta.)
"""

from __future__ import annotations

import collections
import time

from relaykit._enums import TaskState

__all__ = ["DROP", "SEND", "SNAPSHOT", "NotificationGate"]

_MAX_TASKS = 65_536

# What ``NotificationGate.admit`` says of an event.
DROP = 0  # not notified (coalesced into the task's next notification)
SEND = 1  # notified as it is
SNAPSHOT = 2  # notified, as a snapshot of the task: an earlier event was dropped


class NotificationGate:
    """Per-task budget of push notifications beyond state changes.

    >>> gate = NotificationGate(rate=1.0, burst=2)
    >>> [gate.admit("t", None) for _ in range(3)] == [SEND, SEND, DROP]
    True
    >>> gate.admit("t", TaskState.COMPLETED) == SNAPSHOT
    True
    """

    def __init__(self, rate: float = 100.0, burst: int = 1000) -> None:
        self.rate = rate
        self.burst = float(burst)
        # task id -> (tokens, time of last refill, last state notified, an event dropped since the last notification)
        self._tasks: collections.OrderedDict[str, tuple[float, float, TaskState | None, bool]] = (
            collections.OrderedDict()
        )

    def allow(self, task_id: str, state: TaskState | None) -> bool:
        """Whether an event of ``task_id`` (carrying ``state``, or None for an artifact update) is notified."""
        return self.admit(task_id, state) != DROP

    def admit(self, task_id: str, state: TaskState | None) -> int:
        """``DROP``, ``SEND`` or ``SNAPSHOT`` (notified as the task as it stands: an earlier event was dropped) for an
        event of ``task_id`` carrying ``state`` (None for an artifact update)."""
        if self.rate <= 0:
            return SEND
        now = time.monotonic()
        tokens, then, last, dropped = self._tasks.get(task_id, (self.burst, now, None, False))
        if state is not None and state.is_terminal:
            self._tasks.pop(task_id, None)
            return SNAPSHOT if dropped else SEND
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if state is not None and state is not last:
            admitted = SNAPSHOT if dropped else SEND
        elif tokens >= 1.0:
            tokens -= 1.0
            admitted = SNAPSHOT if dropped else SEND
        else:
            admitted = DROP
        self._tasks[task_id] = (tokens, now, state if state is not None else last, admitted == DROP)
        self._tasks.move_to_end(task_id)
        if len(self._tasks) > _MAX_TASKS:
            self._tasks.popitem(last=False)
        return admitted
