"""New tasks nobody is told of, whose insert is put off so that their next write can carry it.

``insert_claimed(told=False)`` stores a task run where it was accepted whose caller waits for the outcome alone: no
one but that caller will hear of the task before its outcome is written. Most such tasks (an echo, a lookup, a
tool call) are answered within milliseconds, so the insert is put off for ``UNTOLD_DELAY``: when the execution's
next write (typically its outcome) comes first, it goes out as one INSERT of the task as it then is, one statement
and one commit per message instead of two. A task still running after the delay is inserted then, as before (an
asynchronous commit, which its next write makes durable).

What the delay changes, and why it is sound:

* Until its insert, the task is in no table. Nobody can ask for it by id (the id is new, and only its caller will be
  told it, with the outcome), and every read and write of this store that names the task settles the insert first
  (sends it now, or waits for the one in flight), as a ListTasks through this store settles them all: this replica
  sees what it stored. Another replica's ListTasks may miss the task for at most the delay: a caller-visible order
  exists where the task began then.
* A replica that dies before the insert loses a task nobody had been answered about, exactly as a replica dying
  between accepting a request and storing it; the caller's connection breaks, and a retry of the message is new.
* A failed insert (an outage) is kept: the next write carries it, as it would the first time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from relaykit.backends.postgres._batch import Row

__all__ = ["UNTOLD_DELAY", "UntoldInserts"]

UNTOLD_DELAY = 0.05
"""Seconds a new untold task's insert waits for the task's next write to carry it: beyond most quick answers under
load, short enough that a listing elsewhere hardly notices."""

log = logging.getLogger("relaykit.store")


class _Entry:
    __slots__ = ("row", "sending", "timer")

    def __init__(self, row: Row) -> None:
        self.row = row
        self.timer: asyncio.TimerHandle | None = None
        self.sending: asyncio.Task[None] | None = None


class UntoldInserts:
    """The put-off inserts of one store, by task id. ``insert(row)`` writes a row and returns whether it did (False:
    the id is stored already).

    >>> async def insert(row): return True
    >>> async def demo():
    ...     untold = UntoldInserts(insert)
    ...     untold.add("t1", ("t1", "tenant", "owner", "body"))
    ...     return untold.take("t1", "tenant", "owner")  # the next write carries the row instead
    >>> asyncio.run(demo())
    ('t1', 'tenant', 'owner', 'body')
    """

    __slots__ = ("_delay", "_entries", "_insert")

    def __init__(self, insert: Callable[[Row], Awaitable[bool]], delay: float = UNTOLD_DELAY) -> None:
        self._insert = insert
        self._delay = delay
        self._entries: dict[str, _Entry] = {}

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._entries

    def add(self, task_id: str, row: Row) -> None:
        """Put off the insert of ``row`` (a new task ``task_id``) by the delay."""
        entry = _Entry(row)
        entry.timer = asyncio.get_running_loop().call_later(self._delay, self._due, task_id, entry)
        self._entries[task_id] = entry

    def take(self, task_id: str, tenant: str, owner: str) -> Row | None:
        """The row of ``task_id`` when its insert is still put off and it is in this scope (``row[1:3]``): the
        caller writes it, as it now is, instead. None when there is none, it is in flight (``settle`` waits for it),
        or the task is another scope's (then it stays put off)."""
        entry = self._entries.get(task_id)
        if entry is None or entry.sending is not None or entry.row[1:3] != (tenant, owner):
            return None
        del self._entries[task_id]
        if entry.timer is not None:
            entry.timer.cancel()
        return entry.row

    async def settle(self, task_id: str) -> None:
        """Make sure ``task_id``'s put-off insert is done: sent now when it waits, waited for when in flight."""
        entry = self._entries.get(task_id)
        if entry is None:
            return
        sending = entry.sending if entry.sending is not None else self._send(task_id, entry)
        await asyncio.shield(sending)  # a cancelled reader leaves the insert to complete

    async def settle_all(self) -> None:
        """``settle`` every task's insert (a listing, the store closing)."""
        if self._entries:
            await asyncio.gather(*(self.settle(task_id) for task_id in list(self._entries)))

    def _due(self, task_id: str, entry: _Entry) -> None:
        entry.timer = None
        if self._entries.get(task_id) is entry and entry.sending is None:
            self._send(task_id, entry)

    def _send(self, task_id: str, entry: _Entry) -> asyncio.Task[None]:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        entry.sending = asyncio.get_running_loop().create_task(self._write(task_id, entry), name="relaykit-untold")
        return entry.sending

    async def _write(self, task_id: str, entry: _Entry) -> None:
        try:
            written = await self._insert(entry.row)
        except Exception as exc:
            # Kept, waiting: the task's next write carries it (or the next settle sends it again).
            log.warning("task %s: its first state waits for its next write: %s", task_id, exc)
            entry.sending = None
            return
        if self._entries.get(task_id) is entry:
            del self._entries[task_id]
        if not written:  # the id was stored already: the execution's next write conflicts, as an update would
            log.warning("task %s: a task with this id is stored already; this one was not", task_id)

    def forget(self) -> list[str]:
        """Forget every put-off insert (the store closes, after ``settle_all``: only failed ones remain); their ids."""
        forgotten = list(self._entries)
        for entry in self._entries.values():
            if entry.timer is not None:
                entry.timer.cancel()
        self._entries.clear()
        return forgotten
