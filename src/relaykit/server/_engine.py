"""The task engine: runs executors, folds their events into tasks, persists, and publishes.

Invariants:

* one runner per task processes its messages one at a time; many tasks run concurrently;
* every event of an execution goes through ``_on_event`` in the executor's own coroutine: checked, applied by the
  state machine, persisted (status changes and new tasks before they are published; artifact chunks coalesced and
  flushed at checkpoints), then published once as encoded ``StreamResponse`` bytes;
* every execution ends in a terminal or interrupted state (an agent that returns with its task still active has
  failed it), and its queue is closed;
* a caller going away (client disconnect) never cancels a task; only ``cancel`` and shutdown do;
* writes are never torn by cancellation: a write in flight completes before the cancellation is honoured.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

from relaykit._errors import (
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    ResourceExhaustedError,
    ServiceUnavailableError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit._model import utc_now
from relaykit._state import INTERRUPTED, TERMINAL, apply
from relaykit._types import (
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    new_id,
    stream_json,
)
from relaykit.backends._base import TaskRecord, TaskStore
from relaykit.backends._bus import EventBus, LocalEventBus
from relaykit.backends._memory import MemoryTaskStore
from relaykit.server._active import ActiveTask, PendingRequest
from relaykit.server._context import CallContext, RequestContext
from relaykit.server._executor import AgentExecutor
from relaykit.server._queue import Event, EventQueue
from relaykit.server._readers import EventStream, Readers, StreamItem, copy_task

__all__ = ["EventStream", "StreamItem", "TaskEngine"]

log = logging.getLogger("relaykit.engine")


_SAFE_FAILURE = "The agent failed while handling this task."
_YIELD_INTERVAL = 0.010


class _NoDeadline:
    """Stands in for ``asyncio.timeout(None)`` (which still costs a context manager per execution)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None

    def expired(self) -> bool:
        return False


_NO_DEADLINE = _NoDeadline()
_ACTIVE_STATES = (TaskState.SUBMITTED, TaskState.WORKING)


def _agent_message(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=new_id(), role=Role.AGENT, parts=[Part(text=text)], task_id=task_id, context_id=context_id
    )


def accept_continuation(message: Message, task_id: str, context_id: str, task: Task | None) -> None:
    """The rules for a message to an existing task (the one in-process runner and the scale-out accepting side
    share them): none to a terminal task, the context must match; the message joins the task's context."""
    if task is not None and task.status.state in TERMINAL:
        raise UnsupportedOperationError(
            f"task {task.id} is {task.status.state.name}; terminal tasks take no more messages "
            "(start a new task in the same context)",
            task_id=task.id,
        )
    if message.context_id and message.context_id != context_id:
        raise InvalidParamsError(
            f"contextId {message.context_id!r} does not match task {task_id}'s context",
            field_violations=[("message.contextId", "does not match the task's contextId")],
        )
    message.context_id = context_id


class TaskEngine(Readers):
    """Runs an ``AgentExecutor`` over a task store and an event bus.

    >>> from relaykit.server import TaskEngine
    >>> # engine = TaskEngine(MyExecutor()); await engine.start(); task = await engine.send(request)
    """

    def __init__(
        self,
        executor: AgentExecutor,
        *,
        store: TaskStore | None = None,
        bus: EventBus | None = None,
        executor_timeout: float | None = None,
        cancel_grace: float = 0.0,
        max_concurrent: int = 1000,
        max_queued: int = 16,
        max_subscribers: int = 64,
        send_timeout: float | None = None,
        checkpoint_chunks: int = 256,
        checkpoint_seconds: float = 1.0,
        on_event: Any = None,
    ) -> None:
        self.executor = executor
        self.store: TaskStore = store if store is not None else MemoryTaskStore()
        self.bus: EventBus = bus if bus is not None else LocalEventBus()
        self.executor_timeout = executor_timeout
        self.cancel_grace = cancel_grace
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self.max_subscribers = max_subscribers
        self.send_timeout = send_timeout
        self.checkpoint_chunks = checkpoint_chunks
        self.checkpoint_seconds = checkpoint_seconds
        # Hook for push delivery: called with (task_id, tenant, owner, seq, event, data) after each publish.
        self.on_event = on_event
        self.registry: dict[str, ActiveTask] = {}
        # Scale-out (``relaykit.server.Cluster``): sends, streams and cancels go through the work queue, and the
        # cluster learns when this process stops running a task (to release its claim).
        self.cluster: Any = None
        self.on_idle: Any = None
        self._remote_bus = not isinstance(self.bus, LocalEventBus)
        self._running = 0
        self._accepting = False
        self._started = False
        self._sync_store = isinstance(self.store, MemoryTaskStore)
        self._idle = asyncio.Event()
        self._idle.set()

    # --- lifecycle ---------------------------------------------------------------------------------------

    async def start(self, *, recover: bool = True) -> int:
        """Open the store and bus; mark tasks a dead process left active FAILED. Returns how many."""
        await self.store.start()
        await self.bus.start()
        if self.cluster is not None:
            # Replicas share the store: a task left active is recovered by lease (the cluster's sweeper), never by
            # a blanket "server restarted" that would fail the tasks other live replicas are running.
            recover = False
        recovered = await self.store.fail_orphans("server restarted") if recover else 0
        if recovered:
            log.warning("marked %d task(s) left active by a previous process as FAILED", recovered)
        self._accepting = True
        self._started = True
        if self.cluster is not None:
            await self.cluster.start()
        return recovered

    async def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting, let executions finish for ``grace`` seconds, fail the rest, close everything."""
        if not self._started:
            return
        self._accepting = False
        if self.cluster is not None:
            await self.cluster.stop_intake()
        if self.registry:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=grace)
        for active in list(self.registry.values()):
            active.cancel_reason = "shutdown"
            for req in active.requests:
                req.reject(ServiceUnavailableError("server is shutting down"))
            active.requests.clear()
            if active.runner is not None:
                active.runner.cancel()
        runners = [a.runner for a in self.registry.values() if a.runner is not None]
        if runners:
            await asyncio.gather(*runners, return_exceptions=True)
        try:
            await self.executor.on_shutdown()
        except Exception:
            log.exception("executor on_shutdown failed")
        if self.cluster is not None:
            await self.cluster.close()
        await self.bus.close()
        await self.store.close()
        self._started = False

    @property
    def accepting(self) -> bool:
        """False once shutdown began."""
        return self._accepting

    @property
    def running_executions(self) -> int:
        """Executions in progress right now."""
        return self._running

    # --- sending -----------------------------------------------------------------------------------------

    async def _admit(self, request: SendMessageRequest, call: CallContext, *, streaming: bool) -> PendingRequest:
        if not self._accepting:
            raise ServiceUnavailableError("server is shutting down; retry against another instance")
        message = request.message
        if not message.message_id:
            raise InvalidParamsError(
                "message.messageId is required", field_violations=[("message.messageId", "required")]
            )
        tenant = request.tenant or call.tenant
        owner = call.user
        if message.task_id:
            active = self.registry.get(message.task_id)
            if active is None or active.tenant != tenant or active.owner != owner:
                record = await self.store.get(message.task_id, tenant=tenant, owner=owner)
                if record is None:
                    raise TaskNotFoundError(task_id=message.task_id)
                active = self.registry.get(message.task_id)
                if active is None:
                    active = ActiveTask(record.task.id, record.task.context_id, tenant, owner, record)
            accept_continuation(message, active.task_id, active.context_id, active.task)
        else:
            context_id = message.context_id or new_id()
            message.context_id = context_id
            active = ActiveTask(new_id(), context_id, tenant, owner, None)
        pending = PendingRequest(message, request.configuration, request.metadata, call, streaming=streaming)
        self._enqueue(active, pending)
        return pending

    def _enqueue(self, active: ActiveTask, pending: PendingRequest) -> None:
        if len(active.requests) >= self.max_queued:
            raise ResourceExhaustedError(
                f"task {active.task_id} already has {self.max_queued} messages waiting; retry later"
            )
        if active.runner is None and self._running >= self.max_concurrent:
            raise ResourceExhaustedError(
                f"the server is running its limit of {self.max_concurrent} executions; retry later"
            )
        self.registry[active.task_id] = active
        self._idle.clear()
        active.requests.append(pending)
        if active.runner is None:
            self._running += 1
            # The loop its futures were made on (get_running_loop costs a getpid system call each time).
            loop = pending.done.get_loop()
            active.runner = loop.create_task(self._run(active), name=f"relaykit-task-{active.task_id}")

    def admit_claimed(
        self,
        request: SendMessageRequest,
        call: CallContext,
        record: TaskRecord,
        *,
        fresh: bool = False,
        rerun: bool = False,
    ) -> PendingRequest:
        """Run a message taken from the work queue (scale-out) on a task this process has claimed.

        ``record`` is the task as stored at the claim. ``fresh``: it is the SUBMITTED row the accepting replica
        wrote for a new task (the execution treats the task as new). ``rerun``: the message is already in the
        task's history (an idempotent executor re-running a lost worker's execution).
        """
        if not self._accepting:
            raise ServiceUnavailableError("server is shutting down; retry against another instance")
        task = record.task
        active = self.registry.get(task.id)
        if active is None:
            if fresh:
                active = ActiveTask(task.id, task.context_id, record.tenant, record.owner, None)
                active.provisional = record
            else:
                active = ActiveTask(task.id, task.context_id, record.tenant, record.owner, record)
        message = request.message
        message.context_id = active.context_id
        pending = PendingRequest(message, request.configuration, request.metadata, call)
        pending.rerun = rerun
        self._enqueue(active, pending)
        return pending

    async def fail_lost(self, record: TaskRecord, reason: str) -> Task:
        """Mark a claimed task whose runner died FAILED with ``reason`` (persisted, then published)."""
        active = ActiveTask(record.task.id, record.task.context_id, record.tenant, record.owner, record)
        await self.bus.prepare(active.task_id, record.event_seq)
        await self._write_status(active, TaskState.FAILED, reason)
        self.bus.forget(active.task_id)
        return copy_task(record.task)

    async def send(self, request: SendMessageRequest, call: CallContext | None = None) -> Task | Message:
        """SendMessage: blocking (until terminal or interrupted) unless ``configuration.returnImmediately``."""
        result = await self.send_raw(request, call)
        return Task.model_validate_json(result) if isinstance(result, bytes) else result

    async def send_raw(self, request: SendMessageRequest, call: CallContext | None = None) -> bytes | Message:
        """``send``, with a task answered as its ProtoJSON bytes (as just persisted), so a binding can relay it
        without decoding and re-encoding it."""
        if self.cluster is not None:
            return await self.cluster.send(request, call or CallContext())  # type: ignore[no-any-return]
        pending = await self._admit(request, call or CallContext(), streaming=False)
        config = request.configuration
        fut = pending.first if config is not None and config.return_immediately else pending.done
        if self.send_timeout is None:
            return await fut
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.send_timeout)
        except TimeoutError:
            # The task goes on; answer with where it is now rather than hold the caller forever.
            active = self.registry.get(pending.message.task_id or "")
            task = active.task if active is not None else None
            if task is None:
                return await pending.first
            return task.to_json()

    # --- the runner --------------------------------------------------------------------------------------

    async def _run(self, active: ActiveTask) -> None:
        try:
            while active.requests:
                pending = active.requests.popleft()
                task = active.task
                if task is not None and task.status.state in TERMINAL:
                    pending.reject(
                        UnsupportedOperationError(
                            f"task {task.id} became {task.status.state.name} while this message waited",
                            task_id=task.id,
                        )
                    )
                    continue
                try:
                    await self._execute(active, pending)
                except Exception:
                    # The engine itself failed (typically the store refused a write). Without this the callers of this
                    # and every queued message would wait forever and the runner's exception would go unretrieved.
                    # The live state may now differ from the store, so drop it: the next message starts from the store.
                    log.exception("task %s: could not record the execution", active.task_id)
                    self._abandon(active, pending)
                    return
        except asyncio.CancelledError:
            # Shutdown: anything still running is failed so no task is left WORKING by a clean stop.
            await self._finish_shutdown(active)
        finally:
            active.runner = None
            self._running -= 1
            if self.registry.get(active.task_id) is active:
                del self.registry[active.task_id]
            if not self.registry:
                self._idle.set()
            if self.on_idle is not None:
                self.on_idle(active)

    def _abandon(self, active: ActiveTask, pending: PendingRequest) -> None:
        error = InternalError("the server could not record this task; try again")
        for req in (pending, *active.requests):
            req.reject(error)
            if req.tap is not None:
                req.tap.finish()
        active.requests.clear()
        active.current = None
        active.context = None

    async def _finish_shutdown(self, active: ActiveTask) -> None:
        pending = active.current
        task = active.task
        try:
            if task is not None and task.status.state not in TERMINAL and task.status.state not in INTERRUPTED:
                await self._write_status(active, TaskState.FAILED, "server shutdown")
        except Exception:
            log.exception("could not mark task %s failed at shutdown", active.task_id)
        if pending is not None:
            if task is None and not active.message_mode:
                # Nothing was published yet: the caller learns why there is no answer.
                pending.reject(ServiceUnavailableError("server is shutting down"))
            self._conclude(active, pending)

    async def _execute(self, active: ActiveTask, pending: PendingRequest) -> None:
        active.current = pending
        active.last_yield = 0.0
        active.agent_error = None
        active.cancel_requested = False
        active.execute_returned = False
        active.message_mode = False
        message = pending.message
        task = active.task
        body: bytes | None = None
        if self._remote_bus:
            # The shared log may be ahead of the stored task (chunks published before their checkpoint).
            await self.bus.prepare(active.task_id, self._base_seq(active))
        if task is not None:
            # A continuation: the user's message joins the history now; it is persisted with the next status write.
            message.task_id = task.id
            if not pending.rerun:
                task.history.append(message)
                active.dirty = True
            body = task.to_json()
        context = RequestContext(
            task_id=active.task_id,
            context_id=active.context_id,
            message=message,
            task=Task.model_validate_json(body) if body is not None else None,
            metadata=pending.metadata,
            configuration=pending.configuration,
            call=pending.call,
        )
        active.context = context
        if pending.started is not None and not pending.started.done():
            tap, _ = await self.bus.open(active.task_id, base_seq=self._base_seq(active))
            pending.tap = tap
            pending.resolve(pending.started, tap)
            # Let the streaming caller reach its tap before the first event, so that event goes out at once.
            await asyncio.sleep(0)
        queue = EventQueue(functools.partial(self._on_event, active, pending))
        # Only this deadline's expiry is an executor timeout: a TimeoutError the agent raises itself (an upstream call
        # timing out) is an ordinary agent failure. (wait_for could not tell the two apart, and formatting the
        # timeout message with ``executor_timeout=None`` raised, leaving the caller waiting forever.)
        deadline = asyncio.timeout(self.executor_timeout) if self.executor_timeout is not None else _NO_DEADLINE
        try:
            if body is not None:
                # Every task stream starts with the Task (spec §5.5); for a continuation, the current snapshot.
                await self._emit(active, None, None, persist=False, body=body)
                pending.resolve(pending.first, body)
            try:
                if deadline is _NO_DEADLINE:
                    await self.executor.execute(context, queue)
                else:
                    async with deadline:
                        await self.executor.execute(context, queue)
            finally:
                active.execute_returned = True
        except asyncio.CancelledError:
            queue.close()
            if not active.cancel_requested:
                raise
            await self._after_cancel(active, context)
        except Exception as exc:
            queue.close()
            if isinstance(exc, TimeoutError) and deadline.expired():
                log.warning("task %s: executor timed out after %ss", active.task_id, self.executor_timeout)
                await self._fail(active, f"The agent did not finish within {self.executor_timeout:g} seconds.")
            elif active.agent_error is not None or isinstance(exc, InvalidAgentResponseError):
                reason = active.agent_error or exc
                log.error("task %s: invalid agent output: %s", active.task_id, reason)
                await self._fail(active, "The agent produced an invalid response.")
            else:
                log.exception("task %s: executor raised", active.task_id)
                await self._fail(active, _SAFE_FAILURE)
        else:
            queue.close()
            if active.agent_error is not None:
                log.error("task %s: invalid agent output: %s", active.task_id, active.agent_error)
                await self._fail(active, "The agent produced an invalid response.")
            else:
                await self._check_outcome(active)
        self._conclude(active, pending)

    def _conclude(self, active: ActiveTask, pending: PendingRequest) -> None:
        task = active.task
        if active.message_mode:
            first = pending.first
            # ``first`` is cancelled when a returnImmediately caller left; ``exception()`` would raise then.
            reply = first.result() if first.done() and not first.cancelled() and first.exception() is None else None
            if reply is not None:
                pending.resolve(pending.done, reply)
        elif task is not None:
            body = self._body(active)
            pending.resolve(pending.first, body)
            pending.resolve(pending.done, body)
        else:
            pending.reject(InvalidAgentResponseError("the agent returned without replying"))
        if pending.tap is not None:
            pending.tap.finish()
        active.current = None
        active.context = None
        if (task is not None and task.status.state in TERMINAL) or active.message_mode:
            self.bus.forget(active.task_id)

    async def _check_outcome(self, active: ActiveTask) -> None:
        task = active.task
        if active.message_mode:
            return
        if task is None:
            log.error("task %s: the agent returned without publishing a Message or a Task", active.task_id)
            return
        if task.status.state in _ACTIVE_STATES:
            log.error(
                "task %s: the agent returned while the task was still %s",
                active.task_id,
                task.status.state.name,
            )
            await self._fail(active, "The agent stopped before finishing the task.")
        elif active.dirty or active.chunks_since_flush:
            await self._persist(active)

    # --- events ------------------------------------------------------------------------------------------

    async def _on_event(self, active: ActiveTask, pending: PendingRequest, event: Event) -> None:
        if active.agent_error is not None:
            raise active.agent_error
        try:
            await self._record(active, pending, event)
        except InvalidAgentResponseError as exc:
            active.agent_error = exc
            raise

    async def _record(self, active: ActiveTask, pending: PendingRequest, event: Event) -> None:
        if isinstance(event, Message):
            if active.task is not None or active.message_mode:
                raise InvalidAgentResponseError(
                    "a Message after the task was created, or a second Message: replies about a task are task events",
                    task_id=active.task_id,
                )
            active.message_mode = True
            if not event.context_id:
                event.context_id = active.context_id
            # A bare Message reply belongs to no task (the task id was only provisional).
            event.task_id = ""
            if active.provisional is not None:
                # The accepting replica stored the task before the agent chose to reply with a Message: remove it.
                provisional, active.provisional = active.provisional, None
                await self.store.delete(provisional.task.id, tenant=provisional.tenant, owner=provisional.owner)
            await self._emit(active, event, None, persist=False)
            pending.resolve(pending.first, event)
            return
        if active.message_mode:
            raise InvalidAgentResponseError("a task event after a Message reply", task_id=active.task_id)
        event_task_id = event.id if isinstance(event, Task) else event.task_id
        if event_task_id != active.task_id:
            raise InvalidAgentResponseError(
                f"event for task {event_task_id!r} published while executing task {active.task_id!r}"
            )
        if active.record is None:
            await self._create(active, pending, event)
            if isinstance(event, Task):
                return
        task = active.task
        assert task is not None
        if isinstance(event, TaskArtifactUpdateEvent):
            apply(task, event)
            active.chunks_since_flush += 1
            now = time.monotonic()
            flush = (
                active.chunks_since_flush >= self.checkpoint_chunks
                or now - active.last_flush >= self.checkpoint_seconds
            )
            await self._emit(active, event, None, persist=flush)
        elif isinstance(event, TaskStatusUpdateEvent):
            if event.context_id != active.context_id:
                raise InvalidAgentResponseError(f"status event with contextId {event.context_id!r}")
            event.status.timestamp = utc_now()
            apply(task, event)
            await self._emit(active, event, None, persist=True)
        else:  # a Task object replacing the snapshot
            if event.status.timestamp is None or event.status.state is not task.status.state:
                event.status.timestamp = utc_now()
            apply(task, event)
            await self._emit(active, None, None, persist=True)
        if not pending.first.done():
            pending.resolve(pending.first, self._body(active))

    async def _create(self, active: ActiveTask, pending: PendingRequest, event: Event | None) -> None:
        message = pending.message
        message.task_id = active.task_id
        if isinstance(event, Task):
            if event.context_id and event.context_id != active.context_id:
                raise InvalidAgentResponseError(f"new task carries contextId {event.context_id!r}")
            task = copy_task(event)
            task.context_id = active.context_id
            if not task.history:
                task.history = [message]
            if task.status.state is TaskState.UNSPECIFIED:
                task.status.state = TaskState.SUBMITTED
            task.status.timestamp = utc_now()
        else:
            # Exact values (ids are str, the message validated): what Task(...) would validate them to.
            task = Task._trusted(
                id=active.task_id,
                context_id=active.context_id,
                status=TaskStatus._trusted(state=TaskState.SUBMITTED, timestamp=utc_now()),
                history=[message],
            )
        provisional, active.provisional = active.provisional, None
        version = provisional.version if provisional is not None else 0  # write over the accepted row
        active.record = TaskRecord(task, active.tenant, active.owner, version, self.bus.last_seq(active.task_id))
        await self._emit(active, None, None, persist=True)
        pending.resolve(pending.first, self._body(active))

    def _base_seq(self, active: ActiveTask) -> int:
        return active.record.event_seq if active.record is not None else 0

    async def _emit(
        self, active: ActiveTask, event: Any, data: bytes | None, *, persist: bool, body: bytes | None = None
    ) -> int:
        """Persist (when asked) and then publish one event. The stored ``event_seq`` names this very event, so a
        subscriber that starts from the stored task resumes exactly after it.

        ``event=None`` publishes the task itself: its bytes are the ones just persisted (or ``body``), and the event
        object is a frozen copy, since readers look at it later while the live task keeps changing.
        ``data=None`` leaves encoding to whoever needs the bytes (a live tap, the push hook, a replay).
        """
        record = active.record
        active.emitting = True
        base: int | None = None
        try:
            if persist and record is not None:
                # The stored event_seq names the event being published now (the one after the log's newest).
                base = self.bus.last_seq(active.task_id, record.event_seq)
                record.event_seq = base + 1
                await self._persist(active)
            if event is None:
                assert record is not None
                if body is None:
                    body = self._body(active)
                data = stream_json(record.task, body)
                terminal = record.task.status.state in TERMINAL
                if self.on_event is not None or self.bus.tap_count(active.task_id) > 0:
                    # Listeners get their own immutable copy: the live task keeps changing.
                    event = Task.model_validate_json(body)
                # else the replay ring keeps only the bytes; a later replay decodes them (rarely needed).
                return await self._publish(active, event, data, terminal=terminal, base=base)
            return await self._publish(active, event, data, base=base)
        finally:
            active.emitting = False
            waiter = active.emit_waiter
            if waiter is not None:
                active.emit_waiter = None
                if not waiter.done():
                    waiter.set_result(None)

    async def _publish(
        self,
        active: ActiveTask,
        event: Any,
        data: bytes | None,
        *,
        terminal: bool | None = None,
        base: int | None = None,
    ) -> int:
        if terminal is None:
            terminal = isinstance(event, Message) or (
                isinstance(event, TaskStatusUpdateEvent | Task) and event.status.state in TERMINAL
            )
        bus = self.bus
        current = active.current
        seq = await bus.publish(
            active.task_id,
            event,
            data,
            terminal=terminal,
            base_seq=base if base is not None else self._base_seq(active),
            execution=current.message.message_id if current is not None else "",
        )
        if active.record is not None:
            active.record.event_seq = seq
        if self.on_event is not None:
            try:
                await self.on_event(active, seq, event, data if data is not None else stream_json(event))
            except Exception:
                log.exception("task %s: event hook failed", active.task_id)
        if bus.woke:
            # A reader was waiting for this event. Let it run now for the first such event (so a stream's first event
            # leaves at once, not after the agent's whole burst), then at most every 10 ms while the agent keeps
            # publishing without awaiting anything: readers then take the burst in a few batched writes, and with
            # many concurrent streams no runner hands the loop over after every single event.
            now = time.monotonic()
            if now - active.last_yield >= _YIELD_INTERVAL:
                active.last_yield = now
                await asyncio.sleep(0)
        return seq

    def _body(self, active: ActiveTask) -> bytes:
        """The task's ProtoJSON: the bytes of its last write when nothing changed since, else freshly encoded."""
        record = active.record
        assert record is not None
        if record.body is None or active.dirty or active.chunks_since_flush:
            return record.task.to_json()
        return record.body

    async def _persist(self, active: ActiveTask) -> None:
        record = active.record
        if record is None:
            return
        active.dirty = False
        active.chunks_since_flush = 0
        active.last_flush = time.monotonic()
        record.body = record.task.to_json()
        if self.cluster is not None:
            # Scale-out: the write also keeps or releases this process's claim on the task (Cluster.save).
            write = asyncio.ensure_future(self.cluster.save(active, record))
        elif self._sync_store:
            await self.store.save(record)
            return
        else:
            write = asyncio.ensure_future(self.store.save(record))
        # Finish a write before honouring a cancellation, so a cancel never tears or forgets a write.
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await write
            raise

    async def _write_status(self, active: ActiveTask, state: TaskState, text: str) -> None:
        task = active.task
        if task is None:
            return
        event = TaskStatusUpdateEvent(
            task_id=task.id,
            context_id=task.context_id,
            status=TaskStatus(state=state, message=_agent_message(text, task.id, task.context_id), timestamp=utc_now()),
        )
        apply(task, event)
        await self._emit(active, event, None, persist=True)

    async def _fail(self, active: ActiveTask, text: str) -> None:
        task = active.task
        if task is None:
            pending = active.current
            if active.message_mode or pending is None:
                return
            # Nothing was published yet, but the failure still belongs to a task (ARCHITECTURE §3: an exception in
            # execute ⇒ task FAILED; CONTRACT "@agent": raising ⇒ FAILED): create it, then fail it.
            await self._create(active, pending, None)
            task = active.task
            assert task is not None
        if task.status.state in TERMINAL:
            if active.dirty or active.chunks_since_flush:
                await self._persist(active)
            return
        await self._write_status(active, TaskState.FAILED, text)

    # --- cancel ------------------------------------------------------------------------------------------

    async def cancel(self, task_id: str, call: CallContext | None = None, *, tenant: str = "") -> Task:
        """CancelTask: CANCELED is persisted before this returns; a terminal task raises TaskNotCancelableError."""
        call = call or CallContext()
        tenant = tenant or call.tenant
        if self.cluster is not None:
            return await self.cluster.cancel(task_id, call, tenant)  # type: ignore[no-any-return]
        return await self.cancel_here(task_id, call, tenant)

    async def cancel_here(self, task_id: str, call: CallContext, tenant: str) -> Task:
        """Cancel with what this process holds: its running execution of the task, or the stored task (which the
        caller has claimed, in scale-out)."""
        while (active := self._visible(task_id, tenant, call.user)) is not None and active.current and active.runner:
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
            if pending is not None and not pending.done.done():
                if self.cancel_grace > 0:
                    # Let a cooperative executor finish on its own first. A timer, not this coroutine, delivers the
                    # cancellation, so it still happens if this caller goes away during the grace.
                    timer = asyncio.get_running_loop().call_later(self.cancel_grace, self._interrupt, active, pending)
                    pending.done.add_done_callback(lambda _: timer.cancel())
                else:
                    self._interrupt(active, pending)
        done = pending.done if pending is not None else None
        if done is not None:
            await asyncio.wait({done})
        task = active.task
        assert task is not None
        return copy_task(task)

    @staticmethod
    def _interrupt(active: ActiveTask, pending: PendingRequest) -> None:
        # Never once execute has returned: the CancelledError would land in the engine's own writes of the outcome
        # (torn write, and the runner would take it for a shutdown). The cancel then waits for that outcome instead.
        if active.current is pending and not pending.done.done() and not active.execute_returned and active.runner:
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
