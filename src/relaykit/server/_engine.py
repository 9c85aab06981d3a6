"""The task engine: runs executors, folds their events into tasks, persists, and publishes.

``TaskEngine`` is what the handler and the cluster talk to. It owns the lifecycle and dispatches each operation: to
the cluster when the engine scales out, else down its layers, one module per concept, each with its invariants:

* ``_runner``: admission (limits, the rules for a message to an existing task) and the runner that executes it;
* ``_cancel``: CancelTask, on a running execution or a task at rest;
* ``_recorder``: each event applied by the state machine, persisted, then published;
* ``_readers``: GetTask, SubscribeToTask, and following a task's events.

The layers are classes stacked over the one engine object (``TaskEngine`` → ``Runner`` → ``Cancellation`` →
``Recorder``, beside ``Readers``): every call stays a plain method call, nothing forwards on the per-event path, and a
layer calls only itself and the layers below it (mypy holds it to that: each layer declares only the state it uses, so
a call upward does not type-check). A request goes down once and comes back up once: ``send`` admits
the message and awaits its outcome, the runner executes it, and the executor's events go down through the recorder to
the store, the bus and the push hook.

Invariants:

* a clean shutdown leaves no task SUBMITTED or WORKING: executions still running after the grace are failed, and
  waiting messages are refused;
* replicas (scale-out) share the store: a task left active is recovered by lease, never by a blanket "server
  restarted" at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime
from typing import Any

from relaykit._enums import TaskState
from relaykit._errors import ServiceUnavailableError
from relaykit._requests import SendMessageRequest
from relaykit._types import Message, Task, TaskStatusUpdateEvent, stream_json
from relaykit.backends._base import TaskRecord, TaskStore
from relaykit.backends._bus import EventBus
from relaykit.backends.memory import LocalEventBus, MemoryTaskStore
from relaykit.server._active import ActiveTask, PendingRequest
from relaykit.server._context import CallContext
from relaykit.server._executor import AgentExecutor
from relaykit.server._readers import EventStream, Readers, StreamItem, copy_task
from relaykit.server._recent import RecentMessages, Seen
from relaykit.server._runner import Runner
from relaykit.telemetry._seam import Telemetry

__all__ = ["EventStream", "StreamItem", "TaskEngine"]

log = logging.getLogger("relaykit.engine")


class TaskEngine(Runner, Readers):
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
        idempotency_window: float = 600.0,
        on_event: Any = None,
        max_artifact_bytes: int = 64 * 1024 * 1024,
        max_history_bytes: int = 16 * 1024 * 1024,
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
        self.max_artifact_bytes = max_artifact_bytes
        self.max_history_bytes = max_history_bytes
        # Hook for push delivery: called with (active task, seq, event, data) after each publish.
        self.on_event = on_event
        # Hook for push delivery: called with the active task when an execution creates it (see ``Recorder``).
        self.on_create: Callable[[ActiveTask], None] | None = None
        # Hook for push delivery: whether a state about to be stored owes a notification (see ``Recorder``).
        self.owes_push: Callable[[ActiveTask], bool] | None = None
        # Observability (relaykit.telemetry): None = off (each hook point is an ``is None`` test).
        self.telemetry: Telemetry | None = None
        self.registry: dict[str, ActiveTask] = {}
        # A repeated messageId within the window gets the original's outcome (scale-out keeps this in Redis).
        self.recent = RecentMessages(idempotency_window)
        # Scale-out (``relaykit.server.Cluster``): sends, streams and cancels go through the work queue, and the
        # cluster learns when this process stops running a task (to release its claim).
        self.cluster: Any = None
        self.on_idle: Any = None
        self._remote_bus = not isinstance(self.bus, LocalEventBus)
        self._local_bus = self.bus if type(self.bus) is LocalEventBus else None  # not a subclass: it may publish
        self._running = 0
        self.max_per_principal = 0  # RequestHandler sets it from its Quotas
        self._by_owner: dict[str, int] = {}
        self.max_queued_per_principal = 0  # likewise
        self._waiting: dict[str, int] = {}
        self.on_start: Any = None
        # Scale-out quotas (server._quotas, shared by replicas): awaited as gate(principal, task id, message id) when
        # the front accepts a message; raises the 429, returns what undoes it should the acceptance fail, or None.
        self.quota_gate: Any = None
        self._accepting = False
        self._started = False
        self._sync_store = isinstance(self.store, MemoryTaskStore)
        self._deferred: set[asyncio.Task[None]] = set()
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
        await self._recall_recent()
        recovered = await self.recover() if recover else 0
        self._accepting = True
        self._started = True
        if self.cluster is not None:
            await self.cluster.start()
        return recovered

    async def recover(self) -> int:
        """Mark tasks a dead process left active FAILED ("server restarted"); returns how many.

        Like any terminal transition, each FAILED status is persisted, then published under the next event id (a
        subscriber resuming with its Last-Event-ID gets it; the log is kept, not forgotten at once) and handed to
        the push hook (``A2AServer.start`` recovers after the push sender started, so the webhook is told).
        """
        failed: list[TaskRecord] = []
        recovered = await self.store.fail_orphans("server restarted", failed=failed)
        if recovered:
            log.warning("marked %d task(s) left active by a previous process as FAILED", recovered)
        for record in failed:
            task = record.task
            active = ActiveTask(task.id, task.context_id, record.tenant, record.owner, record)
            event = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
            try:
                base = await self.bus.prepare(task.id, record.event_seq - 1)
                await self._publish(active, event, None, terminal=True, base=base)
            except Exception:
                log.exception("task %s: could not publish its recovery", task.id)
        return recovered

    async def _recall_recent(self) -> None:
        """Refill the idempotency window from the tasks a previous process stored within it (SQLite, PostgreSQL):
        a client retrying across a restart does not run the agent again."""
        recent = self.recent
        first_messages = getattr(self.store, "first_messages", None)
        if first_messages is None or recent.window <= 0 or self.cluster is not None:
            return
        now = time.time()
        since = datetime.fromtimestamp(now - recent.window, UTC)
        rows = await first_messages(since, recent.limit)
        clock = time.monotonic()
        for tenant, owner, message_id, task_id, context_id, status_us in sorted(rows, key=lambda r: r[5]):
            at = clock - max(0.0, now - status_us / 1e6)
            recent.add(tenant, owner, message_id, Seen(task_id, context_id, at=at))

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
            self._unqueue(active.owner, len(active.requests))
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

    # --- operations -------------------------------------------------------------------------------------

    async def send(self, request: SendMessageRequest, call: CallContext | None = None) -> Task | Message:
        """SendMessage: blocking (until terminal or interrupted) unless ``configuration.returnImmediately``."""
        result = await self.send_raw(request, call)
        return Task.model_validate_json(result) if isinstance(result, bytes) else result

    async def send_raw(self, request: SendMessageRequest, call: CallContext | None = None) -> bytes | Message:
        """``send``, with a task answered as its ProtoJSON bytes (as just persisted), so a binding can relay it
        without decoding and re-encoding it."""
        if self.cluster is not None:
            return await self.cluster.send(request, call or CallContext())  # type: ignore[no-any-return]
        call = call or CallContext()
        pending = await self._admit(request, call, streaming=False)
        config = request.configuration
        immediate = config is not None and config.return_immediately
        if isinstance(pending, Seen):
            return await self._repeat(pending, immediate, request.tenant or call.tenant, call)
        if not immediate and self.send_timeout is None:  # ``outcome``'s common case, without a coroutine of its own
            return await pending.done
        return await self.outcome(pending, immediate)

    async def outcome(self, pending: PendingRequest, immediate: bool) -> bytes | Message:
        """What SendMessage answers for an admitted message: its first event (``immediate``) or its outcome, or
        the task as it is when ``send_timeout`` passes first."""
        if immediate and not pending.first.done():
            active = self.registry.get(pending.message.task_id or "")
            if active is not None and active.current is not None and active.current is not pending:
                task = active.task
                if task is not None:
                    # Queued behind the task's running execution: its first event comes only when that one ends.
                    # returnImmediately answers now with the task as it is (GetTask's view); the message joins the
                    # history when its own execution starts.
                    return task.to_json()
        fut = pending.first if immediate else pending.done
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

    async def _repeat(self, seen: Seen, immediate: bool, tenant: str, call: CallContext) -> bytes | Message:
        """The outcome of the execution a repeated message started: awaited while it runs, else the task now."""
        pending = seen.pending
        if pending is not None:
            if immediate and not pending.first.done():
                active = self.registry.get(seen.task_id)
                if active is not None and active.current is pending and active.task is not None:
                    # Its execution runs, but its first snapshot was never made (its caller waits for the outcome
                    # alone: ``Recorder._create``): the task as it is now, as GetTask would answer.
                    return active.task.to_json()
            fut = pending.first if immediate and not pending.first.cancelled() else pending.done
            if not fut.cancelled():
                if self.send_timeout is None:
                    return await asyncio.shield(fut)
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(fut), self.send_timeout)
        if seen.error is not None:
            raise seen.error
        if seen.reply is not None:
            return seen.reply
        return (await self.get_task(seen.task_id, call, tenant=tenant)).to_json()

    def stream(self, request: SendMessageRequest, call: CallContext | None = None) -> EventStream:
        """SendStreamingMessage: the events of this message's execution, ending when it ends."""
        holder = EventStream()
        if self.cluster is not None:
            holder.items = self.cluster.stream(request, call or CallContext(), holder)
        else:
            # Admitted at the first read (as a generator would be): nothing runs for a stream never read.
            holder.opener = functools.partial(self._open_stream, request, call or CallContext(), holder)
        return holder

    async def _open_stream(
        self, request: SendMessageRequest, call: CallContext, holder: EventStream
    ) -> AsyncGenerator[StreamItem, None]:
        pending = await self._admit(request, call, streaming=True)
        if isinstance(pending, Seen):
            # A repeat: the original execution's outcome, as a stream of one (its events went to the first caller).
            config = request.configuration
            immediate = config is not None and config.return_immediately
            outcome = await self._repeat(pending, immediate, request.tenant or call.tenant, call)
            event = outcome if isinstance(outcome, Message) else Task.model_validate_json(outcome)
            return _one((0, event, stream_json(event)))
        return await self.open_relay(pending, holder, request.tenant or call.tenant, call.user)

    async def open_relay(
        self, pending: PendingRequest, holder: EventStream, tenant: str, owner: str
    ) -> AsyncGenerator[StreamItem, None]:
        """The events of an admitted streaming message's execution, from the tap its runner opens (once it opened
        it). The generator owns the tap, and raises the execution's error should it end without a task or a reply."""
        assert pending.started is not None
        try:
            tap = await pending.started
            holder.attach(tap)
        except asyncio.CancelledError:
            # The caller left before its execution began. The runner opens no tap for a caller that is gone
            # (``started`` is cancelled then); if it already opened one, release it here, or it leaks (with its log).
            if pending.tap is not None:
                self.bus.close_tap(pending.tap)
            raise
        return self._follow(tap, until_terminal=False, tenant=tenant, owner=owner, execution=pending)

    async def cancel(self, task_id: str, call: CallContext | None = None, *, tenant: str = "") -> Task:
        """CancelTask: CANCELED is persisted before this returns; a terminal task raises TaskNotCancelableError."""
        call = call or CallContext()
        tenant = tenant or call.tenant
        if self.cluster is not None:
            return await self.cluster.cancel(task_id, call, tenant)  # type: ignore[no-any-return]
        return await self.cancel_here(task_id, call, tenant)

    async def fail_lost(self, record: TaskRecord, reason: str) -> Task:
        """Mark a claimed task whose runner died FAILED with ``reason`` (persisted, then published)."""
        active = ActiveTask(record.task.id, record.task.context_id, record.tenant, record.owner, record)
        await self.bus.prepare(active.task_id, record.event_seq)
        await self._write_status(active, TaskState.FAILED, reason)
        self.bus.forget(active.task_id)
        return copy_task(record.task)


async def _one(item: StreamItem) -> AsyncGenerator[StreamItem, None]:
    yield item
