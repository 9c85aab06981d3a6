"""Scale-out, the accepting side: any replica takes SendMessage, SendStreamingMessage and CancelTask for any task.

A message is checked against the stored task, a new task is stored SUBMITTED (it survives any crash from here on),
a tap on the task's event stream is opened for this execution (events carry the message id of the execution that
produced them), and the message is enqueued; the caller then gets that execution's events or its outcome, from
whichever worker runs it. A message that starts a task, accepted by a worker with a free execution slot, is stored
SUBMITTED and claimed in one statement and runs here instead (``_start_here``): its caller gets the execution's
events and outcome in-process. A repeated ``messageId`` replays the original execution instead of starting another.

The idempotency window never serves another owner's task: a message's key is its caller's (tenant, owner) with, by
kind, the task a continuation names or the context of a new message (a client may name one id as both: a
continuation and a new message are never repeats of each other). A continuation's key is written before its task is
looked up, so a repeat is served only once the task is found visible to its caller; a new message's key can only
name the fresh task its first copy made.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import pydantic_core

from relaykit._enums import Role, TaskState
from relaykit._errors import (
    A2AError,
    InvalidParamsError,
    ServiceUnavailableError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from relaykit._ids import new_id
from relaykit._model import utc_now
from relaykit._principal import ANONYMOUS, ANONYMOUS_PRINCIPAL, Principal
from relaykit._requests import SendMessageRequest
from relaykit._state import ACTIVE, INTERRUPTED, TERMINAL
from relaykit._types import Message, Task, TaskStatus, TaskStatusUpdateEvent, stream_json
from relaykit.backends._base import Claim, TaskRecord
from relaykit.backends.redis import RedisWorkQueue, WorkItem
from relaykit.server._active import brings_push_config, outcome_only, visible
from relaykit.server._context import CallContext
from relaykit.server._readers import EventStream, StreamItem
from relaykit.server._runner import accept_continuation

log = logging.getLogger("relaykit.cluster")


if TYPE_CHECKING:
    from relaykit.backends.redis import RedisEventBus
    from relaykit.server._active import PendingRequest
    from relaykit.server._engine import TaskEngine

__all__ = ["Front", "decode_call", "encode_call", "queued", "requeued"]

# Headers that carry credentials are not copied into the work queue (workers see the principal, not its secret).
_PRIVATE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})


def encode_request(request: SendMessageRequest) -> bytes:
    """A message's request as the work queue carries it and the store keeps it (``TaskRecord.request``): its JSON,
    plus the protocol version of its inline push config, which is not on the wire (``TaskPushNotificationConfig.
    protocol_version``, "0.3" when the 0.3 codec decoded the request).

    Without it the worker that runs the message would bind a 0.3 client's inline config as a 1.0 one: under another
    id than the accepting replica's handler gives it (``inline_config_id``: the task id for 0.3), so the task would
    have two configs, and one of them would post 1.0 bodies to a 0.3 webhook.
    """
    data = request.to_json()
    inline = request.configuration.task_push_notification_config if request.configuration else None
    if inline is None or not inline.protocol_version:
        return data
    raw = json.loads(data)
    raw["configuration"]["taskPushNotificationConfig"]["relaykitProtocolVersion"] = inline.protocol_version
    return pydantic_core.to_json(raw)  # compact: no raw newline (``queued``)


def encode_call(call: CallContext) -> bytes:
    return json.dumps(
        {
            "u": call.user,
            # The principal without its claims (they stay with the request that carried them).
            "p": [call.principal.kind, call.principal.subject, call.principal.issuer],
            "n": call.tenant,
            "r": sorted(call.requested_extensions),
            "a": sorted(call.activated_extensions),
            "h": {k: v for k, v in call.headers.items() if k.lower() not in _PRIVATE_HEADERS},
        }
    ).encode()


def decode_call(data: bytes) -> CallContext:
    raw = json.loads(data or b"{}")
    kind, subject, issuer = raw.get("p") or (ANONYMOUS, "", "")
    return CallContext(
        principal=ANONYMOUS_PRINCIPAL if kind == ANONYMOUS else Principal(kind, subject, issuer=issuer),
        user=raw.get("u", "anonymous"),
        tenant=raw.get("n", ""),
        requested_extensions=frozenset(raw.get("r", ())),
        activated_extensions=set(raw.get("a", ())),
        headers=dict(raw.get("h", {})),
    )


def queued(item: WorkItem) -> bytes:
    """What the store keeps of a queue entry (``TaskRecord.request``): its request and its call, exactly."""
    # Neither holds a raw newline: both are compact JSON (a newline inside a string is escaped).
    return item.request + b"\n" + item.call


def requeued(record: TaskRecord, *, fresh: bool) -> WorkItem | None:
    """The queue entry of the task's current message, re-created from the store: equal to the original (less its
    entry id). None when the store has none, or it is not the last message of the task (then the caller falls back
    to that message alone)."""
    if not record.request:
        return None
    request, _, call = record.request.partition(b"\n")
    try:
        message_id = SendMessageRequest.model_validate_json(request).message.message_id
    except ValueError:
        return None
    last = next((m for m in reversed(record.task.history) if m.role is Role.USER), None)
    if last is None or last.message_id != message_id:
        return None
    return WorkItem(record.task.id, record.tenant, record.owner, request, call, fresh)


async def _abandon(read: asyncio.Future[Any]) -> None:
    """Cancel a pending read of an event generator and let it end, so that the generator can then be closed (closing
    one whose ``__anext__`` still runs raises RuntimeError)."""
    read.cancel()
    await asyncio.wait({read})


class Front:
    """Mixed into ``Cluster``: the accepting side."""

    engine: TaskEngine
    queue: RedisWorkQueue
    bus: RedisEventBus
    store: Any
    id: str
    idempotency_window: float
    cancel_timeout: float
    requeue_after: float

    async def _claim(
        self, task_id: str, tenant: str, owner: str, *, reuse: bool = True, request: bytes | None = None
    ) -> Claim | None:
        raise NotImplementedError  # provided by Cluster

    async def _release(self, task_id: str) -> None:
        raise NotImplementedError  # provided by Cluster

    def _can_run_here(self) -> bool:
        raise NotImplementedError  # provided by Cluster

    def _hold(self, task_id: str, held: bool) -> None:
        raise NotImplementedError  # provided by Cluster

    async def _take_over(self, claim: Claim) -> None:
        raise NotImplementedError  # provided by Cluster

    async def _accept(self, request: SendMessageRequest, call: CallContext, task_id: str) -> tuple[bytes, bytes] | None:
        """Check the message against the stored task; store a new task SUBMITTED, with the request as queued (so a
        lost queue entry is re-created exactly). Returns, for a new task, the queued request and call."""
        message = request.message
        tenant = request.tenant or call.tenant
        owner = call.user
        if message.task_id:
            record = await self.store.get(message.task_id, tenant=tenant, owner=owner)
            if record is None:
                raise TaskNotFoundError(task_id=message.task_id)
            task = record.task
            accept_continuation(
                message,
                task.id,
                task.context_id,
                task,
                max_history_bytes=self.engine.max_history_bytes,
                written=record.read,
            )
            return None
        record = self._submitted(request, call, task_id)
        await self.store.save(record)
        queued_request, _, queued_call = (record.request or b"").partition(b"\n")
        return queued_request, queued_call

    async def _start_here(
        self, request: SendMessageRequest, call: CallContext, task_id: str, *, streaming: bool
    ) -> PendingRequest:
        """Run where accepted: store the new task SUBMITTED and claimed by this replica in one statement, and run
        its message in this process (its events reach the caller in-process; the shared log is written as ever,
        for other subscribers and resumes). Should this replica die, the store's copy of the request lets another
        worker take the task over, as for a queued message."""
        record = self._submitted(request, call, task_id)
        config = request.configuration
        alone = outcome_only(config, streaming)
        # Told to nobody before the execution's next write (durable): its caller waits for the outcome alone, and
        # no webhook of the message hears of the task's first state. That write makes this one durable too, and may
        # carry it (PostgreSQL puts it off: a task answered at once is stored by one INSERT of its outcome).
        await self.store.insert_claimed(record, self.id, told=not alone or brings_push_config(config))
        self._hold(task_id, True)
        try:
            pending = self.engine.admit_claimed(
                request, call, record, fresh=True, streaming=streaming, outcome_only=alone
            )
        except BaseException:
            self._hold(task_id, False)
            raise
        self.bus.run_here(task_id, new=True)
        return pending

    async def _continue_here(
        self, request: SendMessageRequest, call: CallContext, *, streaming: bool
    ) -> PendingRequest | None:
        """Run where accepted, for a message to an existing task: claim the task (one statement, which also reads
        it) and run the message in this process, as ``_start_here`` does for a new task. Only for a task waiting for
        this very message (interrupted: INPUT_REQUIRED, AUTH_REQUIRED) that nobody else holds; anything else (not
        found, claimed elsewhere, running, terminal, a lost runner's) is left to the usual way (``_accept`` and the
        work queue), which knows every case. None then."""
        message = request.message
        tenant = request.tenant or call.tenant
        owner = call.user
        task_id = message.task_id
        # The message as a queue entry would carry it, stored with the claim: should this replica die, the worker
        # that takes the task over re-creates the message from it, as for a queued one.
        claim = await self._claim(task_id, tenant, owner, request=encode_request(request) + b"\n" + encode_call(call))
        if claim is None:
            return None
        task = claim.record.task
        if claim.previous not in (None, self.id) and task.status.state in ACTIVE:
            await self._take_over(claim)  # its runner was lost: recovered first, as a worker would
            return None
        if (
            task.status.state not in INTERRUPTED
            or claim.previous not in (None, self.id)
            or any(m.message_id == message.message_id for m in task.history)
        ):
            await self._release(task_id)
            return None
        try:
            accept_continuation(
                message,
                task.id,
                task.context_id,
                task,
                max_history_bytes=self.engine.max_history_bytes,
                written=claim.record.read,
            )
            alone = outcome_only(request.configuration, streaming)
            pending = self.engine.admit_claimed(request, call, claim.record, streaming=streaming, outcome_only=alone)
        except BaseException:
            await self._release(task_id)
            raise
        self.bus.run_here(task_id)
        return pending

    def _submitted(self, request: SendMessageRequest, call: CallContext, task_id: str) -> TaskRecord:
        """A new task, SUBMITTED, with the request as queued (so a lost queue entry is re-created exactly)."""
        message = request.message
        tenant = request.tenant or call.tenant
        owner = call.user
        message.context_id = message.context_id or new_id()
        message.task_id = task_id
        task = Task(
            id=task_id,
            context_id=message.context_id,
            status=TaskStatus(state=TaskState.SUBMITTED, timestamp=utc_now()),
            history=[message],
        )
        record = TaskRecord(task, tenant, owner, body=task.to_json())
        # The queued request carries the message as the client sent it (no task id: the task is new).
        message.task_id = ""
        queued_request, queued_call = encode_request(request), encode_call(call)
        record.request = queued_request + b"\n" + queued_call
        return record

    async def _submit(
        self, request: SendMessageRequest, call: CallContext, *, streaming: bool
    ) -> tuple[Any, str, str, bool, str, WorkItem | None, PendingRequest | None]:
        """Accept a message and run it here or enqueue it; returns ``(tap, task_id, idempotency key, is_repeat,
        original, item, pending)``: ``pending`` when it runs here (then no tap and no item)."""
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
            key = self.queue.idem_key(tenant, owner, message.task_id, message.context_id, message.message_id)
            original = await self.queue.remember(key, json.dumps({"t": task_id}), self.idempotency_window)
            if original is not None:
                return None, task_id, key, True, original, None, None
        fresh = False
        undo = None
        try:
            if engine.quota_gate is not None:  # per-principal quotas shared by the replicas (server._quotas)
                undo = await engine.quota_gate(owner, task_id, message.message_id)
            if self._can_run_here():
                if not message.task_id:
                    fresh = True
                    pending = await self._start_here(request, call, task_id, streaming=streaming)
                    return None, task_id, key, False, "", None, pending
                continued = await self._continue_here(request, call, streaming=streaming)
                if continued is not None:
                    return None, task_id, key, False, "", None, continued
            new = await self._accept(request, call, task_id)
            fresh = new is not None
            tap, _ = await self.bus.open(task_id, execution=message.message_id)
            try:
                encoded = new if new is not None else (encode_request(request), encode_call(call))
                item = WorkItem(task_id, tenant, owner, *encoded, fresh)
                if engine.telemetry is not None:
                    item.trace = engine.telemetry.carrier()
                await self.queue.enqueue(item)
            except BaseException:
                self.bus.close_tap(tap)
                raise
        except BaseException:
            if key:
                await self.queue.drop(key)
            if undo is not None:
                await undo()
            if fresh:
                with contextlib.suppress(Exception):
                    await self.store.delete(task_id, tenant=tenant, owner=owner)
            raise
        return tap, task_id, key, False, "", item, None

    async def _execution(
        self,
        tap: Any,
        item: WorkItem | None,
        tenant: str,
        owner: str,
        repeat: tuple[str, str, Message] | None = None,
    ) -> AsyncGenerator[StreamItem, None]:
        """The events of one execution. Until the first arrives, make sure it is still coming: for the first copy of
        a message, that its queue entry was not lost (a Redis restart without persistence loses the queue): a lost
        entry whose task nobody runs is enqueued again (a worker that already took it recognises the repeat and skips
        it); for a repeat (``repeat``: its idempotency key, the value it found there, the message), that the first
        copy did not fail before it ran (``_first_copy_failed``)."""
        items = self.engine._follow(tap, until_terminal=False, tenant=tenant, owner=owner)
        try:
            if item is not None or repeat is not None:
                first = asyncio.ensure_future(items.__anext__())
                try:
                    while not (await asyncio.wait({first}, timeout=self.requeue_after))[0]:
                        if item is not None:
                            await self._requeue_if_lost(item)
                            continue
                        assert repeat is not None
                        reply = await self._first_copy_failed(*repeat, tenant, owner)
                        if reply is not None:
                            await _abandon(first)
                            yield (0, reply, stream_json(reply))
                            return
                except BaseException:
                    await _abandon(first)
                    raise
                try:
                    yield first.result()
                except StopAsyncIteration:
                    return
            async for event in items:
                yield event
        finally:
            await items.aclose()

    async def _requeue_if_lost(self, item: WorkItem) -> None:
        try:
            if await self.queue.waiting(item) or await self.store.claimant(item.task_id):
                return  # still queued, or being run
            log.warning("task %s: its queued message was lost; queueing it again", item.task_id)
            await self.queue.enqueue(item)
        except Exception as exc:
            log.info("task %s: could not check its queued message: %s", item.task_id, exc)

    async def _first_copy_failed(
        self, key: str, original: str, message: Message, tenant: str, owner: str
    ) -> Message | None:
        """For a repeat still waiting for its original execution's first event: None while that execution may still
        come; its recorded reply when it ended with one; ``ServiceUnavailableError`` (retryable) when the first copy
        failed before it ran. A first copy refused after its key was written (the quotas, a store or queue error)
        drops the key, and a repeat that found the key in the meantime would otherwise wait for ever."""
        try:
            now = await self.queue.recall(key)
        except Exception:
            return None  # Redis unreachable: no verdict now; asked again at the next period
        if now == original:
            return None
        if now is not None:
            found = json.loads(now)
            if "m" in found:
                return Message.model_validate_json(found["m"])
            # Another copy came after the first failed, and runs now: a retry follows it.
        else:
            # The key is gone: the first copy failed, unless the window ran out while its execution waited to start
            # (then its task is stored, with the message in its history once it started).
            task_id = message.task_id or json.loads(original)["t"]
            record = await self.store.get(task_id, tenant=tenant, owner=owner)
            if record is not None and (
                not message.task_id or any(m.message_id == message.message_id for m in record.task.history)
            ):
                return None
        raise ServiceUnavailableError("the first copy of this message failed before it ran; send it again")

    async def _repeat_tap(self, original: str, message: Message, tenant: str, owner: str) -> tuple[Any, str, Any]:
        """For a repeated message: a tap replaying the original execution, or its recorded reply.

        A continuation's key says that this caller sent the message before, not that it may see the task: the key is
        written before the task is looked up (so that a concurrent copy finds it), and stays until that first copy
        is refused. So nothing is served before the task is found visible to this caller, and no other task is
        tapped, whatever the key holds. A new message's key names the task its first copy made (a fresh id, which
        may not be stored yet: its execution's events are awaited on the tap, and any read of it is scoped)."""
        task_id = message.task_id
        if task_id and await self.store.get(task_id, tenant=tenant, owner=owner) is None:
            raise TaskNotFoundError(task_id=task_id)
        found = json.loads(original)
        if "m" in found:
            return None, "", Message.model_validate_json(found["m"])
        task_id = task_id or found["t"]
        tap, gap = await self.bus.open(task_id, after=0, execution=message.message_id)
        if gap:
            self.bus.close_tap(tap)
            return None, task_id, None
        return tap, task_id, None

    async def send(self, request: SendMessageRequest, call: CallContext) -> bytes | Message:
        """SendMessage through the work queue (blocking, or ``returnImmediately``)."""
        config = request.configuration
        immediate = config is not None and config.return_immediately
        tenant = request.tenant or call.tenant
        tap, task_id, key, repeat, original, item, pending = await self._submit(request, call, streaming=False)
        if pending is not None:
            # Run here: answered from the execution's last event, as in one process (no re-read).
            result = await self.engine.outcome(pending, immediate)
            if isinstance(result, Message):
                await self._remember_reply(key, result)
            return result
        if repeat:
            tap, task_id, reply = await self._repeat_tap(original, request.message, tenant, call.user)
            if reply is not None:
                return reply  # type: ignore[no-any-return]
            if tap is None:
                return await self._stored(task_id, tenant, call.user)
        try:
            if immediate and item is not None and not item.fresh and await self.store.claimant(task_id):
                # A follow-up queued behind an execution running somewhere: its first event comes only when that one
                # ends. returnImmediately answers now with the task as it is, as in one process (the engine's
                # ``outcome``); the queued message runs next all the same.
                return await self._current(task_id, tenant, call.user)
            again = (key, original, request.message) if repeat else None
            outcome = self._outcome(tap, item, task_id, tenant, call.user, immediate, key, again)
            if self.engine.send_timeout is None:
                return await outcome
            try:
                return await asyncio.wait_for(outcome, self.engine.send_timeout)
            except TimeoutError:
                return await self._stored(task_id, tenant, call.user)
        finally:
            self.bus.close_tap(tap)

    async def _current(self, task_id: str, tenant: str, owner: str) -> bytes:
        """The task as GetTask shows it: live when it runs in this process, else as stored."""
        active = visible(self.engine.registry, task_id, tenant, owner)
        if active is not None and active.task is not None:
            return active.task.to_json()
        return await self._stored(task_id, tenant, owner)

    async def _stored(self, task_id: str, tenant: str, owner: str) -> bytes:
        record = await self.store.get(task_id, tenant=tenant, owner=owner)
        if record is None:
            raise TaskNotFoundError(task_id=task_id)
        return record.task.to_json()  # type: ignore[no-any-return]

    async def _outcome(
        self,
        tap: Any,
        item: WorkItem | None,
        task_id: str,
        tenant: str,
        owner: str,
        immediate: bool,
        key: str,
        repeat: tuple[str, str, Message] | None = None,
    ) -> bytes | Message:
        async for _seq, event, _data in self._execution(tap, item, tenant, owner, repeat):
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
        tap, task_id, key, repeat, original, work, pending = await self._submit(request, call, streaming=True)
        if pending is not None:
            relayed = await self.engine.open_relay(pending, holder, tenant, call.user)
            async with contextlib.aclosing(relayed) as items:
                async for item in items:
                    if isinstance(item[1], Message):
                        await self._remember_reply(key, item[1])
                    yield item
            return
        if repeat:
            tap, task_id, reply = await self._repeat_tap(original, request.message, tenant, call.user)
            if reply is not None:
                yield (0, reply, stream_json(reply))
                return
            if tap is None:
                task = Task.model_validate_json(await self._stored(task_id, tenant, call.user))
                yield (0, task, stream_json(task))
                return
        holder.attach(tap)
        try:
            again = (key, original, request.message) if repeat else None
            async for item in self._execution(tap, work, tenant, call.user, again):
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
