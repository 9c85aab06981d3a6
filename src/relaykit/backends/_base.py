"""The backend interfaces: where tasks and push configs live, and how task events reach subscribers.

Every implementation (memory, SQLite, PostgreSQL; local bus, Redis) passes the same contract suite
(``tests/backends/test_store_contract.py``). Rules every ``TaskStore`` keeps:

* Tasks are partitioned by ``tenant`` and owned by ``owner``: every read, list and write is scoped by both, and a
  task outside the caller's scope is indistinguishable from a missing one (``None`` / absent from lists).
* ``save`` is optimistic: a ``TaskRecord`` carries the ``version`` it was read at; a write with a stale version raises
  ``ConflictError`` and changes nothing. A successful write bumps the record's ``version`` in place.
* ``list`` orders by ``status.timestamp`` descending, ties by id descending, with an opaque keyset cursor.
* A write is atomic: after a crash a task is either as it was or as it was written, never half-written.
* A stored task that cannot be decoded (written by a release that accepted what this one refuses, or damaged) is
  ``InternalError`` "cannot be read" when read by id (``stored_task``), and left out of ``list`` pages
  (``_paging.listed_tasks``): one bad row never hides the owner's other tasks. Either is logged by task id only.
  Every other read of many rows at once leaves such a row out and names it (``unreadable_rows``): the idempotency
  window refilled on start, the owed push notifications (whose marker it clears); ``fail_orphans`` fails it without
  its content (``failed_orphan``). One bad row never stops the server from starting, nor the others being read.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from relaykit._enums import Role, TaskState
from relaykit._errors import InternalError
from relaykit._ids import new_id
from relaykit._model import utc_now
from relaykit._types import Message, Part, Task, TaskPushNotificationConfig, TaskStatus

__all__ = [
    "Claim",
    "ConflictError",
    "DeliveryHealth",
    "DeliveryOutcome",
    "ListPage",
    "Orphan",
    "OutboxChanges",
    "OutboxEntry",
    "PageTokenError",
    "PushConfigStore",
    "PushOutbox",
    "StoreLockedError",
    "StreamKey",
    "TaskClaims",
    "TaskQuery",
    "TaskRecord",
    "TaskStore",
    "delete_task_configs",
    "failed_orphan",
    "failed_status",
    "from_epoch",
    "readable_task",
    "stored_task",
    "unreadable_rows",
]

log = logging.getLogger("relaykit.store")


class ConflictError(Exception):
    """A task write carried a stale version: someone else wrote the task in between."""


class PageTokenError(ValueError):
    """A ListTasks page token the store did not issue (``TaskStore.list``): the caller's error, InvalidParams.

    Its own class, so that no other ``ValueError`` from a listing (a stored task that does not validate) is taken
    for the client's mistake.
    """


# Shared, not SQLite's own: the PostgreSQL store's StoreInUseError is one too.
class StoreLockedError(RuntimeError):
    """The SQLite file is already served by another relaykit process (or another store object in this one)."""


@dataclass(slots=True)
class TaskRecord:
    """A stored task with its scope and version."""

    task: Task
    tenant: str = ""
    owner: str = "anonymous"
    version: int = 0
    # The last event sequence number published for the task (SSE ids continue from it after a restart).
    event_seq: int = 0
    # The task's ProtoJSON as of this save, when the writer already has it (stores use it instead of encoding
    # again; the engine reuses it for responses). Writers that change the task must reset it.
    body: bytes | None = None
    # Scale-out: the queued form of the message the task's current execution runs (``WorkItem.request``, a newline,
    # ``WorkItem.call``), stored with the SUBMITTED row and by each claim, so the entry can be re-created exactly.
    # Written by ``save`` only when the row is inserted, and by ``claim``; read back by ``claim``.
    request: bytes | None = None
    # The push notification of this write's state is owed (``relaykit.push._owed``): non-zero, the event seq it is
    # published under, written by ``save`` / ``save_claimed`` into the row with the state (a durable store keeps it
    # until the outbox commit that holds the notification clears it). Zero (every task without push configs): the
    # write leaves the stored marker alone. Stores without an owed-marker column ignore it.
    push_owed: int = 0
    # The ProtoJSON ``get`` decoded the task from, when the store keeps it so: what the task said when read (the
    # engine decodes its agent's copy from it, and measures the task by it, instead of encoding the task again).
    # Never written: ``save`` uses ``body``, so a caller that changes the task need not reset this.
    read: bytes | None = None


@dataclass(slots=True, frozen=True)
class TaskQuery:
    """ListTasks filters and page, already validated."""

    tenant: str = ""
    owner: str = "anonymous"
    context_id: str = ""
    state: TaskState | None = None
    status_after: datetime | None = None
    page_size: int = 50
    page_token: str = ""
    # What of each task the page carries: trimmed before the tasks are validated (``_paging.listed_task``), so a
    # task with a huge history or artifact costs a JSON parse, not a model per part. None keeps the whole history.
    history_length: int | None = None
    include_artifacts: bool = True


@dataclass(slots=True)
class ListPage:
    """One page of tasks plus the cursor of the next page (``""`` on the last) and the total match count."""

    tasks: list[Task] = field(default_factory=list)
    next_page_token: str = ""
    total_size: int = 0


@runtime_checkable
class TaskStore(Protocol):
    """Durable task storage."""

    async def start(self) -> None:
        """Open connections, create or migrate the schema."""

    async def close(self) -> None:
        """Release connections."""

    async def get(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> TaskRecord | None:
        """The task with its version, or ``None`` when missing or out of scope. A store that keeps the task as its
        ProtoJSON hands the bytes it read back as ``read`` too (optional)."""

    async def save(self, record: TaskRecord) -> None:
        """Insert (``version == 0``) or update (``version`` = the version read); bumps ``record.version``.

        Raises ``ConflictError`` when the stored version differs (or, on insert, when the id exists).
        """

    async def list(self, query: TaskQuery) -> ListPage:
        """Tasks matching ``query``, newest status first. Raises ``PageTokenError`` for a malformed page token."""

    async def delete(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        """Remove a task; ``True`` when something was removed."""

    async def fail_orphans(self, reason: str, *, failed: builtins.list[TaskRecord] | None = None) -> int:
        """Mark every SUBMITTED/WORKING task FAILED with ``reason`` as an agent status message; returns the count.

        Called on start: a task left active by a dead process will never be finished by it. The FAILED status is
        an event like any other: each task's ``event_seq`` moves on by one (the number the engine publishes it
        under), and ``failed`` (when given) receives each task as now stored. A durable store whose push configs
        live beside its tasks writes the FAILED status of a task that has configs with its owed marker
        (``TaskRecord.push_owed``, set on the record ``failed`` receives too): its notification survives a crash.
        """

    async def purge(
        self,
        before: datetime,
        *,
        interrupted: bool = False,
        purged: builtins.list[tuple[str, str, str]] | None = None,
    ) -> int:
        """Delete terminal tasks (``interrupted=True``: INPUT_REQUIRED / AUTH_REQUIRED ones instead) whose status
        timestamp is older than ``before``; returns the count. ``purged`` (when given) receives the
        ``(tenant, owner, task id)`` of each task deleted (so their push configs can go with them)."""


def stored_task(task_id: str, body: bytes | str) -> Task:
    """The task a store read for ``task_id``, decoded from ``body`` (its stored ProtoJSON).

    A body that does not decode is ``InternalError`` naming the task, never its content, and is logged here, once
    per read, by task id and the error's type: the caller learns the task exists and cannot be read, not a bare 500.

    >>> stored_task("t-1", b'{"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}').id
    't-1'
    """
    try:
        return Task.from_json(body)
    except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
        log.warning("task %s: its stored body cannot be read (%s)", task_id, type(exc).__name__)
        raise InternalError(
            f"task {task_id} is stored in a form this server cannot read (written by another release, or damaged)"
        ) from None


def readable_task(body: bytes | str) -> Task | None:
    """The task a stored ``body`` holds, or None when it cannot be read (for the readers of many rows, which leave
    such a row out and name it in ``unreadable_rows``).

    >>> readable_task(b'{"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}').id
    't-1'
    >>> readable_task(b'{"id": "t-1", "contextId": "c", "stat') is None
    True
    """
    try:
        return Task.from_json(body)
    except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        return None


_NAMED = 50  # ids named per line: a badly damaged table must not make one log line grow without bound


def unreadable_rows(what: str, task_ids: Sequence[str], then: str = "") -> None:
    """Log, once per read, that ``what`` left out the stored tasks ``task_ids`` because their bodies cannot be read:
    by task id (the first ``_NAMED`` of them), never content. ``then`` says what became of them. Nothing for none.

    >>> unreadable_rows("ListTasks", [])
    """
    if not task_ids:
        return
    named = ", ".join(task_ids[:_NAMED])
    if len(task_ids) > _NAMED:
        named += f" and {len(task_ids) - _NAMED} more"
    log.warning("%s left out %d stored task(s) it cannot read: %s%s", what, len(task_ids), named, then)


def failed_status(reason: str) -> TaskStatus:
    """A FAILED status with an agent message explaining why (used for orphans and shutdown)."""
    return TaskStatus(
        state=TaskState.FAILED,
        message=Message(message_id=new_id(), role=Role.AGENT, parts=[Part(text=reason)]),
        timestamp=utc_now(),
    )


def failed_orphan(task_id: str, context_id: str, body: bytes | str, reason: str) -> Task:
    """The stored task ``body`` as ``fail_orphans`` leaves it: FAILED with ``reason``, the status message appended to
    its history (CONTRACT: history holds the agent messages of status updates).

    A body that no longer validates (stored by a release that accepted it) must not keep the server from starting,
    nor stay active forever: it becomes a task with only its id, context and that FAILED status, which every reader
    can read again. The log names the task and the error's type, never the content.
    """
    try:
        task = Task.from_json(body)
    except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
        log.warning(
            "task %s: its stored body cannot be read (%s); marked FAILED without it", task_id, type(exc).__name__
        )
        reason += "; the task's stored content could not be read"
        task = Task(id=task_id, context_id=context_id, status=TaskStatus(state=TaskState.FAILED))
    status = failed_status(reason)
    task.status = status
    if status.message is not None:
        task.history.append(status.message)
    return task


# --- task claims (scale-out) ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Claim:
    """A successful ``TaskClaims.claim``: the task as stored right after it, and who held it before."""

    record: TaskRecord  # the task as stored right after the claim (version already bumped)
    previous: str | None  # the worker column before this claim (None = was unclaimed)


@dataclass(slots=True, frozen=True)
class Orphan:
    """An active task nobody alive is running (``TaskClaims.orphans``)."""

    task_id: str
    tenant: str
    owner: str
    worker: str | None  # the dead claimant, or None for an unstarted task


@runtime_checkable
class TaskClaims(Protocol):
    """Durable leases on tasks, for several processes sharing one store (memory: in-process; PostgreSQL).

    Every process has a worker id kept alive by ``heartbeat``. A process claims a task before it runs (or cancels,
    or recovers) it and releases it when its local execution is over, or already with the write that stores the task
    interrupted or terminal (``save_claimed``). A claim succeeds when the task is unclaimed,
    already claimed by the same worker, or claimed by a worker that is not alive (heartbeat expired, or retired).
    A claim bumps the task's ``version``, so a presumed-dead writer's next ``save`` raises ``ConflictError``
    (fencing); ``release`` does not. Stores shared by processes judge liveness on one clock (the database's).
    """

    async def heartbeat(self, worker: str, ttl: float) -> None:
        """Upsert: ``worker`` is alive until now + ``ttl`` seconds (the store's clock)."""

    async def retire(self, worker: str) -> None:
        """Forget ``worker``: its claims become claimable at once."""

    async def claim(
        self, task_id: str, worker: str, *, tenant: str = "", owner: str = "anonymous", request: bytes | None = None
    ) -> Claim | None:
        """Claim the task for ``worker``; ``None`` when it is missing, out of scope or held by another live worker."""

    async def release(self, task_id: str, worker: str) -> None:
        """Clear the claim if ``worker`` holds it (otherwise nothing); the version is left alone."""

    async def save_claimed(self, record: TaskRecord, worker: str | None) -> None:
        """``save`` (an update: a claimed task is stored) that also sets the claim to ``worker`` (``None``: released)
        in the same write, for the claimant only.

        Sound because claims bump the version: a write whose version still matches comes from the worker that
        claimed the task (or released it) last, so nobody else's claim is overwritten. A stale version raises
        ``ConflictError`` and changes nothing, the claim included.
        """

    async def insert_claimed(self, record: TaskRecord, worker: str, *, told: bool = True) -> None:
        """``save`` of a new task (``version`` 0) already claimed by ``worker``, in one write: the replica that
        accepts a message and runs it itself needs no separate claim. ``ConflictError`` when the task exists.

        ``told=False``: nobody is told of the task before its next write (its caller waits for the outcome alone),
        so this write need not be durable on its own, nor even made yet: the next one, durable, makes it durable
        too. PostgreSQL puts the insert off for a few milliseconds, so that a task answered at once is inserted
        once, as answered, and otherwise commits it asynchronously (a later synchronous commit flushes its WAL with
        its own); this store's own reads of the task see it either way. Should the database or the process crash
        in between, the task is lost unseen, and its caller gets an error, not an answer."""

    async def claimant(self, task_id: str) -> str | None:
        """The worker currently holding the task (alive or not), ``None`` when unclaimed or missing."""

    async def orphans(self, *, unstarted_after: float, limit: int = 100) -> list[Orphan]:
        """At most ``limit`` active tasks nobody alive runs, oldest status first.

        Active (SUBMITTED/WORKING) tasks whose claimant is not alive, plus unclaimed active tasks whose status
        timestamp is more than ``unstarted_after`` seconds old: a SUBMITTED one's queue entry may have been lost, and
        a WORKING one was let go by a runner that could not finish recording it (every running task is claimed).
        """


@runtime_checkable
class PushConfigStore(Protocol):
    """Storage of push-notification configs, several per task, scoped like tasks."""

    async def start(self) -> None:
        """Open connections, create or migrate the schema."""

    async def close(self) -> None:
        """Release connections."""

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        """Insert or replace the config with this (tenant, task_id, id)."""

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        """One config, or ``None``."""

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        """All configs of a task, oldest first."""

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        """Remove one config; ``True`` when something was removed. Deleting a missing config is not an error."""


async def delete_task_configs(store: PushConfigStore, tasks: builtins.list[tuple[str, str, str]]) -> int:
    """Remove every push config of ``tasks`` (``(tenant, owner, task id)`` each, e.g. purged by retention); returns
    how many were removed. A store may do it in bulk (an optional ``delete_tasks(tasks) -> int``, which relaykit's
    stores have); for one that has not, each task's configs are listed and deleted one by one."""
    if not tasks:
        return 0
    bulk = getattr(store, "delete_tasks", None)
    if bulk is not None:
        return int(await bulk(tasks))
    removed = 0
    for tenant, owner, task_id in tasks:
        for config in await store.list(task_id, tenant=tenant, owner=owner):
            removed += await store.delete(task_id, config.id, tenant=tenant, owner=owner)
    return removed


# --- push notification outbox ------------------------------------------------------------------------------------

StreamKey = tuple[str, str, str, str]
"""One delivery stream: ``(tenant, owner, task_id, config_id)``. Notifications of a stream are delivered in order."""


@dataclass(slots=True)
class OutboxEntry:
    """One push notification waiting for delivery: one task event (its StreamResponse JSON) for one push config.

    ``event_id`` names the notification for its whole life (every attempt, across restarts), so receivers can
    dedupe; ``seq`` is the event's per-task sequence number and orders the entries of a stream.
    """

    event_id: str
    task_id: str
    config_id: str
    seq: int
    body: bytes
    tenant: str = ""
    owner: str = "anonymous"
    created_at: float = 0.0  # epoch seconds
    attempts: int = 0
    next_attempt_at: float = 0.0  # epoch seconds; 0 = at once
    last_error: str = ""
    dead_at: float | None = None  # set once the entry is a dead letter
    # The trace context of the execution that produced the event (relaykit.telemetry), in memory; and its W3C
    # ``traceparent``, stored: an entry delivered after a restart or a takeover is still a child of that execution.
    trace: Any = field(default=None, compare=False, repr=False)
    traceparent: str = ""

    @property
    def stream(self) -> StreamKey:
        """The delivery stream this entry belongs to."""
        return (self.tenant, self.owner, self.task_id, self.config_id)


@dataclass(slots=True, frozen=True)
class DeliveryOutcome:
    """One delivery attempt's result, folded into the stream's ``DeliveryHealth``."""

    stream: StreamKey
    ok: bool
    at: float
    url: str = ""
    error: str = ""


@dataclass(slots=True)
class DeliveryHealth:
    """Delivery health of one push config of one task.

    ``delivered`` / ``failures`` count successful / failed attempts; ``consecutive_failures`` resets on success;
    ``pending`` notifications wait for delivery; ``dead`` ones were given up on (dead letters); ``suspended``: the
    sender stopped delivering to it (as seen by the process that answers).
    """

    task_id: str
    config_id: str
    tenant: str = ""
    owner: str = "anonymous"
    url: str = ""
    delivered: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_success: datetime | None = None
    last_failure: datetime | None = None
    last_error: str = ""
    pending: int = 0
    dead: int = 0
    suspended: bool = False  # its receiver kept failing: nothing more is attempted (relaykit.push._suspend)


def from_epoch(value: float | None) -> datetime | None:
    """An epoch-seconds timestamp as an aware UTC datetime (``None`` stays ``None``)."""
    return datetime.fromtimestamp(value, UTC) if value is not None else None


@dataclass(slots=True)
class OutboxChanges:
    """A batch of outbox writes, committed atomically by ``PushOutbox.commit``.

    Applied in this order: ``discarded`` streams lose their pending entries, ``added`` entries are inserted,
    ``delivered`` entries removed, ``retried`` entries get their new attempt count / next attempt / error, ``dead``
    entries become dead letters, ``outcomes`` update the health counters, ``settled`` clear owed markers, and
    ``released`` leases are given back.
    """

    added: list[OutboxEntry] = field(default_factory=list)
    delivered: list[OutboxEntry] = field(default_factory=list)
    retried: list[OutboxEntry] = field(default_factory=list)
    dead: list[OutboxEntry] = field(default_factory=list)
    discarded: list[StreamKey] = field(default_factory=list)
    outcomes: list[DeliveryOutcome] = field(default_factory=list)
    # ``(tenant, owner, task id, seq)``: the notifications of the task's state written at ``seq`` are among this
    # batch's entries (or were rightly not queued), so its owed marker (``TaskRecord.push_owed``) is cleared, in
    # this same transaction, unless a newer state's marker replaced it. Stores without markers ignore them.
    settled: list[tuple[str, str, str, int]] = field(default_factory=list)
    # ``(stream, worker)``: stream leases given back in this same transaction, after the results above, so no other
    # process can claim a stream while the results of its last holder are still uncommitted (it would deliver again
    # what was delivered). Only for an outbox whose leases other processes see (it has ``lease_left``): the sender
    # releases an in-process claim directly (``PushOutbox.release``), and such stores may ignore these.
    released: list[tuple[StreamKey, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.added
            or self.delivered
            or self.retried
            or self.dead
            or self.discarded
            or self.outcomes
            or self.settled
            or self.released
        )


@runtime_checkable
class PushOutbox(Protocol):
    """Durable queue of push notifications (the outbox), with dead letters and per-config delivery health.

    A notification is committed here before any delivery attempt, and removed only after a 2xx (at-least-once).
    ``durable`` says whether a commit survives the process (SQLite) or not (memory).

    Leases: a sender ``claim``s a stream before delivering it and ``release``s it after, so two senders never
    deliver the same (task, config) at once. The embedded stores serve one process, so their claims are
    in-process; a store shared by several processes implements them as expiring lease rows, and then also
    ``lease_left(stream, worker) -> float``: the seconds its holder's lease is surely still valid (0 once lost), which
    the sender checks before, and bounds, every attempt (the embedded stores' leases cannot be lost: no such method).
    Such a store's leases are given back by the commit of their holder's last results (``OutboxChanges.released``).

    Owed markers (``relaykit.push._owed``): an outbox that lives with a durable task store (the same SQLite file, the
    same PostgreSQL namespace) clears the markers of ``OutboxChanges.settled`` in its commit, and has
    ``owed(age, limit) -> list[TaskRecord]``: tasks as stored whose marker (``push_owed``) is at least ``age``
    seconds old, so the sender can notify them. An outbox without ``owed`` has no markers to recover.
    """

    durable: bool

    async def start(self) -> None:
        """Open connections, create or migrate the schema."""

    async def close(self) -> None:
        """Release connections."""

    async def commit(self, changes: OutboxChanges) -> None:
        """Apply a batch of changes in one transaction."""

    async def pending(self) -> list[OutboxEntry]:
        """Every entry still to deliver, ordered by stream and ``seq`` (read on start to resume delivery)."""

    async def claim(self, stream: StreamKey, worker: str) -> bool:
        """Lease ``stream`` to ``worker``; ``False`` when another worker holds it."""

    async def release(self, stream: StreamKey, worker: str) -> None:
        """Give a claimed stream back."""

    async def health(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[DeliveryHealth]:
        """Delivery health of every config of the task that has a record, pending entries or dead letters."""

    async def dead_letters(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[OutboxEntry]:
        """The task's dead letters, oldest first."""

    async def purge(self, before: float) -> tuple[int, int]:
        """Retention: delete dead letters that died before ``before`` (epoch seconds), and the health rows of
        streams with nothing pending or dead left whose last attempt is older; returns ``(dead letters, health
        rows)`` removed."""
