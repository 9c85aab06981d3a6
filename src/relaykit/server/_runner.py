"""Admission and the runner: a message joins its task's queue, and the task's one runner executes it.

Invariants:

* a message is admitted only while the engine accepts work, and to a task its caller can see that is not terminal
  (``accept_continuation``); a task holds at most ``max_queued`` waiting messages and the process runs at most
  ``max_concurrent`` runners: beyond that a request is refused at once, never queued without bound;
* a task's history stays within ``max_history_bytes``: a follow-up that would take it past the limit is refused
  (InvalidParams) before anything is stored, when it is admitted and again when it starts should it have waited
  behind another execution (whose messages grew the history meanwhile). The history is what follow-ups grow, and
  every later message costs time in proportion to the task's size (the task is decoded, encoded and rewritten);
* one runner per task processes its messages one at a time; many tasks run concurrently;
* every execution ends in a terminal or interrupted state (an agent that returns with its task still active has
  failed it), and its queue is closed;
* when recording fails (the store refuses a write), the callers of the execution and of every waiting message get an
  error, never an endless wait.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from relaykit._enums import TaskState
from relaykit._errors import (
    ArtifactTooLargeError,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    ResourceExhaustedError,
    ServiceUnavailableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit._ids import new_id
from relaykit._model import set_field
from relaykit._requests import SendMessageRequest
from relaykit._state import INTERRUPTED, TERMINAL
from relaykit._types import Message, Task
from relaykit.backends._base import TaskRecord
from relaykit.server._active import ActiveTask, PendingRequest, outcome_only
from relaykit.server._cancel import Cancellation
from relaykit.server._context import ANONYMOUS, CallContext, RequestContext
from relaykit.server._queue import EventQueue
from relaykit.server._quotas import exhausted
from relaykit.server._recent import RecentMessages, Seen

__all__ = ["Runner", "accept_continuation", "check_history"]

log = logging.getLogger("relaykit.engine")


_SAFE_FAILURE = "The agent failed while handling this task."


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


def accept_continuation(
    message: Message,
    task_id: str,
    context_id: str,
    task: Task | None,
    *,
    max_history_bytes: int,
    written: bytes | None = None,
) -> None:
    """The rules for a message to an existing task (the one in-process runner and the scale-out accepting side
    share them): none to a terminal task, the context must match, the history must stay within
    ``max_history_bytes`` (``written``: the task's ProtoJSON, when the caller has it); the message joins the task's
    context."""
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
    if task is not None and max_history_bytes > 0:
        check_history(task, written, message, max_history_bytes)
    message.context_id = context_id


def check_history(task: Task, written: bytes | None, message: Message, limit: int) -> None:
    """Refuse ``message`` when the task's history with it would be over ``limit`` bytes of ProtoJSON.

    ``written``: the whole task's ProtoJSON, when the caller has it. The history is part of it, so a task whose
    whole size leaves room costs no measuring (most tasks); otherwise the history is encoded to be measured."""
    size = len(message.to_json())
    if written is not None and len(written) + size <= limit:
        return
    history = len(task.__pydantic_serializer__.to_json(task, include={"history"}, exclude_defaults=True, by_alias=True))
    if history + size > limit:
        # Names the limit and the way on, never the content.
        raise InvalidParamsError(
            f"task {task.id}'s history would exceed the server's limit of {limit} bytes (max_history_bytes); "
            "it takes no more messages: start a new task in the same context",
            field_violations=[("message", f"the task's history would exceed {limit} bytes")],
            task_id=task.id,
        )


def _agent_failure(reason: BaseException) -> str:
    # A server limit says which (its message names no content); other invalid output stays generic.
    if isinstance(reason, ArtifactTooLargeError):
        return reason.message
    return "The agent produced an invalid response."


class Runner(Cancellation):
    """The layer of ``TaskEngine`` that admits messages and runs them; it cancels and records through the layers
    below it."""

    executor_timeout: float | None
    max_concurrent: int
    max_per_principal: int  # concurrent executions per principal (0: no limit); set by RequestHandler from Quotas
    _by_owner: dict[str, int]
    max_queued_per_principal: int  # messages waiting to run per principal (0: no limit); likewise
    _waiting: dict[str, int]
    # Told (active, pending) as a message starts running (scale-out quotas release its place in the queue).
    on_start: Any
    max_queued: int
    max_history_bytes: int  # a task's history, in ProtoJSON bytes, that follow-ups may grow it to (0: no limit)
    # The messages admitted within the idempotency window (a repeat gets the original's outcome).
    recent: RecentMessages
    # Told when this process stops running a task (scale-out: to release its claim).
    on_idle: Any
    _accepting: bool
    _running: int
    _idle: asyncio.Event

    # --- admission ---------------------------------------------------------------------------------------

    async def _admit(self, request: SendMessageRequest, call: CallContext, *, streaming: bool) -> PendingRequest | Seen:
        """Queue the message on its task; a repeat of a message admitted within the window is not queued again: its
        earlier admission is returned instead (``Seen``)."""
        if not self._accepting:
            raise ServiceUnavailableError("server is shutting down; retry against another instance")
        message = request.message
        if not message.message_id:
            raise InvalidParamsError(
                "message.messageId is required", field_violations=[("message.messageId", "required")]
            )
        tenant = request.tenant or call.tenant
        owner = call.user
        seen = self.recent.find(tenant, owner, message.message_id, message.task_id, message.context_id)
        if seen is not None:
            return seen
        if message.task_id:
            active = self.registry.get(message.task_id)
            if active is None or active.tenant != tenant or active.owner != owner:
                record = await self.store.get(message.task_id, tenant=tenant, owner=owner)
                if record is None:
                    raise TaskNotFoundError(task_id=message.task_id)
                active = self.registry.get(message.task_id)
                if active is None:
                    active = ActiveTask(record.task.id, record.task.context_id, tenant, owner, record)
            task = active.task
            if (
                self.recent.window > 0
                and task is not None
                and any(m.message_id == message.message_id for m in task.history)
            ):
                # Already in the task (admitted before a restart, or before the window's memory was full). A window
                # of 0 turns idempotency off altogether: then a reused messageId is a new message (as the A2A
                # conformance kit sends them), here as in ``recent``.
                return Seen(task.id, task.context_id)
            accept_continuation(
                message,
                active.task_id,
                active.context_id,
                task,
                max_history_bytes=self.max_history_bytes,
                written=active.written,
            )
        else:
            context_id = message.context_id or new_id()
            set_field(message, "context_id", context_id)
            active = ActiveTask(new_id(), context_id, tenant, owner, None)
        config = request.configuration
        pending = PendingRequest(message, config, request.metadata, call, streaming=streaming)
        # A blocking caller waits for the outcome alone: the first snapshot need not be written before the agent
        # goes on (``Recorder._create``).
        pending.outcome_only = outcome_only(config, streaming)
        if self.telemetry is not None:
            pending.trace = self.telemetry.capture()
        self._enqueue(active, pending)
        if self.recent.window > 0:
            seen = Seen(active.task_id, active.context_id, pending)
            pending.seen = seen
            self.recent.add(tenant, owner, message.message_id, seen)
        return pending

    def _enqueue(self, active: ActiveTask, pending: PendingRequest) -> None:
        if len(active.requests) >= self.max_queued:
            raise ResourceExhaustedError(
                f"task {active.task_id} already has {self.max_queued} messages waiting; retry later"
            )
        owner = active.owner
        queue_cap = self.max_queued_per_principal
        if queue_cap > 0 and owner != ANONYMOUS and self._waiting.get(owner, 0) >= queue_cap:
            raise exhausted(f"{owner} already has {queue_cap} messages waiting; retry later", 1.0)
        if active.runner is None:
            if self._running >= self.max_concurrent:
                raise ResourceExhaustedError(
                    f"the server is running its limit of {self.max_concurrent} executions; retry later"
                )
            # Per principal (server._quotas; anonymous is exempt): one caller cannot take every execution slot.
            if self.max_per_principal > 0 and owner != ANONYMOUS:
                running = self._by_owner.get(owner, 0)
                if running >= self.max_per_principal:
                    raise exhausted(f"{owner} is running its limit of {self.max_per_principal} executions", 1.0)
                self._by_owner[owner] = running + 1
        self.registry[active.task_id] = active
        self._idle.clear()
        active.requests.append(pending)
        if queue_cap > 0 and owner != ANONYMOUS:
            self._waiting[owner] = self._waiting.get(owner, 0) + 1
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
        streaming: bool = False,
        outcome_only: bool = False,
    ) -> PendingRequest:
        """Run a message taken from the work queue (scale-out) on a task this process has claimed.

        ``record`` is the task as stored at the claim. ``fresh``: it is the SUBMITTED row the accepting replica
        wrote for a new task (the execution treats the task as new). ``rerun``: the message is already in the
        task's history (an idempotent executor re-running a lost worker's execution). ``streaming``: the caller is
        here and follows the execution's events (the replica that accepted the message runs it). ``outcome_only``:
        the caller is here and waits for the outcome alone (a blocking SendMessage run where accepted).
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
        pending = PendingRequest(message, request.configuration, request.metadata, call, streaming=streaming)
        pending.rerun = rerun
        pending.outcome_only = outcome_only
        if self.telemetry is not None:
            pending.trace = self.telemetry.capture()
        self._enqueue(active, pending)
        return pending

    # --- the runner --------------------------------------------------------------------------------------

    async def _run(self, active: ActiveTask) -> None:
        waited = False  # the message waited behind another execution of this runner
        try:
            while active.requests:
                pending = active.requests.popleft()
                self._unqueue(active.owner, 1)
                if self.on_start is not None:
                    self.on_start(active, pending)
                task = active.task
                if task is not None and task.status.state in TERMINAL:
                    pending.reject(
                        UnsupportedOperationError(
                            f"task {task.id} became {task.status.state.name} while this message waited",
                            task_id=task.id,
                        )
                    )
                    continue
                if waited and task is not None and self.max_history_bytes > 0 and not pending.rerun:
                    # Admitted against the history as it was then: the executions before it have added to it since.
                    try:
                        check_history(task, active.written, pending.message, self.max_history_bytes)
                    except InvalidParamsError as exc:
                        pending.reject(exc)
                        continue
                waited = True
                try:
                    if self.telemetry is None:
                        await self._execute(active, pending)
                    else:
                        await self.telemetry.run_execution(self._execute, active, pending)
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
            owner = active.owner
            count = self._by_owner.get(owner)
            if count is not None:
                if count > 1:
                    self._by_owner[owner] = count - 1
                else:
                    del self._by_owner[owner]
            if self.registry.get(active.task_id) is active:
                del self.registry[active.task_id]
            if not self.registry:
                self._idle.set()
            if self.on_idle is not None:
                self.on_idle(active)

    def _unqueue(self, owner: str, count: int) -> None:
        """``count`` messages of ``owner`` left the queue (started, or dropped)."""
        waiting = self._waiting.get(owner)
        if waiting is not None and count:
            if waiting > count:
                self._waiting[owner] = waiting - count
            else:
                del self._waiting[owner]

    def _abandon(self, active: ActiveTask, pending: PendingRequest) -> None:
        error = InternalError("the server could not record this task; try again")
        for req in (pending, *active.requests):
            req.reject(error)
            if req.tap is not None:
                req.tap.finish()
        self._unqueue(active.owner, len(active.requests))
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
        given: Task | None = None  # the agent's own copy of the task (the live one keeps changing under the engine)
        if self._remote_bus:
            # The shared log may be ahead of the stored task (chunks published before their checkpoint).
            await self.bus.prepare(active.task_id, self._base_seq(active))
        if task is not None:
            # A continuation: the user's message joins the history now; it is persisted with the next status write.
            message.task_id = task.id
            written = active.written
            if not pending.rerun:
                task.history.append(message)
                active.dirty = True
            if written is None or not pending.outcome_only or self.on_event is not None or self._remote_bus:
                # The opening snapshot (below) is wanted, or nothing says what the task is but the live task.
                body = task.to_json()
                given = Task.model_validate_json(body)
            else:
                # A blocking caller, no push hook, an in-process bus: nobody takes an opening snapshot, so the task is
                # not encoded for one. The agent's copy is decoded from the bytes last written or read, which say
                # what the live task said before the message joined it (one pass over the task less per message).
                given = Task.model_validate_json(written)
                if not pending.rerun:
                    given.history.append(message)
        context = RequestContext(
            task_id=active.task_id,
            context_id=active.context_id,
            message=message,
            task=given,
            metadata=pending.metadata,
            configuration=pending.configuration,
            call=pending.call,
        )
        active.context = context
        if pending.started is not None and not pending.started.done():
            # Opened for this execution: the tap that gets its private opening snapshot (below).
            tap, _ = await self.bus.open(active.task_id, base_seq=self._base_seq(active), execution=message.message_id)
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
                # Every task stream starts with the Task (spec §5.5); for a continuation, the current snapshot. It is
                # this execution's caller's alone, no event of the task: a subscriber has had its Task and gets only
                # updates after it (§3.1.6). Published for whoever may take it: a streaming caller here, the push
                # hook, and a caller on another replica (or a repeat of this message, replayed from the shared log).
                if pending.tap is not None or self.on_event is not None or self._remote_bus:
                    await self._emit_opening(active, pending, body, wait=self._first_wait(pending))
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
                await self._fail(active, _agent_failure(reason))
            else:
                log.exception("task %s: executor raised", active.task_id)
                await self._fail(active, _SAFE_FAILURE)
        else:
            queue.close()
            if active.agent_error is not None:
                log.error("task %s: invalid agent output: %s", active.task_id, active.agent_error)
                await self._fail(active, _agent_failure(active.agent_error))
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
                pending.finish(reply)
        elif task is not None:
            body = self._body(active)
            pending.resolve(pending.first, body)
            pending.finish(body)
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
