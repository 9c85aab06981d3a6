"""Idempotent SendMessage in one process: the messages admitted within the window, by ``messageId``.

A client that lost its connection sends the same message again (same ``messageId``); the agent must not run twice.
The scale-out front keeps this window in Redis; one process keeps it here, in memory, at no store cost:

* a message is remembered when it is admitted, under (tenant, owner, messageId), with its task and its request, so a
  repeat gets the original execution's outcome (awaited if it is still running) instead of a second run;
* the map is bounded (``limit`` entries, oldest dropped first) and entries older than the window are ignored;
* a settled entry with nothing but its task is kept as a plain ``(task_id, context_id, at)`` tuple: CPython stops
  tracking such a tuple in the cyclic garbage collector, so a full window (100k messages) adds nothing to the full
  collections, where as many ``Seen`` objects made each one walk them (tenths of a second, several times a minute);
* across a restart, the stores that keep tasks (SQLite, PostgreSQL) refill the map from the tasks stored within the
  window (``TaskEngine.start``); a message to an existing task is also recognised in the task's history. A bare
  Message reply (no task) is remembered only while the process lives.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relaykit._types import Message

if TYPE_CHECKING:
    from relaykit.server._active import PendingRequest

__all__ = ["RecentMessages", "Seen"]

Key = tuple[str, str, str]
Plain = tuple[str, str, float]  # (task_id, context_id, at): a settled Seen with no reply and no error


@dataclass(slots=True)
class Seen:
    """A message admitted before: the task it went to; while it runs here, its request (whose futures resolve with
    its outcome); after, its bare Message reply or its error, if it had one (a task is read where it is)."""

    task_id: str
    context_id: str
    pending: PendingRequest | None = None
    at: float = field(default_factory=time.monotonic)
    reply: Message | None = None
    error: BaseException | None = None
    # Where it is remembered (``RecentMessages.add``): its map and key, so that settling can shrink it to a Plain.
    home: tuple[OrderedDict[Key, Seen | Plain], Key] | None = None

    def settle(self, done: asyncio.Future[Any]) -> None:
        """The execution ended: keep only what a repeat needs (not the request, its futures and its call)."""
        self.pending = None
        if not done.cancelled():
            self.error = done.exception()
            if self.error is None:
                result = done.result()
                if type(result) is not bytes and isinstance(result, Message):  # (bytes: a task, the common case)
                    self.reply = result
        home, self.home = self.home, None
        if home is not None and self.reply is None and self.error is None:
            seen_map, key = home
            if seen_map.get(key) is self:
                seen_map[key] = (self.task_id, self.context_id, self.at)


class RecentMessages:
    """``(tenant, owner, messageId) -> Seen`` for ``window`` seconds, at most ``limit`` entries."""

    def __init__(self, window: float, limit: int = 100_000) -> None:
        self.window = window
        self.limit = limit
        self._seen: OrderedDict[Key, Seen | Plain] = OrderedDict()

    def find(self, tenant: str, owner: str, message_id: str, task_id: str, context_id: str) -> Seen | None:
        """The earlier admission of this message, if within the window and to the same task and context (those
        the repeat names)."""
        entry = self._seen.get((tenant, owner, message_id))
        if entry is None:
            return None
        seen = Seen(entry[0], entry[1], at=entry[2]) if type(entry) is tuple else entry
        assert isinstance(seen, Seen)
        if time.monotonic() - seen.at > self.window:
            del self._seen[(tenant, owner, message_id)]
            return None
        if (task_id and task_id != seen.task_id) or (context_id and context_id != seen.context_id):
            return None  # the same id reused in another conversation: a different message
        return seen

    def add(self, tenant: str, owner: str, message_id: str, seen: Seen) -> None:
        if self.window <= 0:
            return
        seen_map = self._seen
        key = (tenant, owner, message_id)
        if seen.pending is None and seen.reply is None and seen.error is None:
            seen_map[key] = (seen.task_id, seen.context_id, seen.at)
        else:
            seen.home = (seen_map, key)
            seen_map[key] = seen
        if len(seen_map) > self.limit:
            seen_map.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seen)
