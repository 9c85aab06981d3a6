"""Delivering the outbox: one runner per stream (task, config) sends its queue in ``seq`` order.

``StreamDelivery`` is the half of ``PushSender`` (``_sender``) that empties the outbox; the other half, the engine
hook, fills it. Rules every line below keeps:

* one runner per stream, and a store lease (``PushOutbox.claim``) per runner, so two deliveries of the same
  (task, config) never overlap, on one replica or across replicas; a lease other replicas see is given back in the
  commit of its runner's last results (``OutboxWriter.release``), so the next holder never redelivers what the last
  one delivered;
* with leases that can be lost (an outbox shared by replicas has ``lease_left``), a runner attempts only while its
  lease is surely valid, and an attempt in flight is cut when that validity runs out; once the lease is lost
  (taken over) or ran out unrenewed, the runner stops and forgets its queue without writing anything: the entries
  stay in the outbox for the lease's next holder (the sweep of any replica, this one included, takes them up once
  no live lease covers them);
* an attempt holds a slot of its host, of its address, of its owner and of the total (``_slots``): a receiver that
  never answers holds only its share. The address is the first the webhook's host resolves to, looked up
  (``_resolver``: bounded, per owner too, kept 30 s) and checked by the SSRF guard before the slots are taken; the
  attempt's connect then goes to those checked addresses without looking the host up again (``connecting_to``), so
  it reaches the address its slot counts, and cannot meet a lookup that finds no place. A lookup that cannot start
  (this process's or this owner's delivery lookups are all in progress) puts the entry off like a retry, without
  counting an attempt (it is not the receiver's failure), and one that fails or is refused is a failed attempt;
* an entry leaves its queue only as delivered, dead (``max_attempts``, ``max_age``, or its config suspended) or
  discarded (its config deleted); a retry waits ``DeliveryPolicy.delay`` (honouring ``Retry-After``);
* every result goes through the write-behind batch (``OutboxWriter``), never straight to the store;
* a sweep (``_sweep_loop``) turns the owed markers a failed hook left (``_owed``: states stored whose notifications
  never reached the outbox) into notifications while the process runs; with an outbox shared by replicas it runs
  every third of the lease and also takes over the streams of a replica that died, and the markers it left.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import httpcore
import httpx

from relaykit._principal import ANONYMOUS
from relaykit._types import TaskPushNotificationConfig
from relaykit.backends._base import DeliveryOutcome, OutboxEntry, PushOutbox, StreamKey
from relaykit.push._config_cache import ConfigCache
from relaykit.push._outbox import OutboxWriter
from relaykit.push._owed import recover_owed
from relaykit.push._policy import DeliveryPolicy
from relaykit.push._resolver import LookupBusyError
from relaykit.push._signing import PushSigner
from relaykit.push._slots import DeliverySlots, destination
from relaykit.push._ssrf import WebhookGuard, WebhookRefusedError, connecting_to, done_connecting
from relaykit.push._suspend import Suspensions
from relaykit.push._webhook import post_webhook, webhook_headers

__all__ = ["StreamDelivery"]

log = logging.getLogger("relaykit.push")

SWEEP_EVERY = 10.0  # seconds between sweeps of an outbox this process serves alone (SQLite): owed markers only


class _Stream:
    __slots__ = ("destination", "holder", "host", "key", "port", "queue", "runner", "url")

    def __init__(self, key: StreamKey) -> None:
        self.key = key
        self.queue: collections.deque[OutboxEntry] = collections.deque()
        self.runner: asyncio.Task[None] | None = None
        self.holder = ""  # the runner's lease holder id
        # The config's URL at the last attempt, its ``host:port`` (its host's slot key), and the host and port it
        # connects to, the host as httpx hands it to the connect (port 0: the URL cannot be split or parsed; its
        # attempt fails on its own).
        self.url = ""
        self.destination = ""
        self.host = ""
        self.port = 0


class StreamDelivery:
    """The streams of the outbox and their runners; ``PushSender`` sets these attributes up and owns the lifecycle."""

    outbox: PushOutbox
    configs: ConfigCache
    policy: DeliveryPolicy
    guard: WebhookGuard
    signer: PushSigner | None
    suspensions: Suspensions
    worker: str
    telemetry: Any
    flush_timeout: float
    sweep_every: float | None  # seconds between sweeps (``_sweep_loop``); None: the default for the outbox
    _http: httpx.AsyncClient | None
    _own_http: bool  # the sender's own client, which connects through the guard (else the caller's, which does not)
    _writer: OutboxWriter | None
    _streams: dict[StreamKey, _Stream]
    _slots: DeliverySlots
    # ``PushOutbox.lease_left`` of an outbox whose leases can be lost (shared by replicas), else None.
    _lease_left: Callable[[StreamKey, str], float] | None
    _stopping: asyncio.Event
    _idle: asyncio.Event  # set while no stream has anything queued
    _runner_ids: itertools.count[int]

    async def _sweep_loop(self) -> None:
        """Every ``sweep_every`` seconds: the owed markers older than a sweep's age become snapshot notifications
        (``_owed``: states whose notifications never reached the outbox), and, with an outbox shared by replicas, the
        streams of a replica that died are taken over.

        Alone on the store (SQLite) a marker is a failed hook's (the process is alive: a dead one's are recovered on
        start), and one older than a sweep period (10 s by default) is not in flight. Shared by replicas, the sweep
        runs every third of the lease, and a marker must be older than the lease (its writer died, or could not
        commit it in all that time); then the pending entries no live lease covers (older than one sweep period, so
        the entries a live sender has just committed and is about to claim are left to it) join this sender's
        streams; a stream it already runs is left alone. The runner's claim and ``still_pending`` settle any race.
        Nothing to do costs one indexed query per kind.
        """
        orphaned = getattr(self.outbox, "orphaned", None)
        if orphaned is not None:
            lease = float(getattr(self.outbox, "lease_ttl", 30.0))
            period = self.sweep_every or max(0.2, lease / 3)
            # A live writer commits a marker's notifications within milliseconds, or its flush timeout at worst.
            age = lease
        else:
            period = age = self.sweep_every or SWEEP_EVERY
        while not await self._stop_within(period):
            writer = self._writer
            if writer is not None:
                try:
                    await recover_owed(
                        self.outbox, self.configs, writer, self.suspensions, age=age, flush_timeout=self.flush_timeout
                    )
                except Exception as exc:
                    log.warning("push outbox sweep (owed notifications) failed: %s", exc)
            if orphaned is None:
                continue
            try:
                entries = await orphaned(time.time() - period)
            except Exception as exc:
                log.warning("push outbox sweep failed: %s", exc)
                continue
            taken = [e for e in entries if e.stream not in self._streams]
            if taken:
                log.warning(
                    "taking over %d push notification(s) of %d stream(s) left by a lost replica",
                    len(taken),
                    len({e.stream for e in taken}),
                )
                self._dispatch(taken)

    def _dispatch(self, entries: list[OutboxEntry]) -> None:
        for entry in entries:
            stream = self._streams.get(entry.stream)
            if stream is None:
                stream = self._streams[entry.stream] = _Stream(entry.stream)
            stream.queue.append(entry)
            self._idle.clear()
            if stream.runner is None and not self._stopping.is_set():
                stream.runner = asyncio.create_task(self._run(stream), name=f"relaykit-push-{entry.task_id}")

    def _discard(self, key: StreamKey) -> None:
        stream = self._streams.pop(key, None)
        if stream is not None:
            stream.queue.clear()
        if not self._streams:
            self._idle.set()
        if self._writer is not None:
            self._writer.discard(key)

    async def _stop_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _run(self, stream: _Stream) -> None:
        key = stream.key
        # One lease holder per stream: this runner (a stream dropped and re-created while its old runner still has
        # a request in flight gets a new runner, which waits for the old one's lease).
        holder = stream.holder = f"{self.worker}#{next(self._runner_ids)}"
        claimed = False
        try:
            while not await self.outbox.claim(key, holder):
                writer = self._writer
                if writer is not None and writer.releasing(key):
                    # The stream's previous runner here gives its lease back with the commit of its results: wait
                    # for that commit rather than for the next round.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(writer.flush()), self.flush_timeout)
                    if self._stopping.is_set():
                        return
                elif await self._stop_within(0.2):
                    return
            claimed = True
            still_pending = getattr(self.outbox, "still_pending", None)
            if still_pending is not None:
                # An outbox shared by replicas: each read every pending entry at its start, so another replica may
                # have delivered some of ours while it held this stream. Deliver only what is still pending.
                left = await still_pending(key)
                kept = [entry for entry in stream.queue if entry.event_id in left]
                stream.queue.clear()
                stream.queue.extend(kept)
            while stream.queue:
                try:
                    if not await self._step(stream):
                        return
                except Exception:
                    log.exception("task %s: push delivery failed unexpectedly", key[2])
                    if await self._stop_within(1.0):
                        return
        finally:
            stream.runner = None
            if not stream.queue and self._streams.get(key) is stream:
                del self._streams[key]
            if not self._streams:
                self._idle.set()
            if claimed:
                writer = self._writer
                if self._lease_left is not None and writer is not None:
                    # A lease other replicas see goes with the commit of this runner's results, not before it: given
                    # back first, another replica's sweep (or its runner waiting for the stream) could claim the
                    # stream and deliver again what this runner delivered but had not committed yet (``_outbox``).
                    writer.release(key, holder)
                else:
                    with contextlib.suppress(Exception):
                        await self.outbox.release(key, holder)

    async def _step(self, stream: _Stream) -> bool:
        """Deliver (or give up on) the head of the stream once; ``False`` to stop the runner."""
        writer = self._writer
        assert writer is not None
        key = stream.key
        entry = stream.queue[0]
        wait = entry.next_attempt_at - time.time()
        if wait > 0 and await self._stop_within(wait):
            return False
        lease_left = self._lease_left
        if lease_left is not None and lease_left(key, stream.holder) <= 0:
            return self._lease_lost(stream)
        config = await self.configs.get(key[2], key[3], tenant=key[0], owner=key[1])
        if not stream.queue or stream.queue[0] is not entry:
            return True  # discarded meanwhile
        if config is None:
            self._discard(key)  # the config was deleted: its notifications go with it
            return False
        now = time.time()
        if self.policy.max_age and now - entry.created_at >= self.policy.max_age:
            entry.last_error = f"expired: not delivered within {self.policy.max_age:g} s" + (
                f" (last error: {entry.last_error})" if entry.last_error else ""
            )
            entry.dead_at = now
            stream.queue.popleft()
            writer.dead(entry, None)
            return True
        if stream.url != config.url:
            stream.url = config.url
            stream.destination = destination(config.url)
            try:
                _, stream.port = self.guard.split(config.url)
                # The name the connect is asked for (lowercase, IDNA-encoded): the one looked up and checked here.
                stream.host = httpx.URL(config.url).raw_host.decode("ascii")
            except (WebhookRefusedError, httpx.InvalidURL, UnicodeError):
                stream.host, stream.port = "", 0
        try:
            addresses = await self._addresses(stream)
        except LookupBusyError as exc:
            return self._put_off(entry, str(exc))
        except httpcore.ConnectError as exc:
            # Refused by the SSRF guard, or not resolved: the attempt fails as its connect would have.
            if lease_left is not None and lease_left(key, stream.holder) <= 0:
                return self._lease_lost(stream)
            ok, error, retry_after = False, f"ConnectError: {exc}"[:500], None
        else:
            address = f"{addresses[0]}:{stream.port}" if addresses else None  # ``destination(url, address)``
            async with self._slots.hold(stream.destination, address, (key[0], key[1])):
                # The connect goes to the addresses checked above, the first the one ``address`` counts.
                connecting = connecting_to(stream.host, stream.port, addresses) if addresses else None
                try:
                    if lease_left is None:
                        ok, error, retry_after = await self._attempt(entry, config)
                    else:
                        # Checked again: waiting for a slot may have taken long. The attempt may last only as long
                        # as the lease surely does (renewal failing: the database is away), so no request of this
                        # runner is in flight once another replica can take the stream over.
                        left = lease_left(key, stream.holder)
                        if left <= 0:
                            return self._lease_lost(stream)
                        cut = asyncio.timeout(left)
                        try:
                            async with cut:
                                ok, error, retry_after = await self._attempt(entry, config)
                        except TimeoutError:
                            if not cut.expired():
                                raise
                            return self._lease_lost(stream)  # not an attempt the receiver failed: nothing counted
                finally:
                    if connecting is not None:
                        done_connecting(connecting)
        now = time.time()
        entry.attempts += 1
        if not stream.queue or stream.queue[0] is not entry:
            return True
        outcome = DeliveryOutcome(key, ok, now, config.url, error)
        tel = self.telemetry
        if ok:
            stream.queue.popleft()
            writer.delivered(entry, outcome)
            self.suspensions.succeeded(key)
            if tel is not None:
                tel.push_outcome("delivered")
            return True
        entry.last_error = error
        if self.suspensions.failed(key, now, error):
            self._suspend(stream, outcome, now)
            return True
        if entry.attempts >= self.policy.max_attempts:
            entry.dead_at = now
            stream.queue.popleft()
            writer.dead(entry, outcome)
            if tel is not None:
                tel.push_outcome("dead")
            log.warning(
                "task %s: gave up on push notification %s for config %s after %d attempt(s): %s",
                key[2],
                entry.event_id,
                key[3],
                entry.attempts,
                error,
            )
            return True
        entry.next_attempt_at = now + self.policy.delay(entry.attempts, retry_after)
        writer.retried(entry, outcome)
        if tel is not None:
            tel.push_outcome("retried")
        return not self._stopping.is_set()

    async def _addresses(self, stream: _Stream) -> list[str]:
        """The addresses the stream's host resolves to, checked by the SSRF guard (the connection goes to the first
        that answers; the first keys the address's slots: ``_slots``), or none when the sender's client does not
        connect through the guard. The lookup holds a place of the stream's owner, when authenticated
        (``_resolver``: the anonymous owner is every caller of a server without authentication), keyed by the
        principal alone: a tenant is a name the caller picks, so one owner spread over many is still one."""
        if not self._own_http or not stream.port:
            return []
        owner = stream.key[1]
        return await self.guard.connect_addresses(stream.host, stream.port, owner=None if owner == ANONYMOUS else owner)

    def _put_off(self, entry: OutboxEntry, error: str) -> bool:
        """The entry's lookup could not start: this process's delivery lookups, or its owner's, are all in progress
        (``_resolver``).
        Not the receiver's failure, so no attempt is counted (nor a failure toward its suspension): the entry waits
        as a retry would, and goes on until it is delivered or too old (``max_age``)."""
        entry.last_error = error
        entry.next_attempt_at = time.time() + self.policy.delay(entry.attempts + 1)
        return True

    async def _attempt(self, entry: OutboxEntry, config: TaskPushNotificationConfig) -> tuple[bool, str, float | None]:
        try:
            return await self.deliver(entry, config)
        except Exception as exc:
            # Whatever one attempt raises (cancellation aside) is a failed attempt, so the retry limit and the
            # suspension end it: retried as it is, it would fail again every second until max_age. The error
            # is the exception's type alone: a message may quote a header value (a credential).
            error = f"{type(exc).__name__}: the delivery attempt failed"
            log.warning("task %s: push delivery to config %s failed: %s", entry.task_id, entry.config_id, error)
            return False, error, None

    def _lease_lost(self, stream: _Stream) -> bool:
        """The runner's lease was taken over, or ran out without a renewal: another replica may deliver the stream
        now. The runner stops (``False``) and forgets its queue, writing nothing: the entries are no longer its to
        change, and stay in the outbox for the next holder."""
        key = stream.key
        log.info("task %s: push delivery to config %s stopped: its delivery lease was lost", key[2], key[3])
        stream.queue.clear()
        return False

    def _suspend(self, stream: _Stream, outcome: DeliveryOutcome, now: float) -> None:
        """The stream's config was just suspended: what it has queued becomes dead letters, none attempted."""
        writer = self._writer
        assert writer is not None
        reason = self.suspensions.reason(stream.key)
        attempt: DeliveryOutcome | None = outcome  # recorded once, with the entry it was made for
        for entry in stream.queue:
            entry.last_error = reason
            entry.dead_at = now
            writer.dead(entry, attempt)
            attempt = None
            if self.telemetry is not None:
                self.telemetry.push_outcome("suspended")
        stream.queue.clear()

    def headers(self, entry: OutboxEntry, config: TaskPushNotificationConfig) -> dict[str, str]:
        """The headers of one delivery attempt of ``entry`` to ``config``."""
        return webhook_headers(entry, config, self.signer)

    async def deliver(self, entry: OutboxEntry, config: TaskPushNotificationConfig) -> tuple[bool, str, float | None]:
        """One attempt: ``(ok, error, retry_after)``."""
        http = self._http
        assert http is not None
        timeout = self.policy.timeout
        if self.telemetry is not None:
            headers = self.headers(entry, config)
            with self.telemetry.push_attempt(entry, httpx.URL(config.url).host, headers) as span:
                ok, error, retry_after = await post_webhook(http, entry, config, headers, timeout)
                if span is not None and not ok:
                    span.set_attribute("error.type", error.split(":", 1)[0][:80])
            return ok, error, retry_after
        return await post_webhook(http, entry, config, self.headers(entry, config), timeout)
