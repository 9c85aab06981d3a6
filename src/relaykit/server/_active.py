"""Per-task live state (``ActiveTask``) and one queued request (``PendingRequest``).

An ActiveTask exists while a task has a runner (executing or with messages queued). It is created on the first
message, and removed from the engine's registry when its runner finds the request queue empty: the registry never
holds idle tasks, so 10,000 sequential tasks leave it empty.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

from relaykit._requests import SendMessageConfiguration
from relaykit._types import Message, Task
from relaykit.backends._base import TaskRecord
from relaykit.backends._bus import Tap
from relaykit.server._context import CallContext, RequestContext

if TYPE_CHECKING:
    from relaykit.server._recent import Seen

__all__ = ["ActiveTask", "PendingRequest", "brings_push_config", "outcome_only", "visible"]


def outcome_only(configuration: SendMessageConfiguration | None, streaming: bool) -> bool:
    """Whether a message's caller waits for its outcome alone: blocking, not returnImmediately, not a stream. Nobody
    is then answered with the new task's first snapshot (``Recorder._create``)."""
    return not streaming and not (configuration is not None and configuration.return_immediately)


def brings_push_config(configuration: SendMessageConfiguration | None) -> bool:
    """Whether the message carries a push config inline: its webhook hears of the task from its first state on."""
    return configuration is not None and configuration.task_push_notification_config is not None


class PendingRequest:
    """One message waiting for, or in, execution, with the futures its caller awaits."""

    __slots__ = (
        "call",
        "configuration",
        "done",
        "ended",
        "first",
        "message",
        "metadata",
        "outcome_only",
        "push_bound",
        "rerun",
        "seen",
        "started",
        "tap",
        "trace",
    )

    def __init__(
        self,
        message: Message,
        configuration: SendMessageConfiguration | None,
        metadata: dict[str, Any] | None,
        call: CallContext,
        *,
        streaming: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.message = message
        self.configuration = configuration
        self.metadata = metadata
        self.call = call
        # Resolved at the first event of this request's execution with the task's ProtoJSON bytes (decoded only if
        # the caller needs an object) or the Message.
        self.first: asyncio.Future[bytes | Message] = loop.create_future()
        # Resolved with the final Task snapshot (or the Message) when the execution ends.
        self.done: asyncio.Future[bytes | Message] = loop.create_future()
        # Streaming callers get a tap opened by the runner just before the execution starts.
        self.started: asyncio.Future[Tap] | None = loop.create_future() if streaming else None
        self.tap: Tap | None = None
        # A re-run of a message already in the task's history (an idempotent executor taking over a lost worker's
        # task): it is not appended again.
        self.rerun = False
        # Its inline push config is stored (by the push hook, at the execution's first event): once per message,
        # whatever task id the config came with (a follow-up's may name the task already).
        self.push_bound = False
        # The trace context the message was admitted in (its execution span's parent); None without tracing.
        self.trace: Any = None
        # Its entry in the engine's recent messages (idempotency), told when ``done`` is settled. Called directly
        # rather than as a done callback: that would cost a loop callback per message.
        self.seen: Seen | None = None
        # Its caller, in this process, waits for the outcome alone (a blocking SendMessage run where accepted): no
        # one is answered with, or streams from, the execution's first snapshot (``Recorder._first_wait``).
        self.outcome_only = False
        # Made when the caller is answered at an interrupted state before the execution ends (``answer_early``);
        # resolved at that end. None otherwise (no future made per request for it).
        self.ended: asyncio.Future[None] | None = None

    def resolve(self, fut: asyncio.Future[Any], value: Any) -> None:
        if not fut.done():
            fut.set_result(value)

    def finish(self, value: Any) -> None:
        """Resolve ``done`` (the execution's outcome)."""
        done = self.done
        if not done.done():
            done.set_result(value)
        if self.seen is not None:
            self.seen.settle(done)
        if self.ended is not None:
            self._end()

    def answer_early(self, value: Any) -> None:
        """Resolve ``done`` while the execution goes on (the task is interrupted: ``Recorder._answer_interrupted``);
        from now on ``execution_end`` is what tells the execution's end."""
        self.finish(value)
        self.ended = self.done.get_loop().create_future()

    def execution_end(self) -> asyncio.Future[Any]:
        """Resolved when this request's execution ends: ``done``, unless its caller was answered before that."""
        return self.ended if self.ended is not None else self.done

    def _end(self) -> None:
        ended = self.ended
        if ended is not None and not ended.done():
            ended.set_result(None)

    def reject(self, exc: BaseException) -> None:
        for fut in (self.first, self.done, self.started):
            if fut is not None and not fut.done():
                fut.set_exception(exc)
                # The caller may have gone away (client disconnect); don't log "exception never retrieved".
                fut.exception()
        if self.seen is not None:
            self.seen.settle(self.done)
        if self.ended is not None:
            self._end()


class ActiveTask:
    """The live side of one task: its queue of requests, its runner, and its in-memory current state."""

    __slots__ = (
        "agent_error",
        "artifact_bytes",
        "cancel_reason",
        "cancel_requested",
        "chunk_bytes_since_flush",
        "chunks_since_flush",
        "context",
        "context_id",
        "current",
        "dirty",
        "emit_waiter",
        "emitting",
        "execute_returned",
        "first_write",
        "last_flush",
        "last_yield",
        "message_mode",
        "owner",
        "provisional",
        "record",
        "requests",
        "runner",
        "state_seen",
        "task_id",
        "tenant",
    )

    def __init__(self, task_id: str, context_id: str, tenant: str, owner: str, record: TaskRecord | None) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.tenant = tenant
        self.owner = owner
        self.record = record
        # The SUBMITTED row another replica stored when it accepted the message that starts this task (scale-out):
        # the execution treats the task as new (a Message reply is still allowed) and writes over that row.
        self.provisional: TaskRecord | None = None
        self.requests: deque[PendingRequest] = deque()
        self.runner: asyncio.Task[None] | None = None
        self.current: PendingRequest | None = None
        self.context: RequestContext | None = None
        self.agent_error: Exception | None = None
        self.cancel_requested = False
        self.cancel_reason = ""
        self.message_mode = False
        self.dirty = False
        self.chunks_since_flush = 0
        self.chunk_bytes_since_flush = 0  # about what the chunks since the last write add to the task's JSON
        # About the bytes of the task's artifacts (max_artifact_bytes): -1 until counted for a task read from the store
        # (counted at its first artifact event: an execution that publishes none pays nothing).
        self.artifact_bytes = 0 if record is None else -1
        self.last_flush = 0.0
        self.last_yield = 0.0
        # True while an event is applied to ``task`` but not yet published (its write may be in flight): a subscriber
        # must not take its snapshot then, or it would get that event twice. It waits on ``emit_waiter`` instead.
        self.emitting = False
        self.emit_waiter: asyncio.Future[None] | None = None
        # The embedded first write in flight, put off from the task's creation (``Recorder._create``): the
        # execution's next write waits for it, so the two never race on the row's version.
        self.first_write: asyncio.Task[None] | None = None
        # True once the current ``execute`` has returned (or raised): the engine is recording the outcome, and a
        # cancel must not interrupt those writes any more.
        self.execute_returned = False
        # The state this process last counted the task in (the tasks-by-state gauge; only with telemetry on).
        self.state_seen = ""

    @property
    def task(self) -> Task | None:
        """The current task, or ``None`` before the agent created it."""
        return self.record.task if self.record is not None else None

    @property
    def written(self) -> bytes | None:
        """The task's ProtoJSON as last written, or as read from the store when it has not been written since, while
        the live task still says exactly that; ``None`` once it has changed (a message added, an event being
        applied, chunks not yet flushed), or when nobody has its bytes."""
        record = self.record
        if record is None or self.dirty or self.chunks_since_flush or self.emitting:
            return None
        # Every write sets ``body``: until the first, the task is what the store read.
        return record.body if record.body is not None else record.read


def visible(registry: dict[str, ActiveTask], task_id: str, tenant: str, owner: str) -> ActiveTask | None:
    """The live task in ``registry`` as this caller may see it: one that exists (the agent created it) and is theirs."""
    active = registry.get(task_id)
    if active is None or active.task is None or active.tenant != tenant or active.owner != owner:
        return None
    return active
