"""Write-behind group commit in front of a ``PushOutbox``, and the outbox that goes with a task store.

Why: the engine calls the push hook once per event, in the executor's own coroutine. A task streaming 1,000 chunks
to a webhook must not pay 1,000 transactions there. So the hook only appends to an in-memory batch
(``OutboxWriter.add``) and a single writer task commits whatever has accumulated in one transaction (one
``PushOutbox.commit``), as soon as the previous commit is done: under a burst, a commit carries hundreds of
entries. Entries are handed to delivery only after their commit ("persisted before any attempt").

Which writes wait, and for how long:

* the hook of a status change (and of the task snapshot) on a durable outbox awaits the commit of its batch
  (``flush``: committed at once), so once a client has seen a state change, its notification survives a crash;
* other new entries (artifact chunks) don't wait: the writer gives a burst ``add_delay`` (5 ms) to gather, then
  commits it whole, so a 1,000-chunk stream costs a handful of transactions. Like the engine's own chunk
  checkpoints, a crash can lose the notifications of the last moments' chunks (the task itself is marked FAILED
  on restart anyway);
* a task state's owed marker (``push._owed``) is cleared in the commit of the batch that holds that state's entries,
  never before: ``settle`` is called after those ``add`` calls, into the same buffer;
* acknowledgements, retry bookkeeping and health counters are lazy: they ride with the next batch, or go out after
  ``lazy_delay`` (50 ms). Losing one in a crash means a redelivery (at-least-once), never a loss;
* a stream lease other processes see (PostgreSQL) is given back in the commit that holds its holder's last results
  (``release``), never before it: another replica claims the stream only once those results are committed, so it
  does not deliver again what was delivered. A release is committed at once (not lazily): the next runner of the
  stream, in this process too, waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable

from relaykit.backends._base import (
    DeliveryOutcome,
    OutboxChanges,
    OutboxEntry,
    PushOutbox,
    StreamKey,
    TaskStore,
)
from relaykit.backends.memory import MemoryPushOutbox, MemoryTaskStore

__all__ = ["OutboxWriter", "open_outbox"]

log = logging.getLogger("relaykit.push")


def open_outbox(tasks: TaskStore, *, lease: float | None = None) -> PushOutbox:
    """The outbox that lives with ``tasks``: the same SQLite file, the same PostgreSQL namespace (and pool), or memory.

    ``lease``: how long a PostgreSQL stream lease outlives its holder (scale-out: the replicas' ``--lease``, so a
    lost replica's notifications are taken over in the time its tasks are).

    Other stores get a memory outbox: delivery then works, but pending notifications do not survive a restart.
    """
    from relaykit.backends.sqlite import SQLitePushOutbox, SQLiteTaskStore

    if isinstance(tasks, SQLiteTaskStore):
        return SQLitePushOutbox(tasks)
    # The PostgreSQL module (and asyncpg) is loaded only by whoever built a PostgreSQL store: no import here.
    postgres = sys.modules.get("relaykit.backends.postgres")
    if postgres is not None and isinstance(tasks, postgres.PostgresTaskStore):
        from relaykit.backends.postgres import PostgresPushOutbox

        return PostgresPushOutbox(tasks) if lease is None else PostgresPushOutbox(tasks, lease_ttl=lease)
    if not isinstance(tasks, MemoryTaskStore):
        log.warning(
            "%s has no durable push outbox yet: pending push notifications are kept in memory", type(tasks).__name__
        )
    return MemoryPushOutbox()


def _merge(first: OutboxChanges, then: OutboxChanges) -> OutboxChanges:
    # A failed batch goes back in front of what came after it. Discards of the later batch also drop the earlier
    # batch's entries of those streams (the later batch's discards are applied first in one commit).
    gone = set(then.discarded)
    return OutboxChanges(
        added=[e for e in first.added if e.stream not in gone] + then.added,
        delivered=first.delivered + then.delivered,
        retried=first.retried + then.retried,
        dead=first.dead + then.dead,
        discarded=first.discarded + then.discarded,
        outcomes=first.outcomes + then.outcomes,
        settled=first.settled + then.settled,
        released=first.released + then.released,
    )


class OutboxWriter:
    """Batches outbox writes; one writer task commits them (see the module docstring)."""

    def __init__(
        self,
        outbox: PushOutbox,
        on_committed: Callable[[list[OutboxEntry]], None],
        *,
        add_delay: float = 0.005,
        lazy_delay: float = 0.05,
        retry_delay: float = 1.0,
    ) -> None:
        self.outbox = outbox
        self.add_delay = add_delay
        self.lazy_delay = lazy_delay
        self.retry_delay = retry_delay
        self.commits = 0  # transactions committed (observability, tests)
        self._on_committed = on_committed
        self._buffer = OutboxChanges()
        self._waiters: list[asyncio.Future[None]] = []  # resolved when the current buffer is committed
        self._inflight: list[asyncio.Future[None]] | None = None  # ... when the batch being committed is
        self._committing: OutboxChanges | None = None  # the batch being committed
        self._wake = asyncio.Event()
        self._urgent = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._soon: asyncio.TimerHandle | None = None  # the commit an add scheduled ``add_delay`` ahead

    # --- buffering (synchronous: an in-process append) -------------------------------------------------

    def _kick(self, urgent: bool) -> None:
        self._wake.set()
        if urgent:
            self._urgent.set()

    def add(self, entry: OutboxEntry) -> None:
        """A new notification (committed within ``add_delay``, then handed to delivery)."""
        self._buffer.added.append(entry)
        self._kick(False)
        if self._soon is None:
            self._soon = asyncio.get_running_loop().call_later(self.add_delay, self._due)

    def _due(self) -> None:
        self._soon = None
        self._kick(True)

    def delivered(self, entry: OutboxEntry, outcome: DeliveryOutcome) -> None:
        """``entry`` got a 2xx: remove it."""
        self._buffer.delivered.append(entry)
        self._buffer.outcomes.append(outcome)
        self._kick(False)

    def retried(self, entry: OutboxEntry, outcome: DeliveryOutcome) -> None:
        """``entry`` failed and will be retried (its attempts / next attempt / error changed)."""
        self._buffer.retried.append(entry)
        self._buffer.outcomes.append(outcome)
        self._kick(False)

    def dead(self, entry: OutboxEntry, outcome: DeliveryOutcome | None) -> None:
        """``entry`` was given up on: it becomes a dead letter."""
        self._buffer.dead.append(entry)
        if outcome is not None:
            self._buffer.outcomes.append(outcome)
        self._kick(False)

    def settle(self, task: tuple[str, str, str, int]) -> None:
        """``(tenant, owner, task id, seq)``: the notifications of the task's state written at ``seq`` were added
        before this call (or rightly not queued), so its owed marker goes with their commit (``push._owed``)."""
        self._buffer.settled.append(task)
        self._kick(False)

    def release(self, stream: StreamKey, worker: str) -> None:
        """Give ``worker``'s lease on ``stream`` back with the commit of what is buffered now (its results), at once."""
        self._buffer.released.append((stream, worker))
        self._kick(True)

    def releasing(self, stream: StreamKey) -> bool:
        """Whether a lease on ``stream`` is waiting to be given back (``flush`` returns once it is)."""
        batches = (self._buffer, self._committing) if self._committing is not None else (self._buffer,)
        return any(released == stream for batch in batches for released, _ in batch.released)

    def discard(self, stream: StreamKey) -> None:
        """Drop every pending entry of ``stream`` (its config was deleted)."""
        self._buffer.added = [e for e in self._buffer.added if e.stream != stream]
        self._buffer.discarded.append(stream)
        self._kick(False)

    # --- committing ----------------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Return once everything buffered so far is committed."""
        if self._buffer:
            waiters = self._waiters
            self._kick(True)
        elif self._inflight is not None:
            waiters = self._inflight
        else:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        await fut

    def start(self) -> None:
        """Start the writer task."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="relaykit-push-outbox")

    async def stop(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109 - a bound for the final flush
        """Commit what is buffered (bounded by ``timeout``), then stop the writer task."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            log.warning("push outbox: could not commit the last changes within %.1f s", timeout)
        task, self._task = self._task, None
        task.cancel()
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                if not self._urgent.is_set():
                    # Nobody waits: let more accumulate for a moment (until somebody flushes, or an add's timer).
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._urgent.wait(), self.lazy_delay)
                self._wake.clear()
                self._urgent.clear()
                if not self._buffer:
                    continue
                if self._soon is not None:
                    self._soon.cancel()
                    self._soon = None
                changes, self._buffer = self._buffer, OutboxChanges()
                waiters, self._waiters = self._waiters, []
                self._inflight = waiters
                self._committing = changes
                try:
                    await self.outbox.commit(changes)
                except Exception:
                    log.exception("push outbox: commit failed; retrying in %.1f s", self.retry_delay)
                    self._buffer = _merge(changes, self._buffer)
                    self._waiters = waiters + self._waiters
                    self._inflight = None
                    self._committing = None
                    await asyncio.sleep(self.retry_delay)
                    self._kick(True)
                    continue
                self._inflight = None
                self._committing = None
                self.commits += 1
                if changes.added:
                    try:
                        self._on_committed(changes.added)
                    except Exception:
                        log.exception("push outbox: dispatch failed")
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
        finally:
            self._committing = None
            # Stopped: nobody may be left waiting for a commit that will not happen in this process.
            for fut in [*(self._inflight or ()), *self._waiters]:
                if not fut.done():
                    fut.set_result(None)
