"""Cancellation: CancelTask on a running execution, or on a task at rest (interrupted, or between messages).

Invariants:

* a caller going away (client disconnect) never cancels a task; only ``cancel`` and shutdown do;
* the order of a cancel (CONTRACT): flag and token set, optional grace, ``CancelledError`` into ``execute``, then the
  executor's ``cancel()``, then CANCELED persisted before ``cancel`` returns;
* only the first cancel of an execution interrupts it, and never once ``execute`` has returned (the CancelledError
  would land in the recording of the outcome); later cancels wait for the same outcome.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from relaykit._enums import TaskState
from relaykit._errors import InvalidAgentResponseError, TaskNotCancelableError, TaskNotFoundError
from relaykit._model import utc_now
from relaykit._state import TERMINAL, apply
from relaykit._types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from relaykit.server._active import ActiveTask, PendingRequest, visible
from relaykit.server._context import CallContext, RequestContext
from relaykit.server._executor import AgentExecutor
from relaykit.server._queue import Event, EventQueue
from relaykit.server._readers import copy_task
from relaykit.server._recorder import Recorder

__all__ = ["Cancellation"]

log = logging.getLogger("relaykit.engine")


class Cancellation(Recorder):
    """The layer of ``TaskEngine`` that cancels; it records through the ``Recorder`` below it."""

    executor: AgentExecutor
    cancel_grace: float
    registry: dict[str, ActiveTask]
    _remote_bus: bool

    async def cancel_here(self, task_id: str, call: CallContext, tenant: str) -> Task:
        """Cancel with what this process holds: its running execution of the task, or the stored task (which the
        caller has claimed, in scale-out)."""
        while (
            (active := visible(self.registry, task_id, tenant, call.user)) is not None
            and active.current
            and active.runner
        ):
            assert active.task is not None
            if active.task.status.state in TERMINAL:
                raise TaskNotCancelableError(
                    f"task {task_id} is already {active.task.status.state.name}", task_id=task_id
                )
            task = await self._cancel_running(active)
            if task.status.state in TERMINAL:
                return task
            # The execution ended interrupted before the cancel could reach it (or a queued message runs now):
            # look again, and cancel the task as it is now.
        record = await self.store.get(task_id, tenant=tenant, owner=call.user)
        if record is None:
            raise TaskNotFoundError(task_id=task_id)
        if record.task.status.state in TERMINAL:
            raise TaskNotCancelableError(f"task {task_id} is already {record.task.status.state.name}", task_id=task_id)
        # Not executing (interrupted, or between messages): run cancel() and write CANCELED here.
        idle = ActiveTask(task_id, record.task.context_id, tenant, call.user, record)
        if self._remote_bus:
            await self.bus.prepare(task_id, record.event_seq)
        context = RequestContext(
            task_id=task_id,
            context_id=record.task.context_id,
            message=None,
            task=copy_task(record.task),
            call=call,
        )
        context.request_cancel()
        await self._after_cancel(idle, context)
        # The task is terminal now: drop its log unless someone is reading it (as _conclude does for executions);
        # otherwise every canceled interrupted task would keep its replay ring until LRU eviction.
        self.bus.forget(task_id)
        assert idle.task is not None
        return copy_task(idle.task)

    async def _cancel_running(self, active: ActiveTask) -> Task:
        context = active.context
        assert active.runner is not None
        pending = active.current
        if not active.cancel_requested:
            # Only the first cancel interrupts the execution. A second one (a client retrying) must not deliver
            # another CancelledError: it would land in the executor's cancel() or the CANCELED write, and the runner
            # would take it for a shutdown and fail the task. Later cancels just wait for the same outcome.
            active.cancel_requested = True
            if context is not None:
                context.request_cancel()
            if pending is not None and not pending.execution_end().done():
                if self.cancel_grace > 0:
                    # Let a cooperative executor finish on its own first. A timer, not this coroutine, delivers the
                    # cancellation, so it still happens if this caller goes away during the grace.
                    timer = asyncio.get_running_loop().call_later(self.cancel_grace, self._interrupt, active, pending)

                    def stop_timer(end: asyncio.Future[Any]) -> None:
                        # At the execution's end; an answer at an interrupted state during the grace (``done``) is
                        # not that end: wait for the one that replaced it (``PendingRequest.answer_early``).
                        later = pending.execution_end()
                        if later is not end:
                            later.add_done_callback(stop_timer)
                        else:
                            timer.cancel()

                    pending.execution_end().add_done_callback(stop_timer)
                else:
                    self._interrupt(active, pending)
        # The execution's end, not its caller's answer: that may have come at an interrupted state while the
        # execution went on (``Recorder._answer_interrupted``).
        done = pending.execution_end() if pending is not None else None
        if done is not None:
            await asyncio.wait({done})
        task = active.task
        assert task is not None
        return copy_task(task)

    @staticmethod
    def _interrupt(active: ActiveTask, pending: PendingRequest) -> None:
        # Never once execute has returned: the CancelledError would land in the engine's own writes of the outcome
        # (torn write, and the runner would take it for a shutdown). The cancel then waits for that outcome instead.
        if (
            active.current is pending
            and not pending.execution_end().done()
            and not active.execute_returned
            and active.runner
        ):
            active.runner.cancel()

    async def _after_cancel(self, active: ActiveTask, context: RequestContext) -> None:
        queue = EventQueue(lambda event: self._on_cancel_event(active, event))
        try:
            await self.executor.cancel(context, queue)
        except TaskNotCancelableError:
            if active.current is None:
                raise
            log.warning("task %s: executor refused cancel after execute was interrupted", active.task_id)
        finally:
            queue.close()
        task = active.task
        if task is not None and task.status.state not in TERMINAL:
            await self._write_status(active, TaskState.CANCELED, "Task canceled.")

    async def _on_cancel_event(self, active: ActiveTask, event: Event) -> None:
        if not isinstance(event, TaskStatusUpdateEvent | TaskArtifactUpdateEvent):
            raise InvalidAgentResponseError("cancel() may only publish status or artifact updates")
        task = active.task
        assert task is not None
        if isinstance(event, TaskStatusUpdateEvent):
            event.status.timestamp = utc_now()
        apply(task, event)
        await self._emit(active, event, None, persist=True)
