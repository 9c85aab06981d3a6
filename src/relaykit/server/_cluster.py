"""Scale-out: any replica accepts any request, any worker runs any task, nothing acknowledged is lost.

How a message travels (ARCHITECTURE §5):

1. The accepting replica checks it against the stored task, stores a new task as SUBMITTED (so it survives any
   crash from here on), opens a tap on the task's event stream for this execution, and enqueues the message on the
   work queue.
2. A worker takes the entry, **claims** the task in the store (the lease: one runner per task across replicas; the
   claim bumps the task's version, so a presumed-dead runner can no longer write), hands the message to its engine,
   and acknowledges the entry. Its engine runs the executor exactly as in one process, appending events to the
   shared log.
3. The accepting replica relays that execution's events (streaming), or answers once it ends (blocking: the task as
   stored; returnImmediately: the first event).

Workers heartbeat; a task whose claimant stopped heartbeating is taken over by another worker's sweeper: FAILED
"worker lost", or run again when the executor declares itself ``idempotent``. A SUBMITTED task nobody claimed for
``unstarted_after`` seconds (its queue entry was lost, e.g. with a Redis restart) is started by the sweeper.
CancelTask reaches the claimant through a per-worker signal and answers once CANCELED is persisted; a task nobody
runs is claimed and canceled by the replica that got the request. A repeated ``messageId`` (same tenant, owner and
task or context) within ``idempotency_window`` gets the original execution's result instead of a second run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from relaykit._errors import (
    A2AError,
    InvalidParamsError,
    ResourceExhaustedError,
    ServiceUnavailableError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit._model import utc_now
from relaykit._state import INTERRUPTED, TERMINAL
from relaykit._types import (
    Message,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    new_id,
    stream_json,
)
from relaykit.backends._base import Claim, TaskRecord
from relaykit.backends._redis_queue import RedisWorkQueue, WorkItem
from relaykit.server._context import CallContext
from relaykit.server._readers import EventStream, StreamItem

if TYPE_CHECKING:
    from relaykit.backends._redis import RedisEventBus
    from relaykit.server._active import ActiveTask, PendingRequest
    from relaykit.server._engine import TaskEngine

__all__ = ["Cluster"]

log = logging.getLogger("relaykit.cluster")

# Headers that carry credentials are not copied into the work queue (workers see the principal, not its secret).
_PRIVATE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})
_ACTIVE = (TaskState.SUBMITTED, TaskState.WORKING)


def default_worker_id() -> str:
    """``host:pid:random``: unique per process start, readable in the store's claim column."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _encode_call(call: CallContext) -> bytes:
    return json.dumps(
        {
            "u": call.user,
            "n": call.tenant,
            "r": sorted(call.requested_extensions),
            "a": sorted(call.activated_extensions),
            "h": {k: v for k, v in call.headers.items() if k.lower() not in _PRIVATE_HEADERS},
        }
    ).encode()


def _decode_call(data: bytes) -> CallContext:
    raw = json.loads(data or b"{}")
    return CallContext(
        user=raw.get("u", "anonymous"),
        tenant=raw.get("n", ""),
        requested_extensions=frozenset(raw.get("r", ())),
        activated_extensions=set(raw.get("a", ())),
        headers=dict(raw.get("h", {})),
    )


def _last_user_message(task: Task) -> Message | None:
    for message in reversed(task.history):
        if message.role is Role.USER:
            return message
    return None


class Cluster:
    """Runs a ``TaskEngine`` as one replica of many, over a shared store (with claims) and the Redis bus.

    >>> # engine = TaskEngine(executor, store=PostgresTaskStore(dsn, exclusive=False), bus=RedisEventBus(url))
    >>> # Cluster(engine, RedisWorkQueue(url, client=engine.bus.client)); await engine.start()
    """

    def __init__(
        self,
        engine: TaskEngine,
        queue: RedisWorkQueue,
        *,
        worker: bool = True,
        worker_id: str | None = None,
        heartbeat: float = 1.0,
        lease: float = 5.0,
        unstarted_after: float = 30.0,
        idempotency_window: float = 600.0,
        cancel_timeout: float = 30.0,
    ) -> None:
        for method in ("claim", "release", "heartbeat", "retire", "orphans", "claimant"):
            if not callable(getattr(engine.store, method, None)):
                raise ValueError(
                    "the Redis bus needs a task store shared by the replicas, with claims: use postgresql://…"
                )
        self.engine = engine
        self.queue = queue
        self.bus: RedisEventBus = engine.bus  # type: ignore[assignment]
        self.store: Any = engine.store
        self.worker = worker
        self.id = worker_id or default_worker_id()
        self.heartbeat = heartbeat
        self.lease = lease
        self.unstarted_after = unstarted_after
        self.idempotency_window = idempotency_window
        self.cancel_timeout = cancel_timeout
        self.held: dict[str, int] = {}  # claimed task id -> claim generation
        self._locks: dict[str, asyncio.Lock] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._intake: list[asyncio.Task[None]] = []
        self._jobs: set[asyncio.Task[Any]] = set()
        self._capacity = asyncio.Event()
        self._generation = 0
        self.alive = False  # the last heartbeat reached the store
        engine.cluster = self
        engine.on_idle = self._on_idle

    # --- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self.store.heartbeat(self.id, self.lease)
            self.alive = True
        except A2AError as exc:
            log.warning("could not register worker %s: %s", self.id, exc)
        self._loops.append(asyncio.create_task(self._heartbeat_loop(), name="relaykit-heartbeat"))
        if self.worker:
            self._intake = [
                asyncio.create_task(self._consume_loop(), name="relaykit-consume"),
                asyncio.create_task(self._sweep_loop(), name="relaykit-sweep"),
            ]
            self._loops.append(asyncio.create_task(self._cancel_loop(), name="relaykit-cancel-signals"))
        log.info("replica %s joined (%s)", self.id, "worker" if self.worker else "API only")

    async def stop_intake(self) -> None:
        """Take no more work (shutdown): running executions go on."""
        for task in self._intake:
            task.cancel()
        for task in self._intake:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._intake = []

    async def close(self) -> None:
        await self.stop_intake()
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._loops = []
        if self._jobs:
            await asyncio.wait(self._jobs, timeout=2.0)
        for task_id in list(self.held):
            with contextlib.suppress(Exception):
                await self.store.release(task_id, self.id)
        self.held.clear()
        with contextlib.suppress(Exception):
            await self.store.retire(self.id)
        await self.queue.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)
        return task

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                await self.store.heartbeat(self.id, self.lease)
                if not self.alive:
                    log.warning("worker %s reaches the store again", self.id)
                self.alive = True
            except Exception as exc:
                if self.alive:
                    log.warning("worker %s heartbeat failed: %s", self.id, exc)
                self.alive = False

    # --- claims ----------------------------------------------------------------------------------------------

    def _lock(self, task_id: str) -> asyncio.Lock:
        lock = self._locks.get(task_id)
        if lock is None:
            lock = self._locks[task_id] = asyncio.Lock()
        return lock

    async def _claim(self, task_id: str, tenant: str, owner: str) -> Claim | None:
        # Claims and releases of one task are serialised in this process, so a release issued as an execution ends
        # can never land after the claim for the next message.
        async with self._lock(task_id):
            claim: Claim | None = await self.store.claim(task_id, self.id, tenant=tenant, owner=owner)
            if claim is not None:
                self._generation += 1
                self.held[task_id] = self._generation
            return claim

    async def _release(self, task_id: str) -> None:
        generation = self.held.get(task_id)
        if generation is None:
            return
        lock = self._lock(task_id)
        async with lock:
            if self.held.get(task_id) != generation or task_id in self.engine.registry:
                return
            try:
                await self.store.release(task_id, self.id)
            except Exception as exc:
                # The claim stays until this worker's heartbeat lapses; the sweeper of another worker then finds
                # the task (not active any more) and lets it be.
                log.warning("task %s: could not release the claim: %s", task_id, exc)
            self.held.pop(task_id, None)
        if not lock.locked():
            self._locks.pop(task_id, None)

    def _on_idle(self, active: ActiveTask) -> None:
        self._capacity.set()
        if active.task_id in self.held:
            self._spawn(self._release(active.task_id))

    # --- the worker side -------------------------------------------------------------------------------------

    async def _consume_loop(self) -> None:
        engine = self.engine
        attempt = 0
        while True:
            free = engine.max_concurrent - engine.running_executions - len(self._jobs)
            if free <= 0:
                self._capacity.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._capacity.wait(), 1.0)
                continue
            try:
                items = await self.queue.read(self.id, min(free, 64), block=1.0)
                attempt = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                attempt += 1
                if attempt == 1:
                    log.warning("work queue unreachable: %s", exc)
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
                continue
            for item in items:
                self._spawn(self._take(item))

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease * (0.5 + secrets.randbelow(1000) / 1000))
            try:
                for item in await self.queue.reclaim(self.id, self.lease * 2):
                    self._spawn(self._take(item))
                for orphan in await self.store.orphans(unstarted_after=self.unstarted_after, limit=100):
                    if orphan.task_id in self.engine.registry:
                        continue
                    claim = await self._claim(orphan.task_id, orphan.tenant, orphan.owner)
                    if claim is not None:
                        await self._recover(claim)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("sweep failed: %s", exc)

    async def _cancel_loop(self) -> None:
        async for task_id, tenant, owner in self.queue.cancel_signals(self.id):
            if task_id in self.engine.registry:
                self._spawn(self._cancel_signalled(task_id, tenant, owner))

    async def _cancel_signalled(self, task_id: str, tenant: str, owner: str) -> None:
        with contextlib.suppress(A2AError):
            await self.engine.cancel_here(task_id, CallContext(user=owner, tenant=tenant), tenant)

    async def _claim_waiting(self, item: WorkItem) -> Claim | None:
        """Claim the item's task, waiting while another live worker runs it; None when the task is gone."""
        delay = 0.02
        while True:
            claim = await self._claim(item.task_id, item.tenant, item.owner)
            if claim is not None:
                return claim
            if await self.store.get(item.task_id, tenant=item.tenant, owner=item.owner) is None:
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _take(self, item: WorkItem) -> None:
        """Run one queue entry: claim its task, hand the message to the engine, acknowledge the entry."""
        try:
            request = SendMessageRequest.model_validate_json(item.request)
            call = _decode_call(item.call)
        except ValueError:
            log.error("dropping a malformed work entry %r", item.entry_id)
            await self.queue.ack(item)
            return
        message_id = request.message.message_id
        try:
            pending = await self._admit(item, request, call, message_id)
        except ResourceExhaustedError as exc:
            record = await self.store.get(item.task_id, tenant=item.tenant, owner=item.owner)
            if record is not None:
                await self._refuse(item, message_id, exc, record)
            return
        except ServiceUnavailableError as exc:
            # Not acknowledged: the entry is delivered again (to this or another worker) after the reclaim delay.
            log.warning("task %s: could not take its message now: %s", item.task_id, exc)
            await self._release(item.task_id)
            return
        await self.queue.ack(item)
        if pending is not None:
            pending.done.add_done_callback(lambda done: self._after(item, message_id, done))

    async def _admit(
        self, item: WorkItem, request: SendMessageRequest, call: CallContext, message_id: str
    ) -> PendingRequest | None:
        """Claim the entry's task and hand the message to the engine; None when there is nothing to run."""
        for _ in range(3):
            claim = await self._claim_waiting(item)
            if claim is None:
                return None  # the accepting replica gave the task up (it could not enqueue)
            task = claim.record.task
            local = task.id in self.engine.registry
            if claim.previous not in (None, self.id) and task.status.state in _ACTIVE and not local:
                # Its runner was lost: recover the task first, then look at this message again.
                await self._recover(claim)
                if item.fresh:
                    return None
                continue
            if item.fresh:
                if (claim.previous is not None or task.status.state is not TaskState.SUBMITTED) and not local:
                    await self._release(task.id)  # started already (by a sweeper), or its caller gave up
                    return None
            elif any(m.message_id == message_id for m in task.history):
                await self._release(task.id)  # delivered twice: the first delivery took it
                return None
            elif task.status.state in TERMINAL and not local:
                error = UnsupportedOperationError(
                    f"task {task.id} became {task.status.state.name} while this message waited", task_id=task.id
                )
                await self.bus.publish_error(item.task_id, message_id, error, base_seq=claim.record.event_seq)
                await self._release(task.id)
                return None
            return self.engine.admit_claimed(request, call, claim.record, fresh=item.fresh)
        return None

    async def _refuse(self, item: WorkItem, message_id: str, error: A2AError, record: TaskRecord) -> None:
        """Tell the caller of a message that will not run why (on its own replica), drop the entry."""
        await self.bus.publish_error(item.task_id, message_id, error, base_seq=record.event_seq)
        await self.queue.ack(item)
        await self._release(item.task_id)

    def _after(self, item: WorkItem, message_id: str, done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is None:
            return
        if not isinstance(error, A2AError):
            error = ServiceUnavailableError("the worker could not run this message; retry")
        self._spawn(self._tell(item.task_id, message_id, error))

    async def _tell(self, task_id: str, message_id: str, error: A2AError) -> None:
        try:
            await self.bus.publish_error(task_id, message_id, error)
        except Exception as exc:
            log.warning("task %s: could not report an execution error to its caller: %s", task_id, exc)

    async def _recover(self, claim: Claim) -> None:
        """A task this worker just claimed from a dead (or no) runner: start, re-run or fail it."""
        record = claim.record
        task = record.task
        if task.status.state not in _ACTIVE or task.id in self.engine.registry:
            await self._release(task.id)
            return
        message = _last_user_message(task)
        unstarted = task.status.state is TaskState.SUBMITTED and len(task.history) == 1
        call = CallContext(user=record.owner, tenant=record.tenant)
        if message is not None and ((unstarted and claim.previous is None) or self.engine.executor.idempotent):
            request = SendMessageRequest(tenant=record.tenant, message=message)
            log.warning(
                "task %s: %s",
                task.id,
                "starting (its queue entry was lost)"
                if claim.previous is None
                else f"re-running after worker {claim.previous} was lost",
            )
            try:
                self.engine.admit_claimed(request, call, record, fresh=unstarted, rerun=not unstarted)
                return
            except A2AError as exc:
                log.warning("task %s: could not re-run: %s", task.id, exc)
        log.warning("task %s: worker %s was lost; marking it FAILED", task.id, claim.previous)
        try:
            await self.engine.fail_lost(record, "worker lost")
        finally:
            await self._release(task.id)

    # --- the accepting side ----------------------------------------------------------------------------------

    async def _accept(self, request: SendMessageRequest, call: CallContext, task_id: str) -> bool:
        """Check the message against the stored task; store a new task SUBMITTED. Returns whether it is new."""
        message = request.message
        tenant = request.tenant or call.tenant
        owner = call.user
        if message.task_id:
            record = await self.store.get(message.task_id, tenant=tenant, owner=owner)
            if record is None:
                raise TaskNotFoundError(task_id=message.task_id)
            task = record.task
            if task.status.state in TERMINAL:
                raise UnsupportedOperationError(
                    f"task {task.id} is {task.status.state.name}; terminal tasks take no more messages "
                    "(start a new task in the same context)",
                    task_id=task.id,
                )
            if message.context_id and message.context_id != task.context_id:
                raise InvalidParamsError(
                    f"contextId {message.context_id!r} does not match task {task.id}'s context",
                    field_violations=[("message.contextId", "does not match the task's contextId")],
                )
            message.context_id = task.context_id
            return False
        message.context_id = message.context_id or new_id()
        message.task_id = task_id
        task = Task(
            id=task_id,
            context_id=message.context_id,
            status=TaskStatus(state=TaskState.SUBMITTED, timestamp=utc_now()),
            history=[message],
        )
        await self.store.save(TaskRecord(task, tenant, owner))
        # The queued request carries the message as the client sent it (no task id: the task is new).
        message.task_id = ""
        return True

    async def _submit(self, request: SendMessageRequest, call: CallContext) -> tuple[Any, str, str, bool, str]:
        """Accept and enqueue a message; returns ``(tap, task_id, idempotency key, is_repeat, original)``."""
        engine = self.engine
        if not engine.accepting:
            raise ServiceUnavailableError("server is shutting down; retry against another instance")
        message = request.message
        if not message.message_id:
            raise InvalidParamsError(
                "message.messageId is required", field_violations=[("message.messageId", "required")]
            )
        tenant = request.tenant or call.tenant
        owner = call.user
        task_id = message.task_id or new_id()
        key = ""
        if self.idempotency_window > 0:
            key = self.queue.idem_key(tenant, owner, message.task_id or message.context_id, message.message_id)
            original = await self.queue.remember(key, json.dumps({"t": task_id}), self.idempotency_window)
            if original is not None:
                return None, task_id, key, True, original
        fresh = False
        try:
            fresh = await self._accept(request, call, task_id)
            tap, _ = await self.bus.open(task_id, execution=message.message_id)
            try:
                item = WorkItem(task_id, tenant, owner, request.to_json(), _encode_call(call), fresh)
                await self.queue.enqueue(item)
            except BaseException:
                self.bus.close_tap(tap)
                raise
        except BaseException:
            if key:
                await self.queue.drop(key)
            if fresh:
                with contextlib.suppress(Exception):
                    await self.store.delete(task_id, tenant=tenant, owner=owner)
            raise
        return tap, task_id, key, False, ""

    async def _repeat_tap(self, original: str, message_id: str, tenant: str, owner: str) -> tuple[Any, str, Any]:
        """For a repeated message: a tap replaying the original execution, or its recorded reply."""
        found = json.loads(original)
        if "m" in found:
            return None, "", Message.model_validate_json(found["m"])
        task_id = found["t"]
        tap, gap = await self.bus.open(task_id, after=0, execution=message_id)
        if gap:
            self.bus.close_tap(tap)
            return None, task_id, None
        return tap, task_id, None

    async def send(self, request: SendMessageRequest, call: CallContext) -> bytes | Message:
        """SendMessage through the work queue (blocking, or ``returnImmediately``)."""
        config = request.configuration
        immediate = config is not None and config.return_immediately
        tenant = request.tenant or call.tenant
        tap, task_id, key, repeat, original = await self._submit(request, call)
        if repeat:
            tap, task_id, reply = await self._repeat_tap(original, request.message.message_id, tenant, call.user)
            if reply is not None:
                return reply  # type: ignore[no-any-return]
            if tap is None:
                return await self._stored(task_id, tenant, call.user)
        try:
            outcome = self._outcome(tap, task_id, tenant, call.user, immediate, key)
            if self.engine.send_timeout is None:
                return await outcome
            try:
                return await asyncio.wait_for(outcome, self.engine.send_timeout)
            except TimeoutError:
                return await self._stored(task_id, tenant, call.user)
        finally:
            self.bus.close_tap(tap)

    async def _stored(self, task_id: str, tenant: str, owner: str) -> bytes:
        record = await self.store.get(task_id, tenant=tenant, owner=owner)
        if record is None:
            raise TaskNotFoundError(task_id=task_id)
        return record.task.to_json()  # type: ignore[no-any-return]

    async def _outcome(
        self, tap: Any, task_id: str, tenant: str, owner: str, immediate: bool, key: str
    ) -> bytes | Message:
        async for _seq, event, _data in self.engine._follow(tap, until_terminal=False, tenant=tenant, owner=owner):
            if isinstance(event, A2AError):
                raise event
            if isinstance(event, Message):
                await self._remember_reply(key, event)
                return event
            if immediate:
                if isinstance(event, Task):
                    return event.to_json()
                break
        return await self._stored(task_id, tenant, owner)

    async def _remember_reply(self, key: str, reply: Message) -> None:
        # A bare Message reply leaves no task to look at: a repeat of the message gets this copy of it.
        if key:
            with contextlib.suppress(Exception):
                await self.queue.update(key, json.dumps({"m": reply.to_json().decode()}), self.idempotency_window)

    async def stream(
        self, request: SendMessageRequest, call: CallContext, holder: EventStream
    ) -> AsyncGenerator[StreamItem, None]:
        """SendStreamingMessage through the work queue: this execution's events, from whichever worker runs it."""
        tenant = request.tenant or call.tenant
        tap, task_id, key, repeat, original = await self._submit(request, call)
        if repeat:
            tap, task_id, reply = await self._repeat_tap(original, request.message.message_id, tenant, call.user)
            if reply is not None:
                yield (0, reply, stream_json(reply))
                return
            if tap is None:
                task = Task.model_validate_json(await self._stored(task_id, tenant, call.user))
                yield (0, task, stream_json(task))
                return
        holder.tap = tap
        try:
            async for item in self.engine._follow(tap, until_terminal=False, tenant=tenant, owner=call.user):
                event = item[1]
                if isinstance(event, A2AError):
                    raise event
                if isinstance(event, Message):
                    await self._remember_reply(key, event)
                yield item
        finally:
            self.bus.close_tap(tap)

    async def cancel(self, task_id: str, call: CallContext, tenant: str) -> Task:
        """CancelTask on any replica: answers once CANCELED is persisted, whoever runs the task."""
        engine = self.engine
        owner = call.user
        deadline = time.monotonic() + self.cancel_timeout
        asked = False
        while True:
            if task_id in engine.registry:
                return await engine.cancel_here(task_id, call, tenant)
            record = await self.store.get(task_id, tenant=tenant, owner=owner)
            if record is None:
                raise TaskNotFoundError(task_id=task_id)
            state = record.task.status.state
            if state in TERMINAL:
                if asked:
                    return record.task  # type: ignore[no-any-return]
                raise TaskNotCancelableError(f"task {task_id} is already {state.name}", task_id=task_id)
            claim = await self._claim(task_id, tenant, owner)
            if claim is not None:
                try:
                    if task_id in engine.registry:
                        continue
                    return await engine.cancel_here(task_id, call, tenant)
                finally:
                    await self._release(task_id)
            holder = await self.store.claimant(task_id)
            tap, _ = await self.bus.open(task_id, base_seq=record.event_seq)
            try:
                if holder:
                    await self.queue.signal_cancel(holder, task_id, tenant, owner)
                    asked = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._until_settled(tap, tenant, owner), 1.0)
            finally:
                self.bus.close_tap(tap)
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(f"could not reach the worker running task {task_id} to cancel it; retry")

    async def _until_settled(self, tap: Any, tenant: str, owner: str) -> None:
        async for _seq, event, _data in self.engine._follow(tap, until_terminal=False, tenant=tenant, owner=owner):
            state = None
            if isinstance(event, TaskStatusUpdateEvent | Task):
                state = event.status.state
            if state in TERMINAL or state in INTERRUPTED:
                return
