"""The PostgreSQL push outbox: ``<namespace>_push_outbox``, ``_push_health`` and ``_push_leases`` (schema 3).

What it adds to the ``PushOutbox`` rules in ``_base`` (mirroring ``sqlite.SQLitePushOutbox``):

* **Shared pool, durable commits.** ``PostgresPushOutbox(task_store)`` shares the task store's pool (like
  ``PostgresPushConfigStore``); ``durable`` is true: a committed notification survives any replica, and
  ``pending()`` on start resumes it.
* **Cross-replica stream leases** (``claim`` / ``release`` / ``renew``): ``_leases``, this class's base.
* **One batch, one transaction.** ``commit`` applies ``OutboxChanges`` in the documented order (discards, adds,
  deliveries, retries, dead letters, health outcomes) in one transaction, one set-based statement per kind
  (``unnest`` of arrays), so a batch of hundreds of entries costs a handful of round trips. Health outcomes are
  folded per stream in Python first (an upsert may touch a row once per statement); the result is exactly what
  applying them one by one gives. Every array is sorted by key (concurrent commits of replicas then mostly lock
  rows in one order), and a commit that still deadlocks with another is retried.
* **Leases go with their holder's results.** ``OutboxChanges.released`` deletes the leases in the same transaction,
  last: another replica can claim a stream only once its holder's deliveries are committed, so it never sends again
  what was delivered. The leases leave this object's keeper only once that commit succeeded (until then they are
  renewed: the results may take a retry to commit).
* **Owed markers** (``relaykit.push._owed``): the commit that holds a task state's notifications clears the task's
  ``push_owed`` marker (``OutboxChanges.settled``) in its transaction, last (the task rows are locked the shortest
  time; a deadlock with a task write is retried like any other); ``owed(age)`` reads the markers older than ``age``
  seconds by the database clock, for the sweep that takes over those a dead replica left. A marked task whose body
  cannot be read (``_base.readable_task``) is left out and its marker cleared, so one bad row never holds up the
  others, sweep after sweep.
* Text columns cannot hold NUL: entries whose stream key contains one are dropped (no such task or config can
  exist in the PostgreSQL store), and NULs in error texts and URLs are replaced, so one bad string can never
  make every later commit fail.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import asyncpg

from relaykit.backends._base import (
    DeliveryHealth,
    DeliveryOutcome,
    OutboxChanges,
    OutboxEntry,
    StreamKey,
    TaskRecord,
    from_epoch,
    readable_task,
    unreadable_rows,
)
from relaykit.backends._handle import AttachedStore
from relaykit.backends.postgres._db import CONNECT_TIMEOUT, Database, columns, has_nul, shared_database
from relaykit.backends.postgres._leases import LEASE_TTL, StreamLeases

if TYPE_CHECKING:
    from relaykit.backends.postgres._tasks import PostgresTaskStore

__all__ = ["LEASE_TTL", "PostgresPushOutbox"]

log = logging.getLogger("relaykit.push")

_DEADLOCK_RETRIES = 3

_COLUMNS = (
    "event_id, tenant, owner, task_id, config_id, seq, body, created_at, attempts, next_attempt_at, last_error, "
    "dead_at, trace"
)


def _text(value: str) -> str:
    # PostgreSQL text holds neither NUL nor lone surrogates (from undecodable bytes): replace them.
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode()
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode()
    return value


def _fold(outcomes: list[DeliveryOutcome]) -> list[tuple[Any, ...]]:
    """Outcomes folded into one health delta per stream, in key order (rows for the health upsert).

    ``consecutive``: failures after the batch's last success when it has one (the stored count is then replaced),
    otherwise the batch's failures (added to the stored count). ``url``: the last non-empty one.
    """
    folded: dict[StreamKey, list[Any]] = {}
    for o in outcomes:
        # url, delivered, failures, consecutive, last_success, last_failure, last_error
        row = folded.setdefault(o.stream, ["", 0, 0, 0, None, None, ""])
        if o.url:
            row[0] = _text(o.url)
        if o.ok:
            row[1] += 1
            row[3] = 0
            row[4] = o.at
        else:
            row[2] += 1
            row[3] += 1
            row[5] = o.at
            row[6] = _text(o.error)
    return [(*stream, *row) for stream, row in sorted(folded.items()) if not has_nul(*stream)]


class PostgresPushOutbox(StreamLeases, AttachedStore[Database]):
    """The push outbox in PostgreSQL, shared by every replica of a namespace (see the module docstring).

    Pass the ``PostgresTaskStore`` to share its pool (the normal case); given a URL it opens its own pool.
    ``lease_ttl``: seconds a stream lease lasts unless renewed; ``renew_every``: seconds between renewals of the
    leases this object holds (default ``lease_ttl / 3``; 0 turns renewal off).
    """

    durable = True

    def __init__(
        self,
        tasks_or_dsn: PostgresTaskStore | str,
        *,
        namespace: str = "relaykit",
        pool: Any = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = CONNECT_TIMEOUT,
        lease_ttl: float = LEASE_TTL,
        renew_every: float | None = None,
    ) -> None:
        self._db = shared_database(
            tasks_or_dsn, namespace, pool=pool, min_size=min_size, max_size=max_size, connect_timeout=connect_timeout
        )
        self._started = False
        self._init_leases(lease_ttl, renew_every)
        ns = self._db.namespace
        o, h, lease = f"{ns}_push_outbox", f"{ns}_push_health", f"{ns}_push_leases"
        key = "tenant, owner, task_id, config_id"
        self._sql_purge_dead = f"DELETE FROM {o} WHERE dead_at IS NOT NULL AND dead_at < $1"
        self._sql_purge_health = (
            f"DELETE FROM {h} AS h WHERE GREATEST(COALESCE(h.last_success, 0), COALESCE(h.last_failure, 0)) < $1 "
            f"AND NOT EXISTS (SELECT 1 FROM {o} AS o WHERE o.tenant = h.tenant AND o.owner = h.owner "
            "AND o.task_id = h.task_id AND o.config_id = h.config_id)"
        )
        self._sql_discard = (
            f"DELETE FROM {o} AS o USING unnest($1::text[], $2::text[], $3::text[], $4::text[]) "
            "AS u(tenant, owner, task_id, config_id) WHERE o.tenant = u.tenant AND o.owner = u.owner "
            "AND o.task_id = u.task_id AND o.config_id = u.config_id AND o.dead_at IS NULL"
        )
        self._sql_add = (
            f"INSERT INTO {o} (event_id, {key}, seq, body, created_at, attempts, next_attempt_at, last_error, trace) "
            "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], "
            "$7::bytea[], $8::float8[], $9::int[], $10::float8[], $11::text[], $12::text[]) "
            "ON CONFLICT (event_id) DO NOTHING"
        )
        self._sql_delivered = f"DELETE FROM {o} WHERE event_id = ANY($1::text[]) AND dead_at IS NULL"
        self._sql_retried = (
            f"UPDATE {o} AS o SET attempts = u.attempts, next_attempt_at = u.next_attempt_at, "
            "last_error = u.last_error FROM unnest($1::text[], $2::int[], $3::float8[], $4::text[]) "
            "AS u(event_id, attempts, next_attempt_at, last_error) WHERE o.event_id = u.event_id AND o.dead_at IS NULL"
        )
        self._sql_dead = (
            f"UPDATE {o} AS o SET attempts = u.attempts, last_error = u.last_error, dead_at = u.dead_at "
            "FROM unnest($1::text[], $2::int[], $3::text[], $4::float8[]) "
            "AS u(event_id, attempts, last_error, dead_at) WHERE o.event_id = u.event_id"
        )
        # A delta per stream (see _fold): a batch with a success replaces the consecutive-failure count.
        self._sql_health = (
            f"INSERT INTO {h} AS h ({key}, url, delivered, failures, consecutive, last_success, last_failure, "
            "last_error) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], "
            "$6::bigint[], $7::bigint[], $8::bigint[], $9::float8[], $10::float8[], $11::text[]) "
            f"ON CONFLICT ({key}) DO UPDATE SET "
            "url = CASE WHEN excluded.url = '' THEN h.url ELSE excluded.url END, "
            "delivered = h.delivered + excluded.delivered, failures = h.failures + excluded.failures, "
            "consecutive = CASE WHEN excluded.last_success IS NULL THEN h.consecutive + excluded.consecutive "
            "ELSE excluded.consecutive END, "
            "last_success = COALESCE(excluded.last_success, h.last_success), "
            "last_failure = COALESCE(excluded.last_failure, h.last_failure), "
            "last_error = CASE WHEN excluded.last_failure IS NULL THEN h.last_error ELSE excluded.last_error END"
        )
        self._sql_pending = (
            f"SELECT {_COLUMNS} FROM {o} WHERE dead_at IS NULL "
            "ORDER BY tenant, owner, task_id, config_id, seq, event_id"
        )
        # Pending entries of streams no live lease covers (their sender died), older than $1: for the sweep.
        self._sql_orphaned = (
            f"SELECT {_COLUMNS} FROM {o} AS o WHERE o.dead_at IS NULL AND o.created_at < $1 AND NOT EXISTS "
            f"(SELECT 1 FROM {lease} AS l WHERE l.tenant = o.tenant AND l.owner = o.owner AND l.task_id = o.task_id "
            "AND l.config_id = o.config_id AND l.expires_at > now()) "
            "ORDER BY o.tenant, o.owner, o.task_id, o.config_id, o.seq, o.event_id LIMIT $2"
        )
        self._sql_still_pending = (
            f"SELECT event_id FROM {o} WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND config_id = $4 "
            "AND dead_at IS NULL"
        )
        self._sql_dead_letters = (
            f"SELECT {_COLUMNS} FROM {o} WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND dead_at IS NOT NULL "
            "ORDER BY dead_at, seq, event_id"
        )
        t = f"{ns}_tasks"
        # Only while the marker names this state or an older one: a newer state's marker stays owed. The version is
        # left alone: the task's writer goes on with the version it holds.
        self._sql_settle = (
            f"UPDATE {t} AS t SET push_owed = NULL, push_owed_at = NULL "
            "FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS u(id, tenant, owner, seq) "
            "WHERE t.id = u.id AND t.tenant = u.tenant AND t.owner = u.owner AND t.push_owed <= u.seq"
        )
        # On the partial index of the marked rows.
        self._sql_owed = (
            f"SELECT id, tenant, owner, body, version, event_seq, push_owed FROM {t} WHERE push_owed IS NOT NULL "
            "AND push_owed_at <= now() - make_interval(secs => $1) ORDER BY push_owed_at LIMIT $2"
        )
        # One statement, one snapshot: the pending / dead counts next to the health row of every config.
        self._sql_health_of = (
            "SELECT COALESCE(c.config_id, r.config_id), COALESCE(c.pending, 0), COALESCE(c.dead, 0), r.url, "
            "r.delivered, r.failures, r.consecutive, r.last_success, r.last_failure, r.last_error "
            "FROM (SELECT config_id, count(*) FILTER (WHERE dead_at IS NULL) AS pending, "
            f"count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead FROM {o} "
            "WHERE tenant = $1 AND owner = $2 AND task_id = $3 GROUP BY config_id) AS c "
            f"FULL JOIN (SELECT * FROM {h} WHERE tenant = $1 AND owner = $2 AND task_id = $3) AS r "
            "ON r.config_id = c.config_id ORDER BY 1"
        )

    @property
    def namespace(self) -> str:
        """The table prefix (lower case)."""
        return self._db.namespace

    # --- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        await super().start()
        if self._db.guard == "exclusive":
            # Alone on the namespace: every lease is a dead predecessor's (``_leases``).
            await self._drop_dead_leases()
        self._start_keeper()

    async def close(self) -> None:
        await self._stop_leases()
        await super().close()

    # --- the outbox ----------------------------------------------------------------------------------------

    async def commit(self, changes: OutboxChanges) -> None:
        # Rows are built now, at call time: the caller keeps mutating its entries while the write waits its turn.
        discarded = sorted({s for s in changes.discarded if not has_nul(*s)})
        added: list[tuple[Any, ...]] = []
        for e in changes.added:
            if has_nul(e.event_id, *e.stream):
                log.warning("push outbox: dropped notification %r: NUL in its ids", e.event_id)
                continue
            added.append(
                (
                    e.event_id,
                    e.tenant,
                    e.owner,
                    e.task_id,
                    e.config_id,
                    e.seq,
                    e.body,
                    e.created_at,
                    e.attempts,
                    e.next_attempt_at,
                    _text(e.last_error),
                    _text(e.traceparent) or None,
                )
            )
        delivered = sorted({e.event_id for e in changes.delivered if not has_nul(e.event_id)})
        # Keyed by event id, last change wins (an UPDATE … FROM would apply an arbitrary one of duplicates).
        retried = {
            e.event_id: (e.event_id, e.attempts, e.next_attempt_at, _text(e.last_error))
            for e in changes.retried
            if not has_nul(e.event_id)
        }
        now = time.time()
        dead = {
            e.event_id: (e.event_id, e.attempts, _text(e.last_error), e.dead_at if e.dead_at is not None else now)
            for e in changes.dead
            if not has_nul(e.event_id)
        }
        health = _fold(changes.outcomes)
        # Keyed by task, its newest seq (a settled seq clears every older marker too); sorted, like every array here.
        newest: dict[tuple[str, str, str], int] = {}
        for tenant, owner, task_id, seq in changes.settled:
            if not has_nul(tenant, owner, task_id):
                key = (task_id, tenant, owner)
                newest[key] = max(seq, newest.get(key, seq))
        settled = [(*key, seq) for key, seq in sorted(newest.items())]
        released = sorted({(*stream, worker) for stream, worker in changes.released if not has_nul(worker, *stream)})
        if not (discarded or added or delivered or retried or dead or health or settled or released):
            return
        discard_args = columns(discarded, 4)
        add_args = columns(added, 12)
        retry_args = columns([retried[k] for k in sorted(retried)], 4)
        dead_args = columns([dead[k] for k in sorted(dead)], 4)
        health_args = columns(health, 11)
        settle_args = columns(settled, 4)
        release_args = columns(released, 5)

        async def job(conn: Any) -> None:
            async with conn.transaction():
                if discarded:
                    await conn.execute(self._sql_discard, *discard_args)
                if added:
                    await conn.execute(self._sql_add, *add_args)
                if delivered:
                    await conn.execute(self._sql_delivered, delivered)
                if retried:
                    await conn.execute(self._sql_retried, *retry_args)
                if dead:
                    await conn.execute(self._sql_dead, *dead_args)
                if health:
                    await conn.execute(self._sql_health, *health_args)
                if settled:
                    await conn.execute(self._sql_settle, *settle_args)
                if released:
                    # After the results they follow: the stream is claimable once they are committed, not before.
                    await conn.execute(self._sql_release_all, *release_args)

        for attempt in range(_DEADLOCK_RETRIES):
            try:
                await self._db.run(job)
                if released:
                    self._forget(released)
                return
            except (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError):
                # Another replica's commit locked the same rows in another order: the transaction was rolled back.
                if attempt == _DEADLOCK_RETRIES - 1:
                    raise

    @staticmethod
    def _entry(row: Any) -> OutboxEntry:
        return OutboxEntry(
            event_id=str(row[0]),
            tenant=str(row[1]),
            owner=str(row[2]),
            task_id=str(row[3]),
            config_id=str(row[4]),
            seq=int(row[5]),
            body=bytes(row[6]),
            created_at=float(row[7]),
            attempts=int(row[8]),
            next_attempt_at=float(row[9]),
            last_error=str(row[10]),
            dead_at=float(row[11]) if row[11] is not None else None,
            traceparent=str(row[12] or ""),
        )

    async def pending(self) -> list[OutboxEntry]:
        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_pending))

        return [self._entry(row) for row in await self._db.run(job)]

    async def orphaned(self, before: float, limit: int = 1000) -> list[OutboxEntry]:
        """Pending entries created before ``before`` (epoch seconds) whose stream no live lease covers: the sender
        that committed them died (its leases expired, or it never claimed them). ``PushSender``'s sweep takes them
        over, so a crashed replica's notifications go out within the lease time, not at the next replica start."""

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_orphaned, before, limit))

        return [self._entry(row) for row in await self._db.run(job)]

    async def owed(self, age: float = 0.0, limit: int = 1000) -> list[TaskRecord]:
        """The tasks, as stored, whose latest state's push notification is owed (``TaskRecord.push_owed`` set) for at
        least ``age`` seconds (the database clock), oldest first, at most ``limit``. A task whose body cannot be read
        is left out (logged by id) and its marker cleared: no snapshot of it can be made, and it must not come back
        in every later sweep."""

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_owed, float(age), limit))

        out = []
        unreadable: list[tuple[str, str, str, int]] = []
        for task_id, tenant, owner, body, version, event_seq, owed in await self._db.run(job):
            body = bytes(body)
            task = readable_task(body)
            if task is None:
                unreadable.append((str(task_id), str(tenant), str(owner), int(owed)))
                continue
            record = TaskRecord(task, str(tenant), str(owner), int(version), int(event_seq), body)
            record.push_owed = int(owed)
            out.append(record)
        if unreadable:
            unreadable.sort()  # rows locked in key order, as every commit does
            cleared = columns(unreadable, 4)

            async def clear(conn: Any) -> None:
                # As a commit settles a marker: only while it still names that state (a newer one stays owed).
                await conn.execute(self._sql_settle, *cleared)

            await self._db.run(clear)
            unreadable_rows(
                "owed push notifications", [key[0] for key in unreadable], "; their owed markers are cleared"
            )
        return out

    async def still_pending(self, stream: StreamKey) -> set[str]:
        """Event ids of the stream's entries not yet delivered (nor dead): what a sender that has just claimed the
        stream should still deliver of what it holds (another replica may have delivered some since it read them).
        """

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_still_pending, *stream))

        return {str(row[0]) for row in await self._db.run(job)}

    async def health(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[DeliveryHealth]:
        if has_nul(task_id, tenant, owner):
            return []

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_health_of, tenant, owner, task_id))

        out = []
        for row in await self._db.run(job):
            health = DeliveryHealth(
                task_id=task_id,
                config_id=str(row[0]),
                tenant=tenant,
                owner=owner,
                pending=int(row[1]),
                dead=int(row[2]),
            )
            if row[3] is not None:
                health.url = str(row[3])
                health.delivered = int(row[4])
                health.failures = int(row[5])
                health.consecutive_failures = int(row[6])
                health.last_success = from_epoch(row[7])
                health.last_failure = from_epoch(row[8])
                health.last_error = str(row[9])
            out.append(health)
        return out

    async def purge(self, before: float) -> tuple[int, int]:
        async def job(conn: Any) -> tuple[int, int]:
            async with conn.transaction():
                dead = await conn.execute(self._sql_purge_dead, before)
                health = await conn.execute(self._sql_purge_health, before)
            # asyncpg answers with the command tag ("DELETE n").
            return int(dead.split()[-1]), int(health.split()[-1])

        return await self._db.run(job)

    async def dead_letters(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[OutboxEntry]:
        if has_nul(task_id, tenant, owner):
            return []

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_dead_letters, tenant, owner, task_id))

        return [self._entry(row) for row in await self._db.run(job)]
