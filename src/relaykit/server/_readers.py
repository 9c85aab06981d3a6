"""The reading side of the engine: following a task's events, subscriptions, resume from the replay ring, snapshots.

Rules (CONTRACT "SSE and resume"): a subscription starts with the Task snapshot (or exactly the events after a
``Last-Event-ID``) and ends at a terminal state; a send's stream ends when its execution ends; a reader that falls
behind is refilled from the ring or restarted from a snapshot, and never waits for events it already missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from relaykit._errors import ResourceExhaustedError, TaskNotFoundError, UnsupportedOperationError
from relaykit._state import INTERRUPTED, TERMINAL
from relaykit._types import Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from relaykit.backends._base import TaskRecord, TaskStore
from relaykit.backends._bus import END, EventBus, Tap, TapOverflowError
from relaykit.server._active import ActiveTask, PendingRequest, visible
from relaykit.server._context import CallContext

__all__ = ["EventStream", "Readers", "StreamItem"]

# (sequence number, event, encoded StreamResponse JSON)
StreamItem = tuple[int, Any, bytes]


def copy_task(task: Task) -> Task:
    """A caller's own copy of a task (the live one keeps changing under the engine)."""
    return Task.model_validate_json(task.to_json())


class Readers:
    """Mixed into ``TaskEngine``: everything that reads a task's events (beside the layers that write them)."""

    registry: dict[str, ActiveTask]
    bus: EventBus
    store: TaskStore
    max_subscribers: int

    async def _follow(
        self, tap: Tap, *, until_terminal: bool, tenant: str, owner: str, execution: PendingRequest | None = None
    ) -> AsyncGenerator[StreamItem, None]:
        """The events of ``tap`` until the task ends (``until_terminal``), or else until its execution ends.

        ``execution``: the admitted request whose execution a send's own stream follows. The generator then owns the
        tap (closed however it ends) and, at the end, raises the execution's error when it ended without a task or a
        reply, so the caller iterates this generator directly, with no relaying generator per event above it."""
        floor = 0  # events up to this seq are covered by a snapshot this reader was given
        given = -1  # the seq the last snapshot given by this reader stood for
        try:
            while True:
                try:
                    item = tap.take() if tap.pending() else await tap.get()
                except TapOverflowError:
                    # The reader fell behind and its tap was cut off: refill it from the replay ring, or, when the
                    # ring no longer reaches back that far, restart it from a snapshot of the task (live, or as stored
                    # once the task is no longer executing; a reader must never wait forever for events it already
                    # missed).
                    if await self.bus.reopen(tap):
                        continue
                    resync = await self._resync(tap.task_id, tenant, owner)
                    if resync is None:
                        break
                    stood_for, snap = resync
                    seen = tap.last_seq
                    floor = max(stood_for, seen)
                    if stood_for > given:
                        given = stood_for
                        # Its id never goes back below an event this reader already delivered: a client that resumes
                        # from it must not be sent those again.
                        yield (floor, snap, StreamResponse(task=snap).to_json())
                        state = snap.status.state
                        if state in TERMINAL or (not until_terminal and state in INTERRUPTED):
                            break
                    # else the task as stored holds nothing newer than the snapshot already given (the log lost
                    # events that were never checkpointed): a second copy would tell the reader nothing.
                    # Go on from the snapshot with whatever the log still holds after it.
                    tap.fill((), floor)
                    await self.bus.reopen(tap, lenient=True)
                    continue
                if item is END:
                    break
                if item[0] <= floor:
                    continue
                yield item
                event = item[1]
                if type(event) is TaskArtifactUpdateEvent:
                    continue  # most events of a stream: none of them ends it
                if isinstance(event, Message):
                    if not until_terminal:
                        break
                elif isinstance(event, TaskStatusUpdateEvent):
                    state = event.status.state
                    if state in TERMINAL or (not until_terminal and state in INTERRUPTED):
                        break
                elif isinstance(event, Task) and event.status.state in TERMINAL:
                    break
            if execution is not None:
                done = execution.done
                error = done.exception() if done.done() and not done.cancelled() else None
                if error is not None:
                    # The execution ended without a task or a reply (the request itself failed): say so, rather
                    # than end the stream as if all went well.
                    raise error
        finally:
            if execution is not None:
                self.bus.close_tap(tap)

    async def _settled(self, task_id: str, tenant: str, owner: str) -> tuple[TaskRecord | None, ActiveTask | None]:
        """The stored record and the live task, at a moment when no event is half-way between applied and published.

        Nothing awaits between this returning and the caller's snapshot, so the snapshot and the bus position agree.
        """
        while True:
            record = await self.store.get(task_id, tenant=tenant, owner=owner)
            active = visible(self.registry, task_id, tenant, owner)
            if active is None or not active.emitting:
                return record, active
            if active.emit_waiter is None:
                active.emit_waiter = asyncio.get_running_loop().create_future()
            await asyncio.shield(active.emit_waiter)

    async def _resync(self, task_id: str, tenant: str, owner: str) -> tuple[int, Task] | None:
        """A snapshot of the task and the seq of the last event it includes."""
        record, active = await self._settled(task_id, tenant, owner)
        if active is not None:
            assert active.record is not None
            return self.bus.last_seq(task_id, active.record.event_seq), copy_task(active.record.task)
        if record is None:
            return None
        return record.event_seq, record.task

    # --- reads and subscriptions -------------------------------------------------------------------------

    async def get_task(self, task_id: str, call: CallContext | None = None, *, tenant: str = "") -> Task:
        """The task as stored, or as it is right now when it is executing in this process."""
        call = call or CallContext()
        tenant = tenant or call.tenant
        active = self.registry.get(task_id)
        if active is not None and active.task is not None and active.tenant == tenant and active.owner == call.user:
            return copy_task(active.task)
        record = await self.store.get(task_id, tenant=tenant, owner=call.user)
        if record is None:
            raise TaskNotFoundError(task_id=task_id)
        return record.task

    async def subscribe(
        self,
        task_id: str,
        call: CallContext | None = None,
        *,
        tenant: str = "",
        last_event_id: int | None = None,
    ) -> AsyncIterator[StreamItem]:
        """SubscribeToTask: Task snapshot first (or the events after ``last_event_id``), then until terminal."""
        call = call or CallContext()
        tenant = tenant or call.tenant
        # Not while an event is applied but unpublished (its write in flight): the snapshot would already hold it,
        # and the tap would deliver it again after.
        record, active = await self._settled(task_id, tenant, call.user)
        if record is None and active is None:
            raise TaskNotFoundError(task_id=task_id)
        # No await from here until the tap is open: the snapshot and the tap's starting point must agree.
        if active is not None:
            assert active.record is not None
            snapshot, stored_seq = (
                copy_task(active.record.task),
                self.bus.last_seq(task_id, active.record.event_seq),
            )
        else:
            assert record is not None
            snapshot, stored_seq = record.task, record.event_seq
        terminal = snapshot.status.state in TERMINAL
        if terminal and last_event_id is None:
            # (With a Last-Event-ID, a stream resumed after the end: below.)
            raise UnsupportedOperationError(
                f"task {task_id} is {snapshot.status.state.name}; only active tasks can be subscribed to "
                "(use GetTask for the final state)",
                task_id=task_id,
            )
        if self.bus.tap_count(task_id) >= self.max_subscribers:
            raise ResourceExhaustedError(f"task {task_id} already has {self.max_subscribers} subscribers")
        if last_event_id is not None:
            tap, gap = await self.bus.open(task_id, after=last_event_id, base_seq=stored_seq)
            if not gap:
                if terminal:
                    # A stream resumed after the task ended: the events it missed, up to the end, are still in the
                    # log (a finished task's log is kept a while for this); nothing more will come.
                    tap.finish()
                items = self._subscription(tap, None, tenant, call.user, forget=terminal)
                return _Subscription(items, self.bus, tap, forget=terminal)
            self.bus.close_tap(tap)
            # The log no longer reaches back to the client's id (the ring moved on, the finished task's log expired or
            # was never kept: a restart, a task nobody streamed). A terminal task is resumed as any other (CONTRACT):
            # its snapshot, then what the log holds after it, then the end; not refused (a client reconnecting after
            # the task ended must learn how it ended on the stream it resumed).
        seen = last_event_id or 0
        # From the snapshot: it stands for every event up to ``stored_seq``; replay whatever came after it.
        tap, gap = await self.bus.open(task_id, after=max(stored_seq, seen), base_seq=stored_seq)
        beyond = False
        if gap and seen > stored_seq:
            # The client's id is beyond anything the log has numbered: no position at all. Go on from the snapshot
            # with what the log holds after it (a stored snapshot may be older than the log's top).
            self.bus.close_tap(tap)
            tap, gap = await self.bus.open(task_id, after=stored_seq, base_seq=stored_seq)
            beyond = not gap
        if gap:
            self.bus.close_tap(tap)
            tap, _ = await self.bus.open(task_id, base_seq=stored_seq)
            stored_seq = tap.last_seq
        # The snapshot's id is not below the client's Last-Event-ID (resuming from it must not repeat events), unless
        # that id is beyond anything the log has numbered (then it is no position at all, and later ids must rise).
        first = (stored_seq if beyond else max(stored_seq, min(seen, tap.head)), snapshot)
        if terminal:
            tap.finish()  # the snapshot is the final state, and anything the log holds after it is in the tap now
        items = self._subscription(tap, first, tenant, call.user, forget=terminal)
        return _Subscription(items, self.bus, tap, forget=terminal)

    async def _subscription(
        self, tap: Tap, first: tuple[int, Task] | None, tenant: str, owner: str, *, forget: bool = False
    ) -> AsyncGenerator[StreamItem, None]:
        try:
            if first is not None:
                seq, task = first
                yield (seq, task, StreamResponse(task=task).to_json())
            async for item in self._follow(tap, until_terminal=True, tenant=tenant, owner=owner):
                yield item
        finally:
            self.bus.close_tap(tap)
            if forget:
                self.bus.forget(tap.task_id)


class EventStream:
    """The events of one stream, plus ``pending()``: how many are already buffered, so a writer can send a burst
    in one write and flush as soon as nothing more is ready.

    Either ``items`` is set from the start, or ``opener`` is: a coroutine function run at the first ``__anext__``
    that admits the stream and returns its events (a send's stream: its ``_follow`` generator, iterated here
    directly, with no generator per event in between)."""

    __slots__ = ("items", "opener", "pending", "tap")

    def __init__(self) -> None:
        self.items: AsyncGenerator[StreamItem, None] | None = None
        self.opener: Callable[[], Awaitable[AsyncGenerator[StreamItem, None]]] | None = None
        self.tap: Tap | None = None
        # Events buffered and ready to read without waiting: the tap's own method once it is attached (a writer
        # asks after every event; a method here calling the tap's would be a frame more each time).
        self.pending: Callable[[], int] = _none_pending

    def attach(self, tap: Tap) -> None:
        """The tap the stream's events come from (known once the execution starts)."""
        self.tap = tap
        self.pending = tap.pending

    def __aiter__(self) -> EventStream:
        return self

    def __anext__(self) -> Awaitable[StreamItem]:
        # The generator's own awaitable, not a coroutine around it: one frame less per event.
        items = self.items
        if items is None:
            return self._open()
        return items.__anext__()

    async def _open(self) -> StreamItem:
        opener, self.opener = self.opener, None
        if opener is None:
            raise StopAsyncIteration  # its opening failed, or it was closed: ended, as a finished generator is
        items = self.items = await opener()
        return await items.__anext__()

    async def aclose(self) -> None:
        # Closed before its first event was asked for: nothing was admitted, there is nothing to release.
        self.opener = None
        if self.items is not None:
            await self.items.aclose()


def _none_pending() -> int:
    return 0


class _Subscription:
    """What ``subscribe`` returns: its tap is registered from the start, so closing must release it even when
    iteration never began (``aclose()`` on an unstarted async generator runs none of its code, not its ``finally``).
    """

    __slots__ = ("_bus", "_forget", "_items", "_tap")

    def __init__(
        self, items: AsyncGenerator[StreamItem, None], bus: EventBus, tap: Tap, *, forget: bool = False
    ) -> None:
        self._items = items
        self._bus = bus
        self._tap = tap
        self._forget = forget  # the task is terminal: its log may go with this (last) reader

    def __aiter__(self) -> _Subscription:
        return self

    async def __anext__(self) -> StreamItem:
        return await self._items.__anext__()

    def pending(self) -> int:
        """Events buffered and ready to read without waiting."""
        return self._tap.pending()

    async def aclose(self) -> None:
        try:
            await self._items.aclose()
        finally:
            self._bus.close_tap(self._tap)
            if self._forget:
                self._bus.forget(self._tap.task_id)
