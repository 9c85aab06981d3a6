"""Push delivery: the engine hook that fills the outbox, and the sender that empties it.

Flow: the engine awaits ``PushSender.on_event`` after publishing each event. The hook binds an inline config
(``SendMessageConfiguration.taskPushNotificationConfig``) when the task is created, looks up the task's configs
(``ConfigCache``: no store read per event), and appends one ``OutboxEntry`` per config to the write-behind batch
(``OutboxWriter``); that is all the engine's hot path pays. After the batch is committed, each entry joins its
stream's queue (one stream per (task, config)), and one runner per stream delivers the queue in ``seq`` order:
``POST url`` with the event's StreamResponse JSON, ``Content-Type: application/a2a+json``,
``Authorization: <scheme> <credentials>`` and ``X-A2A-Notification-Token: <token>`` from the config,
``X-Relaykit-Event-Id`` (stable per notification) and, with a signing key, ``X-A2A-Signature``.

At most ``DeliveryPolicy.concurrency`` requests are in flight, ``per_destination`` of them to one ``host:port``,
``per_address`` to one ``address:port`` (the address the webhook's host resolves to: names sharing an address share
its slots), and ``per_owner`` to one owner's webhooks, when set: a receiver that never answers holds only its share
(``_slots``). A 2xx removes the
entry; anything else (or a timeout, default 10 s for the whole request) is retried with exponential backoff and
jitter, honouring ``Retry-After``, until ``max_attempts`` attempts or ``max_age`` seconds, and then the entry becomes
a dead letter; a config whose receiver keeps failing is suspended (``_suspend``).
Redirects are not followed. The SSRF guard runs again at connect time.
A restart resumes the outbox's pending entries; with an outbox shared by replicas, each sender also sweeps it every
third of the lease and takes over the streams of a replica that died (their leases expired). One runner per stream
(and a store lease) means two deliveries of the same (task, config) never overlap; a runner whose lease is lost, or
ran out while the database was away, stops at once and leaves its entries to the next holder.

A state change is never lost between the task's write and the outbox commit: the engine stores it with an owed
marker when the task may have push configs (``owes``), the hook's commit clears it, and a marker left by a crash
becomes a snapshot notification at the next start, one left by a hook that failed in a live process at the next
sweep (every ``sweep_every`` seconds, on every durable outbox: ``_owed``).

Modules: this one holds ``PushSender``, its lifecycle and the engine hook (and re-exports ``ConfigCache`` and
``DeliveryPolicy``); ``_delivery`` the streams and their runners (the sender's base class); ``_slots`` the fair
bounds on requests in flight; ``_webhook`` one POST to a receiver (client, headers, the attempt); ``_config_cache``
the cached view of the push-config store; ``_policy`` ``DeliveryPolicy``; ``_owed`` the owed markers' recovery.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any, Literal

import httpx

from relaykit._enums import TaskState
from relaykit._ids import inline_config_id
from relaykit._types import Message, Task, TaskStatusUpdateEvent, stream_json
from relaykit._v03 import push_body
from relaykit.backends._base import (
    DeliveryHealth,
    OutboxEntry,
    PushConfigStore,
    PushOutbox,
    StreamKey,
)
from relaykit.push._config_cache import ConfigCache, TaskKey
from relaykit.push._delivery import StreamDelivery
from relaykit.push._outbox import OutboxWriter
from relaykit.push._owed import recover_owed
from relaykit.push._policy import DeliveryPolicy
from relaykit.push._rate import DROP, SNAPSHOT, NotificationGate
from relaykit.push._signing import PushSigner
from relaykit.push._slots import DeliverySlots
from relaykit.push._ssrf import WebhookGuard
from relaykit.push._suspend import Suspensions
from relaykit.push._webhook import EVENT_ID_HEADER, quiet_webhook_logs, webhook_client

if TYPE_CHECKING:
    from relaykit.server._active import ActiveTask
    from relaykit.server._engine import TaskEngine

__all__ = ["EVENT_ID_HEADER", "ConfigCache", "DeliveryPolicy", "PushEvents", "PushSender"]

log = logging.getLogger("relaykit.push")

PushEvents = Literal["all", "state"]

_TERMINAL = frozenset(s for s in TaskState if s.is_terminal)


def _state_of(event: Any) -> TaskState | None:
    if isinstance(event, Task | TaskStatusUpdateEvent):
        return event.status.state
    return None


class PushSender(StreamDelivery):
    """Delivers push notifications from a ``PushOutbox``; ``on_event`` is the engine hook that fills it (and
    ``on_create`` the one that tells it of a new task, so it never reads the store for that task's configs).

    ``events``: ``"all"`` (every task event: snapshots, status and artifact updates) or ``"state"`` (only the
    events that change the task's state). ``allow``: the SSRF guard's allow list. ``signer``: signs deliveries.
    ``notify_rate``: ``(per second, burst)`` notifications per task beyond its state changes (``push._rate``);
    ``(0, 0)`` turns the bound off. ``sweep_every``: seconds between sweeps of a durable outbox (owed markers a
    failed hook left; scaled out, a dead replica's streams too); default a third of the lease when the outbox is
    shared by replicas, else 10 s.

    >>> # sender = PushSender(push_store, MemoryPushOutbox()); sender.bind(engine)  # armed when a config may exist
    """

    def __init__(
        self,
        configs: PushConfigStore,
        outbox: PushOutbox,
        *,
        policy: DeliveryPolicy | None = None,
        events: PushEvents = "all",
        allow: tuple[str, ...] = (),
        guard: WebhookGuard | None = None,
        signer: PushSigner | None = None,
        http: httpx.AsyncClient | None = None,
        worker: str | None = None,
        flush_timeout: float = 5.0,
        notify_rate: tuple[float, int] = (100.0, 1000),
        sweep_every: float | None = None,
    ) -> None:
        if events not in ("all", "state"):
            raise ValueError(f"push_events must be 'all' or 'state' (got {events!r})")
        self.configs = configs if isinstance(configs, ConfigCache) else ConfigCache(configs)
        self.configs.on_delete = self._discard
        self.configs.on_put = self._registered
        self._engine: TaskEngine | None = None
        self.outbox = outbox
        self.policy = policy or DeliveryPolicy()
        self.events: PushEvents = events
        self.guard = guard or WebhookGuard(allow)
        self.signer = signer
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.flush_timeout = flush_timeout
        if sweep_every is not None and not sweep_every > 0:
            raise ValueError(f"sweep_every must be a positive number of seconds, not {sweep_every!r}")
        self.sweep_every = sweep_every
        self.started = False
        self._http = http
        self._own_http = http is None
        self._writer: OutboxWriter | None = None
        self._streams = {}
        self._last_state: collections.OrderedDict[str, TaskState] = collections.OrderedDict()
        # Notifications per task beyond state changes: rate per second, burst deep (push amplification bound).
        self.gate = NotificationGate(*notify_rate)
        # Configs whose receiver keeps failing: suspended (push._suspend).
        self.suspensions = Suspensions(self.policy.suspend_after, self.policy.suspend_seconds)
        self._slots = DeliverySlots(self.policy)
        self._lease_left = getattr(outbox, "lease_left", None)
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()  # set while no stream has anything queued
        self._idle.set()
        self._runner_ids = itertools.count(1)
        # Observability (relaykit.telemetry.Telemetry) or None: a span and traceparent per attempt, outcome counts.
        self.telemetry: Any = None
        self._sweeper: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the outbox and resume its pending notifications."""
        if self.started:
            return
        await self.outbox.start()
        self._stopping = asyncio.Event()
        self._slots = DeliverySlots(self.policy)
        self._idle = asyncio.Event()
        self._idle.set()
        if self._own_http:
            self._http = webhook_client(self.guard, self.policy)
        quiet_webhook_logs()
        self._writer = OutboxWriter(self.outbox, self._dispatch)
        self._writer.start()
        self.started = True
        any_configs = getattr(self.configs.store, "any_configs", None)
        if any_configs is None or getattr(self._engine, "cluster", None) is not None or await any_configs():
            # Replicas: a config may be stored through any of them, for a task any worker runs.
            self.arm()
        pending = await self.outbox.pending()
        if pending:
            log.info("resuming delivery of %d pending push notification(s)", len(pending))
            self._dispatch(pending)
        # States a dead process stored without getting their notifications into the outbox (``_owed``). Alone on the
        # store, every marker is that process's; replicas leave the markers of live ones (younger than the lease)
        # to them, and the sweep takes the rest over.
        clustered = getattr(self._engine, "cluster", None) is not None
        await recover_owed(
            self.outbox,
            self.configs,
            self._writer,
            self.suspensions,
            age=float(getattr(self.outbox, "lease_ttl", 30.0)) if clustered else 0.0,
            flush_timeout=self.flush_timeout,
            rounds=100,
        )
        if getattr(self.outbox, "owed", None) is not None or getattr(self.outbox, "orphaned", None) is not None:
            self._sweeper = asyncio.create_task(self._sweep_loop(), name="relaykit-push-sweep")

    async def stop(self, drain: float = 1.0) -> None:
        """Commit what is buffered, let deliveries due now run for up to ``drain`` seconds, stop the rest.

        Anything not delivered stays in the outbox: a durable one delivers it after the next start.
        """
        if not self.started:
            return
        writer = self._writer
        assert writer is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(writer.flush(), self.flush_timeout)
        self._stopping.set()
        if self._sweeper is not None:
            sweeper, self._sweeper = self._sweeper, None
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
        runners = [s.runner for s in self._streams.values() if s.runner is not None]
        if runners:
            _done, late = await asyncio.wait(runners, timeout=drain)
            for runner in late:
                runner.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await writer.stop(self.flush_timeout)
        self._writer = None
        self._streams.clear()
        if self._own_http and self._http is not None:
            await self._http.aclose()
            self._http = None
        await self.outbox.close()
        self.started = False

    # --- the engine hook -------------------------------------------------------------------------------------

    def bind(self, engine: TaskEngine) -> None:
        """Serve ``engine``: its events are pushed once a push config may exist (see ``arm``)."""
        self._engine = engine

    def arm(self) -> None:
        """Install ``on_event`` as the engine's hook (idempotent).

        Until then the engine runs without a hook: with one, it encodes every event for it, which a server whose
        tasks have no push configs should not pay. Armed at start when the config store holds configs, when a
        config is stored, and when a request carrying an inline config passes ``check_config`` (before its task
        exists, so the hook sees the task's first event). Once armed, it stays armed.
        """
        if self._engine is not None and self._engine.on_event is None:
            self._engine.on_create = self.on_create
            self._engine.on_event = self.on_event
            if self.outbox.durable:
                self._engine.owes_push = self.owes

    def _registered(self, key: StreamKey) -> None:
        """A config was stored (created, or registered again): push is armed, and a suspended config resumes."""
        self.arm()
        if self.suspensions:
            self.suspensions.resume(key)

    async def check_config(self, url: str, field: str) -> None:
        """The request handler's webhook URL check: the SSRF guard, then ``arm``."""
        await self.guard.check_config(url, field)
        self.arm()

    def on_create(self, active: ActiveTask) -> None:
        """An execution creates ``active``'s task: it has no configs but those put from now on (an inline one), so
        the hook need not read the store for it. Told at creation, whether or not the task's first snapshot is
        published (nobody may see it), and before a config can be put for the task."""
        self.configs.seed((active.tenant, active.owner, active.task_id))

    def owes(self, active: ActiveTask) -> bool:
        """The engine asks before it stores a state of ``active``'s task: whether the state's notification is owed,
        i.e. the task may have push configs (``_owed``). From memory alone: a message bringing a config not bound yet,
        or configs cached for the task, or none cached (then it may have some: the marker costs a column and its
        clearing, a lost notification would cost the webhook its task). A new task without an inline config is
        cached empty (``on_create``): False."""
        pending = active.current
        if pending is not None and not pending.push_bound:
            configuration = pending.configuration
            if configuration is not None and configuration.task_push_notification_config is not None:
                return True
        return self.configs.may_have((active.tenant, active.owner, active.task_id))

    def _settle(self, writer: OutboxWriter, active: ActiveTask, owed: int) -> None:
        """The notifications of the state stored with marker ``owed`` are added (or rightly none): the marker goes
        with their commit."""
        writer.settle((active.tenant, active.owner, active.task_id, owed))
        record = active.record
        if record is not None and record.push_owed == owed:
            record.push_owed = 0  # the task's next writes leave the stored marker to that commit

    async def on_event(self, active: ActiveTask, seq: int, event: Any, data: bytes) -> None:
        """Queue ``event`` (its StreamResponse JSON is ``data``) for every push config of its task."""
        writer = self._writer
        if writer is None or isinstance(event, Message):
            return
        task_id = active.task_id
        key: TaskKey = (active.tenant, active.owner, task_id)
        record = active.record
        pending = active.current
        inline = pending.configuration.task_push_notification_config if pending and pending.configuration else None
        if inline is not None and pending is not None and not pending.push_bound:
            pending.push_bound = True
            # Bound when the task first shows up, so the config sees the task's very first event. The request
            # handler sees task_id set and does not bind it again.
            inline.task_id = task_id
            inline.tenant = active.tenant
            if not inline.id:
                # A 0.3 client names a task's config by the task id (what 0.3 servers assigned). A queued message
                # keeps its config's 0.3 mark (server._front.encode_request), so a worker binds what the handler does.
                old_client = bool(inline.protocol_version)
                inline.id = inline_config_id("", task_id, pending.message.message_id, legacy=old_client)
            await self.configs.put(inline.model_copy(), owner=active.owner)
        state = _state_of(event)
        # The marker this state was stored with (``_owed``); only a state's own hook settles it, never a chunk's.
        owed = record.push_owed if record is not None and state is not None else 0
        if self.events == "state" and not self._state_changed(task_id, state):
            if owed:
                self._settle(writer, active, owed)  # the state was notified already
            return
        if state in _TERMINAL:
            self._last_state.pop(task_id, None)
        configs = await self.configs.for_task(key)
        if not configs:
            if owed:
                self._settle(writer, active, owed)
            return
        snapshot: bytes | None = None
        if self.events == "all":
            admitted = self.gate.admit(task_id, state)
            if admitted == DROP:
                if owed:
                    self._settle(writer, active, owed)  # coalesced: the task's next notification shows it
                return  # over the task's notification budget: coalesced into its next one (push._rate)
            if admitted == SNAPSHOT and record is not None and not isinstance(event, Task):
                # An event was dropped since the last notification: a delta now would leave the receiver a gap (an
                # ``append`` artifact missing its dropped chunks), so this one carries the task as it stands.
                snapshot = stream_json(record.task)
        now = time.time()
        legacy: bytes | None = None
        trace = traceparent = None
        if self.telemetry is not None:
            trace = self.telemetry.capture()
            traceparent = self.telemetry.traceparent(trace)
        suspensions = self.suspensions
        for config in configs:
            if suspensions and suspensions.suspended((active.tenant, active.owner, task_id, config.id)):
                if self.telemetry is not None:
                    self.telemetry.push_outcome("suspended")
                continue  # its receiver keeps failing: not attempted, not stored (push._suspend)
            body = data if snapshot is None else snapshot
            if config.protocol_version:
                # A webhook registered over A2A 0.3 gets what 0.3 sends: the task as it stands, in the 0.3 shape.
                if legacy is None and record is not None:
                    legacy = push_body(record.task)
                body = legacy if legacy is not None else body
            writer.add(
                OutboxEntry(
                    event_id=uuid.uuid4().hex,
                    task_id=task_id,
                    config_id=config.id,
                    seq=seq,
                    body=body,
                    tenant=active.tenant,
                    owner=active.owner,
                    created_at=now,
                    trace=trace,
                    traceparent=traceparent or "",
                )
            )
        if owed:
            self._settle(writer, active, owed)  # after the adds, into their batch: one commit holds both
        if state is not None and self.outbox.durable:
            try:
                await asyncio.wait_for(asyncio.shield(writer.flush()), self.flush_timeout)
            except TimeoutError:
                log.warning("task %s: push outbox commit is slow; notification still queued", task_id)

    def _state_changed(self, task_id: str, state: TaskState | None) -> bool:
        if state is None:
            return False
        if self._last_state.get(task_id) is state:
            return False
        self._last_state[task_id] = state
        self._last_state.move_to_end(task_id)
        while len(self._last_state) > 65536:
            self._last_state.popitem(last=False)
        return True

    # --- reading -------------------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Wait until every notification queued so far (and every delivery result) is committed."""
        if self._writer is not None:
            await self._writer.flush()

    async def drained(self) -> None:
        """Wait until every notification queued so far is delivered or dead, and the results are committed.

        Streams waiting to retry count as not drained: bound the wait (``asyncio.wait_for``).
        """
        await self.flush()
        await self._idle.wait()
        await self.flush()

    async def health(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[DeliveryHealth]:
        """Delivery health per push config of a task: its current configs first, then configs since deleted."""
        await self.flush()
        rows = {h.config_id: h for h in await self.outbox.health(task_id, tenant=tenant, owner=owner)}
        configs = await self.configs.list(task_id, tenant=tenant, owner=owner)
        out: list[DeliveryHealth] = []
        for config in configs:
            row = rows.pop(config.id, None) or DeliveryHealth(task_id, config.id, tenant, owner)
            row.url = config.url
            row.suspended = self.suspensions.suspended((tenant, owner, task_id, config.id))
            out.append(row)
        out.extend(rows.values())
        return out

    async def dead_letters(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[OutboxEntry]:
        """The task's dead letters (notifications given up on), oldest first."""
        await self.flush()
        return await self.outbox.dead_letters(task_id, tenant=tenant, owner=owner)
