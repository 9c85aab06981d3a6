"""Cross-replica stream leases of the PostgreSQL push outbox: table ``<namespace>_push_leases`` (schema 3).

A lease makes one sender (of any replica) the only one delivering a stream (task, config). Rules:

* ``claim(stream, worker)`` is one ``INSERT … ON CONFLICT DO UPDATE … WHERE``: it succeeds when the stream has no
  lease, when ``worker`` already holds it (the claim refreshes it), or when the lease expired. Expiry is
  ``now() + lease_ttl`` on the **database clock**, so replicas' clock skew cannot make a live lease look expired.
* ``release`` deletes the lease only when ``worker`` holds it; ``close()`` releases what this object still holds. The
  sender gives a lease back in the outbox commit of its holder's last results instead (``OutboxChanges.released``,
  ``_sql_release_all`` in that transaction); ``_forget`` then stops renewing it.
* While this object holds leases, a keeper task renews them every ``renew_every`` seconds (a third of the ttl by
  default, on the heartbeat connection: never queued behind the pool's work), so a sender may hold a stream through
  long retry waits; a replica that dies stops renewing and its streams are claimable ``lease_ttl`` seconds later.
  A lease found taken over (this process stalled past its expiry) is logged and forgotten.
* ``lease_left(stream, worker)`` says how long a held lease is **surely** valid, on this process's monotonic clock:
  until ``lease_ttl`` after the claim or the last successful renewal was *sent* (the database's ``now()`` is later
  than that, so its expiry is too). 0 once the lease is released, found taken over, or ran out unrenewed (the
  database away): its holder must stop delivering, since another replica may claim the stream from then on.
* With the server unreachable, ``claim`` fails closed (``False``: the sender asks again) rather than raising.
* A process that serves the namespace alone (its task store holds the guard exclusively: the in-process bus) drops
  every lease when its outbox starts: they can only be a dead predecessor's, and waiting ``lease_ttl`` for them would
  hold back the notifications it resumes (and the owed ones it recovers) after a crash.

``StreamLeases`` is ``PostgresPushOutbox``'s base class: the outbox gives it the database (``_db``) and calls
``_init_leases``, ``_start_keeper`` and ``_stop_leases`` from its constructor, ``start`` and ``close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any

from relaykit._errors import ServiceUnavailableError
from relaykit.backends._base import StreamKey
from relaykit.backends.postgres._db import Database, columns, has_nul

__all__ = ["LEASE_TTL", "StreamLeases"]

log = logging.getLogger("relaykit.push")

LEASE_TTL = 30.0
"""Default seconds a stream lease lasts without renewal (how long a dead replica's streams stay blocked)."""

_SWEEP_EVERY = 60.0  # seconds between deletions of long-expired leases (left behind by replicas that died)


class _Held:
    __slots__ = ("until", "worker")

    def __init__(self, worker: str, until: float) -> None:
        self.worker = worker
        self.until = until  # time.monotonic() up to which the lease is surely valid


class StreamLeases:
    """Claim, release and renew stream leases; a keeper task renews the ones held."""

    _db: Database
    _started: bool

    def _init_leases(self, lease_ttl: float, renew_every: float | None) -> None:
        if not (math.isfinite(lease_ttl) and lease_ttl > 0):
            raise ValueError(f"lease_ttl must be a positive number of seconds, not {lease_ttl!r}")
        if renew_every is None:
            renew_every = lease_ttl / 3
        if not (math.isfinite(renew_every) and 0 <= renew_every < lease_ttl):
            raise ValueError(
                f"renew_every must be a number of seconds >= 0 and below lease_ttl ({lease_ttl!r}), not {renew_every!r}"
            )
        self.lease_ttl = float(lease_ttl)
        self.renew_every = float(renew_every)
        self._held: dict[StreamKey, _Held] = {}  # leases this object holds (renewed by the keeper)
        self._keeper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        lease = f"{self._db.namespace}_push_leases"
        key = "tenant, owner, task_id, config_id"
        # Held while expires_at > now() (the database clock, one for every replica).
        # One statement: a new lease is inserted; an existing one is taken only when this worker holds it (a
        # refresh) or it expired. ON CONFLICT locks the row, so racing claims are decided one after the other.
        self._sql_claim = (
            f"INSERT INTO {lease} AS l ({key}, worker, expires_at) "
            "VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6)) "
            f"ON CONFLICT ({key}) DO UPDATE SET worker = excluded.worker, expires_at = excluded.expires_at "
            "WHERE l.worker = excluded.worker OR l.expires_at <= now() RETURNING 1"
        )
        self._sql_release = (
            f"DELETE FROM {lease} WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND config_id = $4 AND worker = $5"
        )
        # Renewal touches only rows still held by the same worker: it never re-creates a lease released meanwhile.
        self._sql_renew = (
            f"UPDATE {lease} AS l SET expires_at = now() + make_interval(secs => $6) "
            "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) "
            "AS u(tenant, owner, task_id, config_id, worker) WHERE l.tenant = u.tenant AND l.owner = u.owner "
            "AND l.task_id = u.task_id AND l.config_id = u.config_id AND l.worker = u.worker "
            "RETURNING l.tenant, l.owner, l.task_id, l.config_id"
        )
        self._sql_release_all = (
            f"DELETE FROM {lease} AS l USING unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) "
            "AS u(tenant, owner, task_id, config_id, worker) WHERE l.tenant = u.tenant AND l.owner = u.owner "
            "AND l.task_id = u.task_id AND l.config_id = u.config_id AND l.worker = u.worker"
        )
        self._sql_drop_all = f"DELETE FROM {lease}"
        # Leases of replicas that died with them: claimable already, deleted once long expired (housekeeping).
        self._sql_sweep = f"DELETE FROM {lease} WHERE expires_at < now() - make_interval(secs => $1)"
        self._sql_holder = (
            f"SELECT worker, expires_at > now() FROM {lease} "
            "WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND config_id = $4"
        )

    async def _drop_dead_leases(self) -> None:
        """Delete every lease: only for a process alone on the namespace, at its start (see the module docstring)."""

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_drop_all)

        await self._db.run(job)

    def _start_keeper(self) -> None:
        if self._keeper is None and self.renew_every > 0:
            self._wake = asyncio.Event()
            self._keeper = asyncio.create_task(self._keep(), name=f"relaykit-push-leases-{self._db.namespace}")

    async def _stop_leases(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        if self._started and self._held:
            held, self._held = self._held, {}
            # Best effort: a lease not released here expires after lease_ttl anyway.
            with contextlib.suppress(Exception):
                await self._release_all(held)
        self._held.clear()

    async def claim(self, stream: StreamKey, worker: str) -> bool:
        if has_nul(worker):
            raise ValueError("the PostgreSQL store cannot hold a worker id containing NUL")
        if has_nul(*stream):
            return False  # no entry of such a stream can be stored

        async def job(conn: Any) -> Any:
            return await conn.fetchval(self._sql_claim, *stream, worker, self.lease_ttl)

        sent = time.monotonic()
        try:
            won = await self._db.run(job)
        except ServiceUnavailableError as exc:
            # Fail closed: without the database no lease can be confirmed; the sender asks again.
            log.debug("push outbox: cannot claim a delivery stream: %s", exc)
            return False
        held = self._held.get(stream)
        if won is None:
            if held is not None and held.worker == worker:
                del self._held[stream]  # taken over after it expired
            return False
        if held is not None and held.worker == worker:
            held.until = max(held.until, sent + self.lease_ttl)
        else:
            self._held[stream] = _Held(worker, sent + self.lease_ttl)
        self._wake.set()
        return True

    def lease_left(self, stream: StreamKey, worker: str) -> float:
        """Seconds ``worker``'s lease on ``stream`` is surely still valid; 0 when it is not held (any more)."""
        held = self._held.get(stream)
        if held is None or held.worker != worker:
            return 0.0
        return max(0.0, held.until - time.monotonic())

    async def release(self, stream: StreamKey, worker: str) -> None:
        if has_nul(worker, *stream):
            return
        held = self._held.get(stream)
        if held is not None and held.worker == worker:
            del self._held[stream]

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_release, *stream, worker)

        await self._db.run(job)

    def _forget(self, released: list[tuple[str, str, str, str, str]]) -> None:
        """``(tenant, owner, task id, config id, worker)`` leases were deleted by a commit: no longer held here."""
        for *stream, worker in released:
            key = (stream[0], stream[1], stream[2], stream[3])
            held = self._held.get(key)
            if held is not None and held.worker == worker:
                del self._held[key]

    async def holder(self, stream: StreamKey) -> str | None:
        """The worker holding a live lease on ``stream``, or ``None`` (observability, tests)."""
        if has_nul(*stream):
            return None

        async def job(conn: Any) -> Any:
            return await conn.fetchrow(self._sql_holder, *stream)

        row = await self._db.run(job)
        return str(row[0]) if row is not None and row[1] else None

    async def renew(self) -> int:
        """Renew every lease this object holds now (the keeper does it on its own); returns how many it still holds.

        A lease another worker took over meanwhile (it had expired) is forgotten, with a warning.
        """
        held = {key: lease.worker for key, lease in self._held.items()}
        if not held:
            return 0
        keys = sorted(held)
        rows = [(*k, held[k]) for k in keys]

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_renew, *columns(rows, 5), self.lease_ttl))

        sent = time.monotonic()
        # The heartbeat connection: a renewal queued behind busy pooled connections would let live leases lapse,
        # and a lapsed lease stops its stream's delivery.
        renewed = {(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in await self._db.run_aside(job)}
        for key in keys:
            lease = self._held.get(key)
            if lease is None or lease.worker != held[key]:
                continue  # released meanwhile (a later claim by another holder id has its own expiry)
            if key in renewed:
                lease.until = max(lease.until, sent + self.lease_ttl)
            else:
                # Not released meanwhile (that would have removed it from _held): someone else has it now.
                del self._held[key]
                log.warning(
                    "push outbox: lost the delivery lease of task %s, config %s (expired, taken over)", key[2], key[3]
                )
        return len(renewed)

    async def _release_all(self, held: dict[StreamKey, _Held]) -> None:
        rows = [(*k, held[k].worker) for k in sorted(held)]

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_release_all, *columns(rows, 5))

        await self._db.run(job)

    async def _keep(self) -> None:
        """Renew held leases every ``renew_every`` seconds; now and then delete long-expired leases."""
        swept = 0.0
        while True:
            if not self._held:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self.renew_every)
            try:
                await self.renew()
                if time.monotonic() - swept >= _SWEEP_EVERY:
                    swept = time.monotonic()
                    await self._sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The server is away: the leases may lapse; claims decide again once it is back.
                log.warning("push outbox: could not renew delivery leases: %s", exc)

    async def _sweep(self) -> None:
        async def job(conn: Any) -> None:
            await conn.execute(self._sql_sweep, max(self.lease_ttl, _SWEEP_EVERY))

        await self._db.run(job)
