"""Recording and publishing: each event an execution publishes becomes the task's state, stored, then sent out.

Invariants:

* every event of an execution goes through ``_on_event`` in the executor's own coroutine: checked, applied by the
  state machine, persisted (status changes and new tasks before they are published; artifact chunks coalesced and
  flushed at checkpoints), then published once as encoded ``StreamResponse`` bytes;
* a continuation's opening Task snapshot (what its caller's stream starts with) is no event of the task: it goes to
  that execution's caller alone (``_emit_opening``, ``EventBus.publish_private``) and the push hook, never to a
  subscriber or into a replay (a subscription is one Task, then status and artifact updates only);
* the stored ``event_seq`` names the event published after that write, so a reader that starts from the stored task
  resumes exactly after it;
* a new task's first snapshot that nobody can see (its caller waits for the outcome alone, no push config can be told
  of it, and nobody else knows the task's id yet) is not published: embedded, it is written with the task's next
  state or at the end of the loop pass, whichever comes first, so a message answered at once costs one write;
  scale-out, the row stored at acceptance already says it when it is SUBMITTED (``_create``);
* writes are never torn by cancellation: a write in flight completes before the cancellation is honoured;
* a state written while the push sender says its notification is owed (``owes_push``, armed with push) carries the
  owed marker in that write (``TaskRecord.push_owed``: the event's seq), so a crash before the push hook's outbox
  commit loses no notification (``relaykit.push._owed``). Unarmed, or for a task without push configs, the write is
  what it always was;
* a stream of N chunks costs O(N): a chunk checkpoint (which re-encodes and rewrites the whole task) waits, beyond
  the chunk-count / interval trigger, until the chunks since the last write add at least 1/``_GROWTH`` of the
  stored body's size, so the bytes re-encoded over a stream are a geometric series bounded by ``_GROWTH`` times its
  final size (plus one write per ``_MAX_CHECKPOINT_DELAY``, which bounds how late a chunk reaches the store); a task
  of at most ``_CHEAP_REWRITE`` bytes is also written on the interval trigger alone, so the chunks a client saw are
  stored within ``checkpoint_seconds`` (a resume after a crash relies on it) at one small rewrite per interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Coroutine
from typing import Any

from relaykit._enums import Role, TaskState
from relaykit._errors import ArtifactTooLargeError, InvalidAgentResponseError
from relaykit._ids import new_id
from relaykit._model import set_field, utc_now
from relaykit._state import INTERRUPTED, TERMINAL, apply
from relaykit._types import Message, Part, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent, stream_json
from relaykit.backends._base import TaskRecord, TaskStore
from relaykit.backends._bus import EventBus
from relaykit.backends.memory import LocalEventBus
from relaykit.server._active import ActiveTask, PendingRequest, brings_push_config
from relaykit.server._queue import Event
from relaykit.server._readers import copy_task

__all__ = ["Recorder"]

log = logging.getLogger("relaykit.engine")

_YIELD_INTERVAL = 0.010
_GROWTH = 4  # a chunk checkpoint rewrites the task once the chunks since the last write add 1/4 of its size
_MAX_CHECKPOINT_DELAY = 10.0  # seconds: chunks reach the store at least this often, however big the task
_CHEAP_REWRITE = 1 << 20  # bytes: a stored task up to this size is rewritten on the interval trigger alone
# Seconds a scale-out task's first state may wait for its next change before it is written on its own (the row
# stored at acceptance says SUBMITTED meanwhile); states after which an execution goes on.
_DEFERRED_WRITE = 0.1
_DEFERRABLE = frozenset({TaskState.SUBMITTED, TaskState.WORKING})
_PART_OVERHEAD = 16  # JSON framing of one part: '{"text":""},'


def _chunk_bytes(event: TaskArtifactUpdateEvent) -> int:
    return _parts_bytes(event.artifact.parts)


def _parts_bytes(parts: list[Part]) -> int:
    """About the ProtoJSON bytes of ``parts``, without encoding them (paces checkpoints, counts max_artifact_bytes)."""
    size = 0
    for part in parts:
        if part.text is not None:
            size += len(part.text) + _PART_OVERHEAD
        elif part.raw is not None:
            size += len(part.raw) * 4 // 3 + _PART_OVERHEAD
        elif part.url is not None:
            size += len(part.url) + _PART_OVERHEAD  # a data: URL can be large
        else:
            size += 64 + _PART_OVERHEAD  # data: a guess (measuring it would encode it a second time)
    return size


def _stored_artifact_bytes(task: Task) -> int:
    """About the bytes of the artifacts ``task`` already holds: what earlier executions published counts against
    max_artifact_bytes too, so a task cannot grow past it one follow-up at a time. O(parts), once per execution that
    publishes an artifact on a task read from the store."""
    return sum(_parts_bytes(artifact.parts) for artifact in task.artifacts)


def _agent_message(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=new_id(), role=Role.AGENT, parts=[Part(text=text)], task_id=task_id, context_id=context_id
    )


class Recorder:
    """The bottom layer of ``TaskEngine``: folds events into the live task, writes it, publishes it. It calls only
    the store, the bus and the push hook."""

    store: TaskStore
    bus: EventBus
    # Scale-out (``server._cluster.Cluster``) or None: its ``save`` writes the task and keeps or releases this
    # process's claim in the same statement.
    cluster: Any
    # Hook for push delivery: called with (active task, seq, event, data) after each publish.
    on_event: Any
    # Hook for push delivery: called with the active task when this execution creates it, before any of its events
    # is published (a new task has no push configs but those put from then on; none can have been put before).
    on_create: Any
    # Hook for push delivery (a durable outbox): called with the active task before a state of it is stored; True
    # when the state's notification is owed (the write then carries the owed marker). None until push is armed.
    owes_push: Any
    checkpoint_chunks: int
    checkpoint_seconds: float
    max_artifact_bytes: int  # artifact bytes a task may hold over all its executions (0: no limit); past it, FAILED
    _sync_store: bool
    _local_bus: LocalEventBus | None  # the bus, when it is the in-process one (appended to directly)
    registry: dict[str, ActiveTask]  # the tasks this process runs
    _deferred: set[asyncio.Task[None]]  # deferred first writes in flight
    # Observability (relaykit.telemetry.Telemetry) or None: spans around store writes and state publishes.
    telemetry: Any

    async def _on_event(self, active: ActiveTask, pending: PendingRequest, event: Event) -> None:
        if active.agent_error is not None:
            raise active.agent_error
        # One coroutine for the whole of an event's recording (a layer less per event than a wrapper around it).
        # Artifact chunks and status events, all but a few events, are told apart by their exact type first: an
        # isinstance against a model class that fails costs several times a type comparison. (Tested inline, not
        # kept in a variable: mypy narrows the event's type on them.)
        try:
            if (
                type(event) is not TaskArtifactUpdateEvent
                and type(event) is not TaskStatusUpdateEvent
                and isinstance(event, Message)
            ):
                if active.task is not None or active.message_mode:
                    raise InvalidAgentResponseError(
                        "a Message after the task was created, or a second Message: "
                        "replies about a task are task events",
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
            if (
                type(event) is not TaskArtifactUpdateEvent
                and type(event) is not TaskStatusUpdateEvent
                and isinstance(event, Task)
            ):
                event_task_id = event.id
            else:
                event_task_id = event.task_id
            if event_task_id != active.task_id:
                raise InvalidAgentResponseError(
                    f"event for task {event_task_id!r} published while executing task {active.task_id!r}"
                )
            if active.record is None:
                if type(event) is not TaskArtifactUpdateEvent and isinstance(event, Task) and event.artifacts:
                    self._count_artifacts(active, event)
                await self._create(active, pending, event)
                if type(event) is not TaskArtifactUpdateEvent and isinstance(event, Task):
                    created = active.task
                    if created is not None and created.status.state in INTERRUPTED:
                        # A new task that starts interrupted (stored by ``_create``: only SUBMITTED and WORKING
                        # first writes are put off): its blocking caller is answered while the execution goes on.
                        self._answer_interrupted(active, pending)
                    return
            task = active.task
            assert task is not None
            if type(event) is TaskArtifactUpdateEvent or (
                type(event) is not TaskStatusUpdateEvent and isinstance(event, TaskArtifactUpdateEvent)
            ):
                size = _chunk_bytes(event)
                if active.artifact_bytes < 0:  # a task read from the store: count what it already holds
                    active.artifact_bytes = _stored_artifact_bytes(task)
                active.artifact_bytes += size
                if self.max_artifact_bytes and active.artifact_bytes > self.max_artifact_bytes:
                    raise self._too_large(active)
                apply(task, event)
                active.chunks_since_flush += 1
                active.chunk_bytes_since_flush += size
                now = time.monotonic()
                since = now - active.last_flush
                timed = since >= self.checkpoint_seconds
                if active.chunks_since_flush >= self.checkpoint_chunks or timed:
                    stored = 0 if active.record is None or active.record.body is None else len(active.record.body)
                    flush = (
                        stored == 0
                        or active.chunk_bytes_since_flush * _GROWTH >= stored
                        or since >= _MAX_CHECKPOINT_DELAY
                        # The interval trigger alone for a task still cheap to rewrite: the chunks a client has seen
                        # reach the store within checkpoint_seconds (what a resume after a crash relies on), at a cost
                        # bounded by one small rewrite per interval.
                        or (timed and stored <= _CHEAP_REWRITE)
                    )
                else:
                    flush = False
                await self._emit(active, event, None, persist=flush)
            elif isinstance(event, TaskStatusUpdateEvent):
                if event.context_id != active.context_id:
                    raise InvalidAgentResponseError(f"status event with contextId {event.context_id!r}")
                set_field(event.status, "timestamp", utc_now())
                apply(task, event)
                await self._emit(active, event, None, persist=True)
                if event.status.state in INTERRUPTED:
                    self._answer_interrupted(active, pending)
            else:  # a Task object replacing the snapshot
                self._count_artifacts(active, event)
                if event.status.timestamp is None or event.status.state is not task.status.state:
                    event.status.timestamp = utc_now()
                apply(task, event)
                await self._emit(active, None, None, persist=True)
                if task.status.state in INTERRUPTED:
                    self._answer_interrupted(active, pending)
            if not pending.first.done() and not pending.outcome_only:
                # (Nobody awaits the first snapshot of an outcome-only caller: see ``_create``.)
                pending.resolve(pending.first, self._body(active))
        except InvalidAgentResponseError as exc:
            active.agent_error = exc
            raise

    def _answer_interrupted(self, active: ActiveTask, pending: PendingRequest) -> None:
        """The task is interrupted (INPUT_REQUIRED, AUTH_REQUIRED) and stored so: a blocking SendMessage answers now
        (digest §5.4: blocking returns when the task is terminal or interrupted), even if the execution goes on, as an
        agent waiting for a credential that arrives out of band does. Its end is still what a cancel waits for
        (``PendingRequest.execution_end``); a stream still follows the execution until it ends."""
        if not pending.done.done():
            body = self._body(active)
            pending.resolve(pending.first, body)
            pending.answer_early(body)

    def _count_artifacts(self, active: ActiveTask, task: Task) -> None:
        """A Task the agent published carries artifacts: they replace the task's, and count as its artifact bytes."""
        active.artifact_bytes = _stored_artifact_bytes(task)
        if self.max_artifact_bytes and active.artifact_bytes > self.max_artifact_bytes:
            raise self._too_large(active)

    def _too_large(self, active: ActiveTask) -> ArtifactTooLargeError:
        """The task's artifacts passed ``max_artifact_bytes`` (chunk by chunk, or in a whole Task published)."""
        return ArtifactTooLargeError(
            f"The agent's artifacts exceeded the server's limit of {self.max_artifact_bytes} bytes.",
            task_id=active.task_id,
        )

    async def _create(self, active: ActiveTask, pending: PendingRequest, event: Event | None) -> None:
        message = pending.message
        set_field(message, "task_id", active.task_id)
        if type(event) is not TaskArtifactUpdateEvent and isinstance(event, Task):
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
        if self.on_create is not None:
            # Now, not with the task's first published event: that may come later (or never, for a first snapshot
            # nobody sees), after a config was put for the task meanwhile.
            self.on_create(active)
        provisional, active.provisional = active.provisional, None
        version = provisional.version if provisional is not None else 0  # write over the accepted row
        active.record = TaskRecord(task, active.tenant, active.owner, version, self.bus.last_seq(active.task_id))
        if provisional is not None and task.status.state in _DEFERRABLE:
            # Scale-out: the task is stored (SUBMITTED, its message the history) and claimed by this process, so a
            # crash from here on is recovered like any other. Its first state is written with its next change, or
            # within _DEFERRED_WRITE: a message answered at once costs one write, not two. A reader starting from
            # the stored row (its event_seq) still gets this event.
            active.record.event_seq = provisional.event_seq
            active.record.body = provisional.body  # what is stored (the checkpoints weigh chunks against it)
            active.last_flush = time.monotonic()
            active.dirty = True
            if task.status.state is TaskState.SUBMITTED and not self._first_wait(pending):
                # Nobody here is answered with this first snapshot, and it says what the stored row says (the
                # message, SUBMITTED): neither encoded nor published. A subscriber elsewhere starts from that row
                # (its event_seq), and the execution's events follow it. (A WORKING task, as ``@agent`` starts, is
                # published: it is news to such a subscriber.)
                asyncio.get_running_loop().call_later(_DEFERRED_WRITE, self._write_deferred, active, active.record)
                return
            await self._emit(active, None, None, persist=False, wait=self._first_wait(pending))
            record = active.record
            asyncio.get_running_loop().call_later(_DEFERRED_WRITE, self._write_deferred, active, record)
        elif self.cluster is None and task.status.state in _DEFERRABLE and not self._first_wait(pending):
            # Embedded, and nobody can see this first snapshot: the caller waits for the outcome alone, no push
            # config can be told of it, and no one else knows the new task's id yet (no tap, no subscriber). So it
            # is neither encoded, written nor published now: it is written at the end of this loop pass, unless the
            # execution's next write (typically its answer, in the same pass) has carried it by then. A message
            # answered at once costs one write, not two; the row exists before the loop reads any other request
            # (a ListTasks), and a task is never answered before its state is stored. ``first`` stays unresolved:
            # the outcome resolves it, and a returnImmediately repeat meanwhile gets the task as it is.
            active.dirty = True
            active.last_flush = time.monotonic()
            asyncio.get_running_loop().call_soon(self._write_first, active, active.record)
            return
        else:
            await self._emit(active, None, None, persist=True)
        pending.resolve(pending.first, self._body(active))

    def _write_first(self, active: ActiveTask, record: TaskRecord) -> None:
        """The embedded first write put off by ``_create``, unless a write since has carried it. It runs beside the
        execution, which goes on changing the live task meanwhile, so it writes a copy taken now."""
        if not self._unwritten(active, record):
            return
        if active.emitting:
            # An emit is in flight: a persisting one has already cleared ``dirty``, so this one only publishes
            # (awaiting a push hook, say). Look again once it is done.
            asyncio.get_running_loop().call_soon(self._write_first, active, record)
            return
        # The row stands for every event published so far (none, or the chunks the agent published since).
        record.event_seq = self.bus.last_seq(active.task_id, record.event_seq)
        copy = self._copy_to_write(active, record)
        record.body = copy.body  # what is being stored (the checkpoints weigh chunks against it)
        active.first_write = self._beside(self._first_write(active, record, copy))

    async def _first_write(self, active: ActiveTask, record: TaskRecord, copy: TaskRecord) -> None:
        try:
            tel = self.telemetry
            if tel is None:
                await self.store.save(copy)
            else:
                tel.task_state(active, copy.task.status.state.name)
                with tel.span("a2a.store.write", active.task_id):
                    await self.store.save(copy)
            record.version = copy.version  # the execution's next write follows this one
        except Exception as exc:
            active.dirty = True  # the execution's next write carries it
            log.warning("task %s: its first state waits for its next write: %s", active.task_id, exc)
        finally:
            active.first_write = None

    def _first_wait(self, pending: PendingRequest) -> bool:
        """Whether the publisher of an execution's first, unpersisted snapshot waits for its append. Not when its
        caller here waits for the outcome alone and no push hook is told of it: then nobody needs the append to
        have landed before the agent goes on (taps get the event once it has), and it goes out with the execution's
        next appends instead of costing the agent a round trip. Otherwise it is waited for: a returnImmediately
        caller or a push hook may not learn of an event the log could still lose, and a stream's first event leaves
        at once, not behind the chunks an agent publishes without waiting. The push hook counts only when the
        message brings a push config: this snapshot starts a new task, whose id a client learns from this snapshot (or,
        in the milliseconds since the row was stored, from ListTasks), so no other config is registered yet, and with
        none the hook delivers nothing. (A config registered within that window could at worst see this snapshot
        delivered although its append later failed.)"""
        if not pending.outcome_only:
            return True
        if self.on_event is None:
            return False
        return brings_push_config(pending.configuration)

    def _write_deferred(self, active: ActiveTask, record: TaskRecord) -> None:
        """The deferred first write, unless the runner wrote since. It runs beside the runner, so it writes a copy
        taken now (the live task and its event_seq move on meanwhile) and never in the middle of an emit."""
        if not self._unwritten(active, record):
            return
        if active.emitting:
            asyncio.get_running_loop().call_later(_DEFERRED_WRITE, self._write_deferred, active, record)
            return
        taken = record.body
        self._beside(self._flush_deferred(active, record, self._copy_to_write(active, record), taken))

    def _unwritten(self, active: ActiveTask, record: TaskRecord) -> bool:
        """Whether a put-off first write is still to be made: no write has carried the task's state since, and
        this execution still owns the task."""
        return active.dirty and active.record is record and self.registry.get(active.task_id) is active

    def _copy_to_write(self, active: ActiveTask, record: TaskRecord) -> TaskRecord:
        """A frozen copy of the live task, for a write beside the execution (which goes on changing the task); from
        now on the task counts as written."""
        body = record.task.to_json()
        active.dirty = False
        active.chunks_since_flush = 0
        active.chunk_bytes_since_flush = 0
        active.last_flush = time.monotonic()
        return TaskRecord(Task.from_json(body), record.tenant, record.owner, record.version, record.event_seq, body)

    def _beside(self, write: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``write`` in its own task, kept referenced until it ends."""
        task = asyncio.ensure_future(write)
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)
        return task

    async def _flush_deferred(
        self, active: ActiveTask, record: TaskRecord, copy: TaskRecord, taken: bytes | None
    ) -> None:
        try:
            # Serialised with the runner's writes by Cluster.save (one lock per task). Should the runner write
            # first, this copy's version is stale: it conflicts and changes nothing (the runner's write has it all).
            await self.cluster.save(active, copy)
        except Exception as exc:
            active.dirty = True
            log.info("task %s: its first state waits for its next write: %s", active.task_id, exc)
            return
        # Still inside the same step as the lock's release: the runner's next write reads this version.
        record.version = copy.version
        # The copy's bytes become "what is stored" only if the runner has not encoded a newer state meanwhile: a
        # terminal write waiting on this save's lock has already set its own body (and cleared ``dirty``), and
        # replacing it with this older copy made a blocking caller's answer, and the stored row, the mid-stream one.
        if record.body is taken and not active.dirty:
            record.body = copy.body

    def _base_seq(self, active: ActiveTask) -> int:
        return active.record.event_seq if active.record is not None else 0

    async def _emit(
        self,
        active: ActiveTask,
        event: Any,
        data: bytes | None,
        *,
        persist: bool,
        body: bytes | None = None,
        wait: bool = True,
    ) -> int:
        """Persist (when asked) and then publish one event. The stored ``event_seq`` names this very event, so a
        subscriber that starts from the stored task resumes exactly after it.

        ``event=None`` publishes the task itself: its bytes are the ones just persisted (or ``body``), and the event
        object is a frozen copy, since readers look at it later while the live task keeps changing.
        ``data=None`` leaves encoding to whoever needs the bytes (a live tap, the push hook, a replay).
        ``wait=False``: an unpersisted task snapshot need not wait for its append (see ``_publish``).
        """
        record = active.record
        active.emitting = True
        base: int | None = None
        try:
            if persist and record is not None:
                first = active.first_write
                if first is not None:
                    # Embedded: the put-off first write is in flight; this write follows it (one version after
                    # another). Shielded: a cancelled caller here must not cancel that write.
                    await asyncio.shield(first)
                # The stored event_seq names the event being published now (the one after the log's newest).
                base = self.bus.last_seq(active.task_id, record.event_seq)
                record.event_seq = base + 1
                owes = self.owes_push
                if owes is not None and not isinstance(event, TaskArtifactUpdateEvent) and owes(active):
                    # A state (not a chunk checkpoint) whose notification is owed: the marker goes with this write,
                    # and the push hook of this very event settles it (relaykit.push._owed).
                    record.push_owed = record.event_seq
                if self.telemetry is None:
                    await self._write(active, record)  # ``_persist`` without its coroutine
                else:
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
                return await self._publish(active, event, data, terminal=terminal, base=base, wait=wait)
            return await self._publish(active, event, data, base=base)
        finally:
            _emitted(active)

    async def _emit_opening(self, active: ActiveTask, pending: PendingRequest, body: bytes, *, wait: bool) -> None:
        """Publish a continuation's opening snapshot (``body``, the task as its execution starts) for this
        execution's caller alone, and hand it to the push hook. Once per continuation, so not on the per-event path."""
        record = active.record
        assert record is not None
        on_event = self.on_event
        data = stream_json(record.task, body)
        # The push hook looks at the object; a tap decodes the bytes itself when its reader needs the object.
        event = Task.model_validate_json(body) if on_event is not None else None
        active.emitting = True
        try:
            publish = self.bus.publish_private(
                active.task_id,
                event,
                data,
                execution=pending.message.message_id,
                base_seq=record.event_seq,
                wait=wait,
            )
            tel = self.telemetry
            if tel is None:
                seq = await publish
            else:
                with tel.span("a2a.bus.publish", active.task_id):
                    seq = await publish
            record.event_seq = seq
            if on_event is not None:
                try:
                    await on_event(active, seq, event, data)
                except Exception:
                    log.exception("task %s: event hook failed", active.task_id)
        finally:
            _emitted(active)
        if self.bus.woke:
            # Its caller's reader waits for it: let it go out now, as ``_publish`` does for a stream's first event.
            active.last_yield = time.monotonic()
            await asyncio.sleep(0)

    async def _publish(
        self,
        active: ActiveTask,
        event: Any,
        data: bytes | None,
        *,
        terminal: bool | None = None,
        base: int | None = None,
        wait: bool = True,
    ) -> int:
        written = base is not None  # the event was written with the task (its publish is waited for)
        kind = type(event)
        # (Exact types first: an isinstance against a model class that fails costs more than the test it spares.)
        chunk = kind is TaskArtifactUpdateEvent or (
            kind is not TaskStatusUpdateEvent and isinstance(event, TaskArtifactUpdateEvent)
        )
        if terminal is None:
            if chunk:
                terminal = False
            elif kind is TaskStatusUpdateEvent:
                terminal = event.status.state in TERMINAL
            else:
                terminal = isinstance(event, Message) or (
                    isinstance(event, TaskStatusUpdateEvent | Task) and event.status.state in TERMINAL
                )
        bus = self.bus
        if base is None:
            base = self._base_seq(active)
        tel = self.telemetry
        local = self._local_bus
        if local is not None:
            # The in-process bus appends at once: called directly, without a coroutine per event.
            if tel is None or chunk:
                seq = local.append(active.task_id, event, data, terminal=terminal, base_seq=base)
            else:
                with tel.span("a2a.bus.publish", active.task_id):
                    seq = local.append(active.task_id, event, data, terminal=terminal, base_seq=base)
        else:
            current = active.current
            publish = bus.publish(
                active.task_id,
                event,
                data,
                terminal=terminal,
                base_seq=base,
                execution=current.message.message_id if current is not None else "",
                # A chunk not written with the task (no checkpoint) need not be waited for: its append is batched
                # with the next ones, and a failure is raised by the task's next publish. (Nor, when asked, a
                # snapshot.)
                wait=written or (wait and not chunk),
            )
            if tel is None or chunk:
                seq = await publish  # artifact chunks get no span each (a 1,000-chunk stream is not 1,000 spans)
            else:
                with tel.span("a2a.bus.publish", active.task_id):
                    seq = await publish
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
        tel = self.telemetry
        if tel is None:
            await self._write(active, record)
            return
        tel.task_state(active, record.task.status.state.name)
        with tel.span("a2a.store.write", active.task_id):
            await self._write(active, record)

    def _write(self, active: ActiveTask, record: TaskRecord) -> Awaitable[None]:
        """Encode the task for the store now; the returned awaitable writes it. Not a coroutine itself: with a store
        that writes in the caller's task, the caller awaits the store's own coroutine (a layer less per write)."""
        active.dirty = False
        active.chunks_since_flush = 0
        active.chunk_bytes_since_flush = 0
        active.last_flush = time.monotonic()
        record.body = record.task.to_json()
        if self.cluster is not None:
            # Scale-out: the write also keeps or releases this process's claim on the task (Cluster.save), so an
            # interrupted or finished task is unclaimed by the time its event is published.
            return _shielded(self.cluster.save(active, record))
        if self._sync_store:
            return self.store.save(record)
        return _shielded(self.store.save(record))

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


async def _shielded(write: Awaitable[None]) -> None:
    """Finish a write before honouring a cancellation, so a cancel never tears or forgets a write."""
    task = asyncio.ensure_future(write)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


def _emitted(active: ActiveTask) -> None:
    """An emission is over: the next one may start (``emit_waiter``, if one waits for it)."""
    active.emitting = False
    waiter = active.emit_waiter
    if waiter is not None:
        active.emit_waiter = None
        if not waiter.done():
            waiter.set_result(None)
