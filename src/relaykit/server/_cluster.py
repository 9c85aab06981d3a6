"""Scale-out: any replica accepts any request, any worker runs any task, nothing acknowledged is lost.

How a message travels (ARCHITECTURE §5):

1. The accepting replica checks it against the stored task, stores a new task as SUBMITTED (so it survives any
   crash from here on), opens a tap on the task's event stream for this execution, and enqueues the message on the
   work queue. **Run where accepted:** a new task's message, accepted by a worker with a free execution slot, is
   stored SUBMITTED and claimed in one statement and runs in that process, as in one process (events to the caller
   in-process, the shared log written for other subscribers and resumes); the queue is for overflow, continuations
   and API-only replicas.
2. A worker takes the entry, **claims** the task in the store (the lease: one runner per task across replicas; the
   claim bumps the task's version, so a presumed-dead runner can no longer write), hands the message to its engine,
   and acknowledges the entry. Its engine runs the executor exactly as in one process, appending events to the
   shared log. The engine's writes go through ``Cluster.save``, which moves the claim in the same statement: the
   write that stores the task interrupted or terminal releases it (unless another message for the task waits on
   this worker), before that state is published. So once a caller learns the task needs input, no claim is left
   to make its answer wait, on any replica. (An executor returns once it has interrupted the task; should it write
   again, that write takes the claim back, or is refused if another worker took the task meanwhile.)
3. The accepting replica relays that execution's events (streaming), or answers once it ends (blocking: the task as
   stored; returnImmediately: the first event).

Workers heartbeat; a task whose claimant stopped heartbeating is taken over by another worker's sweeper: FAILED
"worker lost", or run again when the executor declares itself ``idempotent``. A SUBMITTED task nobody claimed for
``unstarted_after`` seconds (its queue entry was lost, e.g. with a Redis restart) is started by the sweeper. Either
way the message is re-created from what the store kept of its queue entry (``TaskRecord.request``: written with the
SUBMITTED row and by each claim), so it runs with the configuration, metadata and extensions it was sent with. A task
whose execution here ended while the store was unreachable (its claim could not be released) is settled by this
worker once the store answers again, like a lost worker's: no acknowledged task is left WORKING.
CancelTask reaches the claimant through a per-worker signal and answers once CANCELED is persisted; a task nobody
runs is claimed and canceled by the replica that got the request. A repeated ``messageId`` (same tenant, owner and
task named, or context of a new message) within ``idempotency_window`` gets the original execution's result instead
of a second run, never anything of a task its caller cannot see (``Front``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from typing import TYPE_CHECKING, Any

from relaykit._enums import TaskState
from relaykit._errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    ResourceExhaustedError,
    ServiceUnavailableError,
    UnsupportedOperationError,
)
from relaykit._requests import SendMessageRequest
from relaykit._state import TERMINAL
from relaykit.backends._base import Claim, TaskRecord
from relaykit.backends.redis import RedisWorkQueue, WorkItem
from relaykit.server._context import CallContext
from relaykit.server._front import Front, decode_call, queued
from relaykit.server._runner import check_history
from relaykit.server._takeover import ACTIVE, take_over

if TYPE_CHECKING:
    from relaykit.backends.redis import RedisEventBus
    from relaykit.server._active import ActiveTask, PendingRequest
    from relaykit.server._engine import TaskEngine

__all__ = ["Cluster"]

log = logging.getLogger("relaykit.cluster")


def default_worker_id() -> str:
    """``host:pid:random``: unique per process start, readable in the store's claim column."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class _TaskLock(asyncio.Lock):
    """A task's lock in ``Cluster._locks``, with the number of coroutines that hold it or wait for it (``locked()``
    cannot tell: a released lock reads unlocked before the waiter it woke has taken it)."""

    users = 0


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    # Bounded: a Redis client call may swallow the cancellation and return normally; the loops then see it the next
    # time round, and a loop that does not is left to the event loop's end rather than hang the shutdown.
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2.0)


class Cluster(Front):
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
        for method in ("claim", "release", "save_claimed", "heartbeat", "retire", "orphans", "claimant"):
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
        # How long a caller waits for its execution's first event before checking that its queue entry still exists.
        self.requeue_after = max(2.0, lease)
        self.held: dict[str, int] = {}  # claimed task id -> claim generation
        # Tasks whose execution here ended while the store was unreachable (the claim could not be released, the
        # stored state may still say WORKING): settled once the store answers again (``_settle_owed``).
        self._owed: dict[str, tuple[str, str]] = {}  # task id -> (tenant, owner)
        # One per task this process holds, or whose claim, release or write is under way here (``_lock``).
        self._locks: dict[str, _TaskLock] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._intake: list[asyncio.Task[None]] = []
        self._jobs: set[asyncio.Task[Any]] = set()
        self._capacity = asyncio.Event()
        self._generation = 0
        self._intake_stopped = False
        self._closed = False
        self.alive = False  # the last heartbeat reached the store
        self.push_configs: Any = None  # the push sender's ConfigCache, kept coherent across replicas
        engine.cluster = self
        engine.on_idle = self._on_idle

    def share_push_configs(self, cache: Any) -> None:
        """Keep ``cache`` (a ``relaykit.push.ConfigCache``) coherent with the other replicas' writes."""
        self.push_configs = cache
        cache.on_change = lambda key: self._spawn(self._announce(key))

    async def _announce(self, key: tuple[str, str, str]) -> None:
        try:
            await self.queue.announce_config_change(*key)
        except Exception as exc:
            log.warning("could not announce a push-config change to the other replicas: %s", exc)

    async def _config_loop(self) -> None:
        async for change in self.queue.config_changes():
            # None: (re)subscribed, so announcements may have been missed: trust nothing cached.
            self.push_configs.forget(change)

    # --- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self.store.heartbeat(self.id, self.lease)
            self.alive = True
        except A2AError as exc:
            log.warning("could not register worker %s: %s", self.id, exc)
        self._loops.append(asyncio.create_task(self._heartbeat_loop(), name="relaykit-heartbeat"))
        if self.push_configs is not None:
            self._loops.append(asyncio.create_task(self._config_loop(), name="relaykit-push-configs"))
        if self.worker:
            self._intake = [
                asyncio.create_task(self._consume_loop(), name="relaykit-consume"),
                asyncio.create_task(self._sweep_loop(), name="relaykit-sweep"),
            ]
            self._loops.append(asyncio.create_task(self._cancel_loop(), name="relaykit-cancel-signals"))
        log.info("replica %s joined (%s)", self.id, "worker" if self.worker else "API only")

    async def stop_intake(self) -> None:
        """Take no more work (shutdown): running executions go on."""
        self._intake_stopped = True
        await _stop(self._intake)
        self._intake = []

    async def close(self) -> None:
        await self.stop_intake()
        self._closed = True
        self.queue.stop_listening()
        await _stop(self._loops)
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
        while not self._closed:
            await asyncio.sleep(self.heartbeat)
            try:
                await self.store.heartbeat(self.id, self.lease)
                if not self.alive:
                    log.warning("worker %s reaches the store again", self.id)
                self.alive = True
                if self._owed:
                    await self._settle_owed()
            except Exception as exc:
                if self.alive:
                    log.warning("worker %s heartbeat failed: %s", self.id, exc)
                self.alive = False

    # --- claims ----------------------------------------------------------------------------------------------

    def _lock(self, task_id: str) -> _TaskLock:
        """The task's lock, counted as in use until ``_unlock``."""
        lock = self._locks.get(task_id)
        if lock is None:
            lock = self._locks[task_id] = _TaskLock()
        lock.users += 1
        return lock

    def _unlock(self, task_id: str, lock: _TaskLock) -> None:
        """Done with the task's lock (out of its ``async with``). Forgotten once nobody holds it or waits for it and
        this process does not hold the task: a continuation may name any task id (an unknown one, another owner's),
        and its failed claim must leave nothing behind. Nobody can be using an older lock of the task then, so the
        next user's new one serialises as well."""
        lock.users -= 1
        if not lock.users and task_id not in self.held:
            del self._locks[task_id]

    async def _claim(
        self, task_id: str, tenant: str, owner: str, *, reuse: bool = True, request: bytes | None = None
    ) -> Claim | None:
        """Claim a task for this process. One it already holds is not claimed again: a claim bumps the task's
        version, which would fence off this process's own running execution. ``reuse=False`` (the sweeper): None
        for a task this process holds."""
        # Claims and releases of one task are serialised in this process, so a release issued as an execution ends
        # can never land after the claim for the next message.
        lock = self._lock(task_id)
        try:
            async with lock:
                if task_id in self.held:
                    if not reuse:
                        return None
                    record = await self.store.get(task_id, tenant=tenant, owner=owner)
                    return Claim(record, self.id) if record is not None else None
                if task_id in self.engine.registry:
                    # This process's execution of the task stored its outcome (which released the claim) and is
                    # finishing: the next message waits for its end (one execution at a time); a claim now would
                    # fence it off.
                    return None
                # ``request``: the queue entry being taken, stored with the claim (one statement) for ``take_over``.
                claim: Claim | None = await self.store.claim(
                    task_id, self.id, tenant=tenant, owner=owner, request=request
                )
                if claim is not None:
                    self._generation += 1
                    self.held[task_id] = self._generation
                return claim
        finally:
            self._unlock(task_id, lock)

    async def _settle_owed(self) -> None:
        """The store answers again: each task whose execution here ended during the outage is claimed again (this
        worker still holds it) and recovered like a lost worker's (FAILED "worker lost", or run again when the
        executor is idempotent), or just released when its outcome was stored after all."""
        for task_id, (tenant, owner) in list(self._owed.items()):
            if task_id in self.engine.registry:
                continue  # running here again (a later message): its own end releases it
            claim = await self._claim(task_id, tenant, owner, reuse=False)
            del self._owed[task_id]
            if claim is not None:
                await take_over(self, claim)

    async def _release(self, task_id: str, scope: tuple[str, str] | None = None) -> None:
        generation = self.held.get(task_id)
        if generation is None:
            return
        lock = self._lock(task_id)
        try:
            async with lock:
                if self.held.get(task_id) != generation or task_id in self.engine.registry:
                    return
                try:
                    await self.store.release(task_id, self.id)
                except Exception as exc:
                    # The claim stays; once the store answers, the heartbeat loop settles the task (its stored state
                    # may still be WORKING: the write of its outcome may have failed too).
                    log.warning("task %s: could not release the claim: %s", task_id, exc)
                    if scope is not None:
                        self._owed[task_id] = scope
                self.held.pop(task_id, None)
        finally:
            self._unlock(task_id, lock)

    async def save(self, active: ActiveTask, record: TaskRecord) -> None:
        """Write a task for the engine, moving this process's claim on it in the same statement: kept while the task
        is active or another message for it waits here, released with an interrupted or terminal state."""
        task_id = record.task.id
        lock = self._lock(task_id)
        try:
            async with lock:
                registered = self.engine.registry.get(task_id)
                if task_id not in self.held and registered is not active:
                    # Not claimed here (a cancel signal that arrived as the execution ended): a plain write, fenced
                    # by its version like any other.
                    await self.store.save(record)
                elif (
                    record.task.status.state in ACTIVE
                    or (registered is not None and (registered is not active or bool(registered.requests)))
                    or (
                        record.task.status.state is TaskState.AUTH_REQUIRED
                        and registered is active
                        and active.current is not None
                        and not active.execute_returned
                    )
                ):
                    # Held, or taken back by an execution that goes on after its outcome released it: the version
                    # matched, so nobody claimed the task in between. AUTH_REQUIRED written while ``execute`` runs
                    # keeps the claim: the agent may go on, waiting for a credential that reaches it out of band
                    # (its caller is answered already: ``Recorder._answer_interrupted``), and while it does, a cancel
                    # must reach it here and a follow-up wait for it, as in one process; the runner's end releases
                    # the claim (``_on_idle``: one more statement, for this state only). INPUT_REQUIRED releases
                    # with the write: its answer is a follow-up message, which waits for the execution to end
                    # anyway, so an execution does not go on after it (one that does takes the claim back at its
                    # next write, fenced by the version).
                    await self.store.save_claimed(record, self.id)
                    if task_id not in self.held:
                        self._generation += 1
                        self.held[task_id] = self._generation
                else:
                    await self.store.save_claimed(record, None)
                    self.held.pop(task_id, None)
        finally:
            self._unlock(task_id, lock)

    def _can_run_here(self) -> bool:
        """Whether a message accepted here may run here at once: a worker with a free execution slot (else the work
        queue hands it to whichever worker has one)."""
        engine = self.engine
        return self.worker and not self._intake_stopped and engine.running_executions < engine.max_concurrent

    def _hold(self, task_id: str, held: bool) -> None:
        """Record that this process claimed ``task_id`` by storing it (``insert_claimed``), or gave it up."""
        if held:
            self._generation += 1
            self.held[task_id] = self._generation
        else:
            self.held.pop(task_id, None)

    async def _take_over(self, claim: Claim) -> None:
        await take_over(self, claim)

    def _on_idle(self, active: ActiveTask) -> None:
        self._capacity.set()
        self.bus.run_elsewhere(active.task_id)
        if active.task_id in self.held:
            self._spawn(self._release(active.task_id, (active.tenant, active.owner)))

    # --- the worker side -------------------------------------------------------------------------------------

    async def _consume_loop(self) -> None:
        engine = self.engine
        attempt = 0
        while not self._intake_stopped:
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
        while not self._intake_stopped:
            await asyncio.sleep(self.lease * (0.5 + secrets.randbelow(1000) / 1000))
            try:
                for item in await self.queue.reclaim(self.id, self.lease * 2):
                    self._spawn(self._take(item))
                for orphan in await self.store.orphans(unstarted_after=self.unstarted_after, limit=100):
                    if orphan.task_id in self.engine.registry:
                        continue
                    try:
                        claim = await self._claim(orphan.task_id, orphan.tenant, orphan.owner, reuse=False)
                    except InternalError:
                        # Stored in a form this server cannot read (the store logged its id): one such task must not
                        # hold up the others. Claimed by this worker now, it is no orphan while this worker lives,
                        # so no later sweep reads it again.
                        continue
                    if claim is not None:
                        await take_over(self, claim)
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
            if self._intake_stopped:
                # Shutting down: leave the entry unacknowledged, so another worker gets it.
                raise ServiceUnavailableError("this worker is stopping")
            claim = await self._claim(item.task_id, item.tenant, item.owner, request=queued(item))
            if claim is not None:
                return claim
            if await self.store.get(item.task_id, tenant=item.tenant, owner=item.owner) is None:
                return None
            local = self.engine.registry.get(item.task_id)
            if local is not None and local.runner is not None:
                await asyncio.wait({local.runner}, timeout=delay)  # this process's execution is finishing
            else:
                await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _take(self, item: WorkItem) -> None:
        """Run one queue entry: claim its task, hand the message to the engine, acknowledge the entry."""
        try:
            request = SendMessageRequest.model_validate_json(item.request)
            call = decode_call(item.call)
        except ValueError:
            log.error("dropping a malformed work entry %r", item.entry_id)
            await self.queue.ack(item)
            return
        message_id = request.message.message_id
        tel = self.engine.telemetry
        try:
            if tel is None or not item.trace:
                pending = await self._admit(item, request, call, message_id)
            else:
                with tel.resumed(item.trace):  # the execution's parent: the accepting replica's request
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
            if claim.previous not in (None, self.id) and task.status.state in ACTIVE and not local:
                # Its runner was lost: recover the task first, then look at this message again.
                await take_over(self, claim)
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
            elif not local and self.engine.max_history_bytes > 0:
                # Checked at acceptance against the task as it was then; the executions that ran while this message
                # waited in the queue have added to the history since. (Run here behind a local execution, the
                # runner checks it when its turn comes.)
                try:
                    check_history(task, claim.record.read, request.message, self.engine.max_history_bytes)
                except InvalidParamsError as error:
                    await self.bus.publish_error(item.task_id, message_id, error, base_seq=claim.record.event_seq)
                    await self._release(task.id)
                    return None
            pending = self.engine.admit_claimed(request, call, claim.record, fresh=item.fresh)
            self.bus.run_here(task.id)
            return pending
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
