"""The PostgreSQL task store: tasks in ``<namespace>_tasks``, worker heartbeats in ``<namespace>_workers``.

See the package (``relaykit.backends.postgres``) for the invariants (one pool, schema on start, the single-process
guard, outages, ordering, claims).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg
import pydantic_core

from relaykit._enums import TaskState
from relaykit.backends._base import (
    Claim,
    ConflictError,
    ListPage,
    Orphan,
    TaskQuery,
    TaskRecord,
    failed_orphan,
    stored_task,
    unreadable_rows,
)
from relaykit.backends._handle import AttachedStore
from relaykit.backends._paging import (
    decode_token,
    dropped_fields,
    encode_token,
    listed_tasks,
    sort_key,
    timestamp_us,
)
from relaykit.backends.postgres._batch import Row, WriteCombiner
from relaykit.backends.postgres._db import CONNECT_TIMEOUT, Database, columns, has_nul, rowcount
from relaykit.backends.postgres._untold import UntoldInserts

__all__ = ["PostgresTaskStore"]

# States are stored as their proto names (the wire value), so the column reads the same as the JSON body.
_ACTIVE = [TaskState.SUBMITTED.value, TaskState.WORKING.value]
_TERMINAL = [state.value for state in TaskState if state.is_terminal]
_INTERRUPTED = [TaskState.INPUT_REQUIRED.value, TaskState.AUTH_REQUIRED.value]
LEAN = 64 * 1024  # bytes: a body longer than this also gets its lean copy (without artifacts) in the ``lean`` column


def _without(body: str, fields: tuple[str, ...]) -> str:
    """SQL: the task JSON ``body`` (bytea) less the top-level ``fields`` (our constant names, never client input).

    As ``json``, not ``jsonb``: it keeps a text's \\u0000 escapes."""
    names = ", ".join(f"'{name}'" for name in fields)
    return (
        f"(SELECT json_object_agg(key, value)::text FROM json_each(convert_from({body}, 'UTF8')::json) "
        f"WHERE key NOT IN ({names}))"
    )


_NUL_ESCAPE = "'\\x5c7530303030'::bytea"  # the six bytes \u0000


def lean(body: str) -> str:
    """SQL: the ``lean`` column for the body ``body`` is written with (NULL for a small body). The database pays
    the JSON parse once per write of a big task (checkpoints are bounded, ``server._recorder``), instead of at
    every ListTasks."""
    typed = f"{body}::bytea"  # a parameter's type is not inferred from the column it is also written to
    # PostgreSQL's JSON functions refuse a \u0000 escape (a text any client may send: "unsupported Unicode escape
    # sequence"), and the write with them: a body that holds one gets no lean copy (its readers take the whole body,
    # and ListTasks' fallback reads it in Python). The test is a byte search, far cheaper than the parse it spares.
    return (
        f"CASE WHEN octet_length({typed}) > {LEAN} AND position({_NUL_ESCAPE} in {typed}) = 0 "
        f"THEN convert_to({_without(typed, ('artifacts',))}, 'UTF8') END"
    )


# The parameters of every task write ($1-$9, ``PostgresTaskStore._row``), then each kind's own, as (name, type).
_ROW = (
    ("id", "text"),
    ("tenant", "text"),
    ("owner", "text"),
    ("context_id", "text"),
    ("state", "text"),
    ("status_ts", "bigint"),
    ("version", "bigint"),
    ("event_seq", "bigint"),
    ("body", "bytea"),
)
_SET = "context_id = u.context_id, state = u.state, status_ts = u.status_ts, version = u.version, " + (
    "event_seq = u.event_seq, body = u.body"
)


log = logging.getLogger("relaykit.store")

# What a statement that reads stored bodies as JSON raises for one PostgreSQL cannot read: damaged or not UTF-8
# (DataError), a text holding \u0000, which its JSON functions refuse though the task is valid (DataError too), or
# nested past its stack (ProgramLimitExceededError). The readers of many rows then read again without that one.
_NOT_JSON = (asyncpg.DataError, asyncpg.ProgramLimitExceededError)
_SLICE = 500  # tasks per statement when ``first_messages`` reads the window again a slice at a time


def _first_message_id(body: bytes) -> str | None:
    """The ``messageId`` of the first message of the stored task ``body``, read here (for a body the database's JSON
    functions refuse); ValueError when the body is no JSON this process reads either."""
    data = pydantic_core.from_json(body)
    history = data.get("history") if isinstance(data, dict) else None
    first = history[0] if isinstance(history, list) and history else None
    message_id = first.get("messageId") if isinstance(first, dict) else None
    return message_id if isinstance(message_id, str) else None


ANALYZE_FIRST = 1000
"""Tasks a store creates before it refreshes the tasks table's statistics the first time (``_grown``)."""

# How a statement that finds one task by its id checks the task's scope. Not ``tenant = $2 AND owner = $3``: those
# also match the leading columns of the list indexes, and a prepared statement's generic plan, made while the table
# was empty, was seen to take one of them and scan every task of the owner to find one (a cost per statement growing
# with the number of tasks, kept until the next ANALYZE: forever with autovacuum off). IS NOT DISTINCT FROM is no
# index condition, so only the primary key can find the row; on these NOT NULL columns it means the same as ``=``.
_SCOPE = "(tenant, owner) IS NOT DISTINCT FROM ($2, $3)"


def _unnest(extra: tuple[tuple[str, str], ...]) -> str:
    """SQL: the rows of a combined write as ``u``, one array parameter per column."""
    cols = _ROW + extra
    arrays = ", ".join(f"${i}::{kind}[]" for i, (_, kind) in enumerate(cols, 1))
    return f"unnest({arrays}) AS u({', '.join(name for name, _ in cols)})"


class PostgresTaskStore(AttachedStore[Database]):
    """Tasks in PostgreSQL tables ``<namespace>_*``; several replicas may share them (with the Redis bus).

    >>> store = PostgresTaskStore("postgresql://postgres@127.0.0.1:5432/test", namespace="demo")
    >>> store.namespace
    'demo'
    """

    def __init__(
        self,
        dsn: str,
        *,
        namespace: str = "relaykit",
        pool: Any = None,
        min_size: int = 1,
        max_size: int = 10,
        exclusive: bool = True,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        """``pool``: an asyncpg pool to use instead of opening one (left open at ``close()``).

        ``exclusive``: this process serves the namespace alone (the in-process bus); ``exclusive=False``: it is one
        of several replicas whose bus coordinates them (Redis). While started, the store holds the namespace guard
        that way, so neither kind of process starts beside the other (``StoreInUseError``).
        """
        self._db = Database(
            dsn,
            namespace,
            pool=pool,
            min_size=min_size,
            max_size=max_size,
            guard="exclusive" if exclusive else "shared",
            connect_timeout=connect_timeout,
        )
        self._started = False
        self._created = 0  # tasks created through this store (``_grown``)
        self._analyze_at = ANALYZE_FIRST
        self._analyzing: asyncio.Task[None] | None = None
        t = f"{self._db.namespace}_tasks"
        self._table = t
        self._sql_get = f"SELECT body, version, event_seq FROM {t} WHERE id = $1 AND {_SCOPE}"
        self._sql_insert = (
            f"INSERT INTO {t} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body, request, "
            f"lean) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, {lean('$9')}) ON CONFLICT (id) DO NOTHING"
        )
        # With its lean column: it also writes a task as it is after its put-off insert (``_carry``), answer included.
        self._sql_insert_claimed = (
            f"INSERT INTO {t} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body, request, "
            f"worker, lean) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {lean('$9')}) "
            "ON CONFLICT (id) DO NOTHING"
        )
        # The same for a task nobody is told of before its next write (``insert_claimed(told=False)``): committed
        # asynchronously (set_config local to the statement's own transaction: no WAL flush, no fsync of its own).
        untold = "WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL"
        self._sql_insert_claimed_untold = (
            f"INSERT INTO {t} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body, request, "
            f"worker) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 {untold} ON CONFLICT (id) DO NOTHING"
        )
        # Scope in the WHERE clause too: a record can never move a task to another tenant or owner.
        self._sql_update = (
            f"UPDATE {t} SET context_id = $4, state = $5, status_ts = $6, version = $7, event_seq = $8, body = $9, "
            f"lean = {lean('$9')} WHERE id = $1 AND {_SCOPE} AND version = $10"
        )
        # The claimant's write (save_claimed): the same update, moving the claim with it.
        self._sql_update_claimed = (
            f"UPDATE {t} SET context_id = $4, state = $5, status_ts = $6, version = $7, event_seq = $8, body = $9, "
            f"lean = {lean('$9')}, worker = $11 WHERE id = $1 AND {_SCOPE} AND version = $10"
        )
        # The same four writes for many rows at once (``_batch``): each returns the ids it wrote.
        into = "id, tenant, owner, context_id, state, status_ts, version, event_seq, body, request"
        picked = ", ".join(f"u.{name}" for name in into.split(", "))
        sql_inserts = (
            f"INSERT INTO {t} ({into}, lean) SELECT {picked}, {lean('u.body')} "
            f"FROM {_unnest((('request', 'bytea'),))} ON CONFLICT (id) DO NOTHING RETURNING id"
        )
        sql_inserts_claimed = (
            f"INSERT INTO {t} ({into}, worker, lean) SELECT {picked}, u.worker, {lean('u.body')} "
            f"FROM {_unnest((('request', 'bytea'), ('worker', 'text')))} ON CONFLICT (id) DO NOTHING RETURNING id"
        )
        sql_inserts_claimed_untold = (
            f"INSERT INTO {t} ({into}, worker) SELECT {picked}, u.worker "
            f"FROM {_unnest((('request', 'bytea'), ('worker', 'text')))} {untold} ON CONFLICT (id) DO NOTHING "
            "RETURNING id"
        )
        # Joined on the id: with the statistics of a table that has grown (``_grown``), each row is found through the
        # primary key; a hash join over the whole table is what a plan made on a small table does.
        match = "o.id = u.id AND o.tenant = u.tenant AND o.owner = u.owner AND o.version = u.expected"
        self._sql_updates = sql_updates = (
            f"UPDATE {t} AS o SET {_SET}, lean = {lean('u.body')} FROM {_unnest((('expected', 'bigint'),))} "
            f"WHERE {match} RETURNING o.id"
        )
        self._sql_updates_claimed = sql_updates_claimed = (
            f"UPDATE {t} AS o SET {_SET}, lean = {lean('u.body')}, worker = u.worker "
            f"FROM {_unnest((('expected', 'bigint'), ('worker', 'text')))} WHERE {match} RETURNING o.id"
        )
        self._inserts = self._combiner(self._sql_insert, sql_inserts)
        self._inserts_claimed = self._combiner(self._sql_insert_claimed, sql_inserts_claimed)
        # Put off first, in the hope that the task's next write carries it (``_untold``).
        self._untold = UntoldInserts(self._combiner(self._sql_insert_claimed_untold, sql_inserts_claimed_untold).write)
        self._updates = self._combiner(self._sql_update, sql_updates)
        self._updates_claimed = self._combiner(self._sql_update_claimed, sql_updates_claimed)
        # The same writes with the state's push notification owed (``TaskRecord.push_owed``, ``relaykit.push._owed``),
        # its time by the database clock. Separate statements, one row each (a task with push configs is no hot path
        # to combine): the write of a task without push configs names the columns no more than before they existed.
        self._sql_insert_owed = (
            f"INSERT INTO {t} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body, request, "
            "lean, push_owed, push_owed_at) "
            f"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, {lean('$9')}, $11, now()) ON CONFLICT (id) DO NOTHING"
        )
        self._sql_update_owed = (
            f"UPDATE {t} SET context_id = $4, state = $5, status_ts = $6, version = $7, event_seq = $8, body = $9, "
            f"lean = {lean('$9')}, push_owed = $11, push_owed_at = now() WHERE id = $1 AND {_SCOPE} AND version = $10"
        )
        self._sql_update_claimed_owed = (
            f"UPDATE {t} SET context_id = $4, state = $5, status_ts = $6, version = $7, event_seq = $8, body = $9, "
            f"lean = {lean('$9')}, worker = $11, push_owed = $12, push_owed_at = now() "
            f"WHERE id = $1 AND {_SCOPE} AND version = $10"
        )
        self._sql_delete = f"DELETE FROM {t} WHERE id = $1 AND {_SCOPE}"
        # With whether the task has push configs (their table is in this namespace): its FAILED status is owed to them.
        has_configs = (
            f"EXISTS (SELECT 1 FROM {self._db.namespace}_push_configs AS p WHERE p.tenant = t.tenant "
            "AND p.owner = t.owner AND p.task_id = t.id)"
        )
        self._sql_active = (
            f"SELECT id, context_id, body, tenant, owner, version, event_seq, {has_configs} FROM {t} AS t "
            "WHERE state = ANY($1::text[]) FOR UPDATE OF t"
        )
        self._sql_fail = (
            f"UPDATE {t} AS o SET state = u.state, status_ts = u.status_ts, version = o.version + 1, "
            f"event_seq = o.event_seq + 1, body = u.body, lean = {lean('u.body')}, "
            "push_owed = CASE WHEN u.owed THEN o.event_seq + 1 ELSE o.push_owed END, "
            "push_owed_at = CASE WHEN u.owed THEN now() ELSE o.push_owed_at END "
            "FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::bool[]) "
            "AS u(id, state, status_ts, body, owed) WHERE o.id = u.id"
        )
        self._sql_purge = f"DELETE FROM {t} WHERE state = ANY($1::text[]) AND status_ts < $2"
        # --- claims: a worker is alive while its row's expires_at > now() (the database clock)
        w = f"{self._db.namespace}_workers"
        self._sql_heartbeat = (
            f"INSERT INTO {w} (id, expires_at) VALUES ($1, now() + make_interval(secs => $2)) "
            "ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at"
        )
        self._sql_retire = f"DELETE FROM {w} WHERE id = $1"
        # One statement: the subquery locks the row (a concurrent claim waits here, then sees this one's worker),
        # and yields the worker before the claim, which RETURNING (new values only) could not.
        self._sql_claim = (
            f"UPDATE {t} AS t SET worker = $4, version = t.version + 1, request = COALESCE($5, t.request) "
            f"FROM (SELECT id, worker FROM {t} WHERE id = $1 AND {_SCOPE} FOR UPDATE) AS p "
            "WHERE t.id = p.id AND (p.worker IS NULL OR p.worker = $4 OR NOT EXISTS "
            f"(SELECT 1 FROM {w} WHERE id = p.worker AND expires_at > now())) "
            "RETURNING t.body, t.version, t.event_seq, p.worker, t.request"
        )
        self._sql_release = f"UPDATE {t} SET worker = NULL WHERE id = $1 AND worker = $2"
        self._sql_claimant = f"SELECT worker FROM {t} WHERE id = $1"
        # On the state index: only active rows are read. $3: the unstarted age limit in µs, against now().
        self._sql_orphans = (
            f"SELECT t.id, t.tenant, t.owner, t.worker FROM {t} AS t WHERE t.state = ANY($1::text[]) AND ("
            f"(t.worker IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {w} WHERE id = t.worker AND expires_at > now())) "
            "OR (t.worker IS NULL AND t.state = ANY($2::text[]) "
            "AND t.status_ts < (extract(epoch FROM now()) * 1000000)::bigint - $3::bigint)) "
            "ORDER BY t.status_ts, t.id LIMIT $4"
        )

    @property
    def dsn(self) -> str:
        """The connection URL (with its password: do not log it; ``redact()`` it)."""
        return self._db.dsn

    @property
    def namespace(self) -> str:
        """The table prefix (lower case)."""
        return self._db.namespace

    @property
    def exclusive(self) -> bool:
        """Whether this store holds the namespace guard exclusively while started (else shared, with replicas)."""
        return self._db.guard == "exclusive"

    @property
    def migrated(self) -> tuple[int, int] | None:
        """``(schema version found, schema version now)`` of the migration run at ``start()``."""
        return self._db.migrated

    async def ping(self) -> None:
        """One round trip to the server; ``ServiceUnavailableError`` when it is unreachable (for readiness)."""

        async def job(conn: Any) -> None:
            await conn.fetchval("SELECT 1")

        await self._db.run(job)

    async def get(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> TaskRecord | None:
        if has_nul(task_id, tenant, owner):
            return None
        await self._untold.settle(task_id)

        async def job(conn: Any) -> Any:
            return await conn.fetchrow(self._sql_get, task_id, tenant, owner)

        row = await self._db.run(job)
        if row is None:
            return None
        return TaskRecord(stored_task(task_id, row[0]), tenant, owner, int(row[1]), int(row[2]), read=row[0])

    @staticmethod
    def _row(record: TaskRecord) -> tuple[Any, ...]:
        """The parameters $1-$9 of the insert and the updates."""
        # Everything is read and encoded now: the caller may keep mutating the task while the write is in flight.
        task = record.task
        if has_nul(task.id, record.tenant, record.owner, task.context_id):
            raise ValueError("the PostgreSQL store cannot hold a task id, context id or scope containing NUL")
        return (
            task.id,
            record.tenant,
            record.owner,
            task.context_id,
            task.status.state.value,
            sort_key(task)[0],
            record.version + 1,
            record.event_seq,
            record.body if record.body is not None else task.to_json(),
        )

    async def save(self, record: TaskRecord) -> None:
        task_id, version = record.task.id, record.version
        args = self._row(record)
        if record.push_owed:
            await self._save_owed(record, args, version)
            record.version = version + 1
            return

        if version == 0:
            if task_id in self._untold or not await self._inserts.write((*args, record.request)):
                raise ConflictError(f"task {task_id} already exists")
            self._grown()
        elif (untold := self._untold.take(task_id, record.tenant, record.owner) if version == 1 else None) is not None:
            await self._carry(args, untold, untold[-1])  # still claimed by the worker it was inserted for
        else:
            await self._untold.settle(task_id)
            if not await self._updates.write((*args, version)):
                raise ConflictError(f"task {task_id} was changed by another writer (or is not in this scope)")
        record.version = version + 1

    async def _save_owed(
        self, record: TaskRecord, args: Row, version: int, *, claimed: bool = False, worker: str | None = None
    ) -> None:
        """``save`` (or, ``claimed``, ``save_claimed`` for ``worker``) of a state whose push notification is owed: the
        marker goes into the row in the statement that stores the state, so no instant has one without the other."""
        task_id = args[0]
        if version == 0:
            if task_id in self._untold:
                raise ConflictError(f"task {task_id} already exists")
            sql, params = self._sql_insert_owed, (*args, record.request, record.push_owed)
        else:
            # A put-off insert goes first (an untold task has no push config, but no write may overtake it).
            await self._untold.settle(task_id)
            if claimed:
                sql, params = self._sql_update_claimed_owed, (*args, version, worker, record.push_owed)
            else:
                sql, params = self._sql_update_owed, (*args, version, record.push_owed)

        async def job(conn: Any) -> str:
            return str(await conn.execute(sql, *params))

        if rowcount(await self._db.run(job)) != 1:
            if version == 0:
                raise ConflictError(f"task {task_id} already exists")
            raise ConflictError(f"task {task_id} was changed by another writer (or is not in this scope)")
        if version == 0:
            self._grown()

    async def _carry(self, args: Row, untold: Row, worker: str | None) -> None:
        """Write a task whose insert was put off (``_untold``) as one INSERT of it as it now is (``args``: its
        ``_row``): synchronously committed, as every write but that first one."""
        task_id = args[0]
        try:
            written = await self._inserts_claimed.write((*args, untold[-2], worker))
        except Exception:
            # Not written, or not known to be (an outage): put off again, so the retried write carries it (had it
            # committed after all, that INSERT conflicts, as an update after a lost commit does).
            self._untold.add(task_id, untold)
            raise
        if not written:
            raise ConflictError(f"task {task_id} already exists")

    def _grown(self) -> None:
        """A task was created through this store. At ``ANALYZE_FIRST`` and at every doubling since, the table's
        statistics are refreshed (ANALYZE, in the background). A prepared statement keeps the plan made from the
        statistics of the table as it was: on a new namespace, empty, until autovacuum analyzes it (its first minute;
        never, with autovacuum off). A combined write planned so joins its rows by a scan of the whole table, a cost
        per write growing with the tasks stored. ANALYZE invalidates those plans: each is made again for the table as
        it is, at most twice as small as it will be until the next refresh (log2 of the tasks: a handful in all)."""
        self._created += 1
        if self._created < self._analyze_at or (self._analyzing is not None and not self._analyzing.done()):
            return
        self._analyze_at = self._created * 2
        self._analyzing = asyncio.get_running_loop().create_task(self._analyze(), name="relaykit-pg-analyze")

    async def _analyze(self) -> None:
        async def job(conn: Any) -> None:
            await conn.execute(f"ANALYZE {self._table}")

        try:
            await self._db.run(job)
        except Exception as exc:  # best effort: plans stay as they were, and the next doubling tries again
            log.warning("could not refresh the statistics of %s: %s", self._table, exc)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._untold.settle_all()
        for task_id in self._untold.forget():
            log.warning("task %s: never stored (the store closed while PostgreSQL was unavailable)", task_id)
        analyzing, self._analyzing = self._analyzing, None
        if analyzing is not None and not analyzing.done():
            analyzing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await analyzing
        await super().close()

    def _combiner(self, one_sql: str, many_sql: str) -> WriteCombiner:
        """The write ``one_sql`` (one row as $1…$n), combined under concurrency into ``many_sql`` (``_batch``)."""

        async def one(row: Row) -> bool:
            async def job(conn: Any) -> str:
                return str(await conn.execute(one_sql, *row))

            return rowcount(await self._db.run(job)) == 1

        async def many(rows: list[Row]) -> set[str]:
            async def job(conn: Any) -> list[Any]:
                return list(await conn.fetch(many_sql, *columns(rows, len(rows[0]))))

            return {str(found[0]) for found in await self._db.run(job)}

        return WriteCombiner(one, many)

    async def list(self, query: TaskQuery) -> ListPage:
        # Decoded first, so a bad token fails fast with PageTokenError and costs the database nothing.
        after = decode_token(query.page_token) if query.page_token else None
        if has_nul(query.tenant, query.owner, query.context_id):
            return ListPage()
        sql, params = self.list_statement(query, after)
        await self._untold.settle_all()  # this replica lists every task it stored

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(sql, *params))

        try:
            rows = await self._db.run(job)
        except _NOT_JSON:
            # A stored body PostgreSQL cannot read as JSON (damaged, not UTF-8, \u0000 in a text, nested past its
            # stack) fails the statement that trims the bodies in the database: the same page again with the bodies
            # whole, trimmed here, where an unreadable one is left out (``listed_tasks``). Rare, so the usual listing
            # pays nothing for it.
            if not dropped_fields(query.history_length, query.include_artifacts):
                raise
            sql, params = self.list_statement(query, after, trimmed=False)
            rows = await self._db.run(job)
        size = max(query.page_size, 0)
        total = int(rows[0][0]) if rows else 0
        found = [row for row in rows if row[2] is not None]
        page = found[:size]
        more = len(found) > size
        return ListPage(
            tasks=listed_tasks(((row[2], row[3]) for row in page), query.history_length, query.include_artifacts),
            next_page_token=encode_token((int(page[-1][1]), str(page[-1][2]))) if more and page else "",
            total_size=total,
        )

    def list_statement(
        self, query: TaskQuery, after: tuple[int, str] | None = None, *, trimmed: bool = True
    ) -> tuple[str, Sequence[object]]:
        """The one SQL statement (and its parameters) ``list`` runs: rows ``(total, status_ts, id, body)``.

        Public for ``EXPLAIN`` (bench/pg_list.py, tests); ``after`` is the decoded page token. ``trimmed=False``:
        the bodies whole, whatever the page leaves out of them.
        """
        where = ["tenant = $1", "owner = $2"]
        params: list[object] = [query.tenant, query.owner]
        if query.context_id:
            params.append(query.context_id)
            where.append(f"context_id = ${len(params)}")
        if query.state is not None:
            params.append(query.state.value)
            where.append(f"state = ${len(params)}")
        if query.status_after is not None:
            params.append(timestamp_us(query.status_after))
            where.append(f"status_ts >= ${len(params)}")
        page_where = list(where)
        if after is not None:
            # A row-value comparison on consecutive index columns: the page starts with one index seek.
            params.extend(after)
            page_where.append(f"(status_ts, id) < (${len(params) - 1}, ${len(params)})")
        # One row more than the page tells whether a next page exists.
        params.append(max(query.page_size, 0) + 1)
        limit = len(params)
        body = "p.body"
        dropped = dropped_fields(query.history_length, query.include_artifacts) if trimmed else ()
        if dropped == ("artifacts",):
            # A big body's lean copy is the answer as it stands; a small one is trimmed (cheap).
            body = f"COALESCE(convert_from(p.lean, 'UTF8'), {_without('p.body', dropped)})"
        elif dropped:
            # Fields the page leaves out are removed by PostgreSQL, from the lean copy when there is one, so this
            # process never parses them and the database never reads a big artifact.
            body = _without("COALESCE(p.lean, p.body)" if "artifacts" in dropped else "p.body", dropped)
        # The count and the page in one statement: one snapshot and one round trip. The LEFT JOIN keeps the count
        # row when the page is empty.
        sql = (
            f"SELECT c.total, p.status_ts, p.id, {body} "
            f"FROM (SELECT count(*) AS total FROM {self._table} WHERE {' AND '.join(where)}) AS c "
            f"LEFT JOIN LATERAL (SELECT status_ts, id, body, lean FROM {self._table} WHERE {' AND '.join(page_where)} "
            f"ORDER BY status_ts DESC, id DESC LIMIT ${limit}) AS p ON true "
            "ORDER BY p.status_ts DESC, p.id DESC"
        )
        return sql, params

    async def delete(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        if has_nul(task_id, tenant, owner):
            return False
        if self._untold.take(task_id, tenant, owner) is not None:
            return True  # never stored, now never will be
        await self._untold.settle(task_id)

        async def job(conn: Any) -> str:
            return str(await conn.execute(self._sql_delete, task_id, tenant, owner))

        return rowcount(await self._db.run(job)) > 0

    async def first_messages(self, since: datetime, limit: int) -> builtins.list[tuple[str, str, str, str, str, int]]:
        """``(tenant, owner, messageId, task id, context id, status time in µs)`` of the message that started each
        task whose status changed since ``since`` (at most ``limit``, the most recent): refills the idempotency window
        on start. A task whose body cannot be read is left out (logged by id)."""
        # Newest first: when more than ``limit`` tasks changed within the window, the most recent are the ones a
        # retry names.
        rows_sql = (
            f"FROM {self._table} WHERE state = ANY($1::text[]) AND status_ts >= $2 ORDER BY status_ts DESC, id DESC "
            "LIMIT $3"
        )
        sql = (
            "SELECT tenant, owner, convert_from(body, 'UTF8')::jsonb #>> '{history,0,messageId}', id, context_id, "
            f"status_ts {rows_sql}"
        )
        params = ([state.value for state in TaskState], timestamp_us(since), limit)
        await self._untold.settle_all()

        async def job(conn: Any) -> builtins.list[Any]:
            return list(await conn.fetch(sql, *params))

        try:
            rows = await self._db.run(job)
        except _NOT_JSON:
            # One body PostgreSQL cannot read as JSON fails the statement: it must not stop the server from starting.
            # Rare, so the usual start pays nothing for it.
            rows = await self._first_messages_apart(
                f"SELECT tenant, owner, id, context_id, status_ts {rows_sql}", params
            )
        return [(r[0], r[1], r[2], r[3], r[4], int(r[5])) for r in rows if r[2]]

    async def _first_messages_apart(self, keys_sql: str, params: tuple[object, ...]) -> builtins.list[tuple[Any, ...]]:
        """``first_messages``' rows when its one statement failed on a body: the window's tasks without their bodies
        (``keys_sql``), then their first messages a slice at a time, by the database; a slice that fails too has its
        bodies read here (the lean copy when there is one: it holds the history). Only a body this process cannot
        read either is left out. A cost in statements of the window over ``_SLICE``, plus a read per bad slice."""

        async def fetch(sql: str, *args: object) -> builtins.list[Any]:
            async def job(conn: Any) -> builtins.list[Any]:
                return list(await conn.fetch(sql, *args))

            return await self._db.run(job)

        t = self._table
        firsts_sql = (
            f"SELECT id, convert_from(body, 'UTF8')::jsonb #>> '{{history,0,messageId}}' FROM {t} "
            "WHERE id = ANY($1::text[])"
        )
        bodies_sql = f"SELECT id, COALESCE(lean, body) FROM {t} WHERE id = ANY($1::text[])"
        keys = await fetch(keys_sql, *params)
        found: dict[str, str | None] = {}
        unreadable: builtins.list[str] = []
        for start in range(0, len(keys), _SLICE):
            ids = [str(key[2]) for key in keys[start : start + _SLICE]]
            try:
                found.update((str(row[0]), row[1]) for row in await fetch(firsts_sql, ids))
            except _NOT_JSON:
                for task_id, body in await fetch(bodies_sql, ids):
                    try:
                        found[str(task_id)] = _first_message_id(bytes(body))
                    except ValueError:  # pydantic_core's JSON errors are ValueErrors
                        unreadable.append(str(task_id))
        unreadable_rows("the idempotency window", unreadable)
        return [(key[0], key[1], found.get(str(key[2])), key[2], key[3], key[4]) for key in keys]

    async def fail_orphans(self, reason: str, *, failed: builtins.list[TaskRecord] | None = None) -> int:
        # Every active task of the namespace: right while the guard is held exclusively (no other process can be
        # running any of them: no replica holds it shared, none heartbeats). Replicas sharing the namespace
        # (exclusive=False) must not call it: they recover by lease (the engine skips it when it scales out).
        async def job(conn: Any) -> int:
            # One transaction: the active rows are locked (a concurrent writer waits, then conflicts on the
            # bumped version), rewritten in Python (the body gains the FAILED status and its message) and
            # updated in one statement.
            async with conn.transaction():
                rows = await conn.fetch(self._sql_active, _ACTIVE)
                if not rows:
                    return 0
                ids: list[str] = []
                states: list[str] = []
                stamps: list[int] = []
                bodies: list[bytes] = []
                owed: list[bool] = []
                for task_id, context_id, body, tenant, owner, version, event_seq, configs in rows:
                    task = failed_orphan(task_id, context_id, body, reason)
                    ids.append(task_id)
                    states.append(task.status.state.value)
                    stamps.append(sort_key(task)[0])
                    bodies.append(task.to_json())
                    # With push configs, the FAILED status is owed to them from this very write on (push._owed).
                    owed.append(bool(configs))
                    if failed is not None:
                        record = TaskRecord(task, tenant, owner, int(version) + 1, int(event_seq) + 1)
                        record.push_owed = int(event_seq) + 1 if configs else 0
                        failed.append(record)
                await conn.execute(self._sql_fail, ids, states, stamps, bodies, owed)
                return len(rows)

        return await self._db.run(job)

    async def purge(
        self,
        before: datetime,
        *,
        interrupted: bool = False,
        purged: builtins.list[tuple[str, str, str]] | None = None,
    ) -> int:
        limit = timestamp_us(before)
        states = _INTERRUPTED if interrupted else _TERMINAL
        if purged is not None:

            async def keyed(conn: Any) -> builtins.list[Any]:
                return list(await conn.fetch(self._sql_purge + " RETURNING tenant, owner, id", states, limit))

            rows = await self._db.run(keyed)
            purged.extend((str(r[0]), str(r[1]), str(r[2])) for r in rows)
            return len(rows)

        async def job(conn: Any) -> str:
            return str(await conn.execute(self._sql_purge, states, limit))

        return rowcount(await self._db.run(job))

    # --- TaskClaims -----------------------------------------------------------------------------------------------

    async def heartbeat(self, worker: str, ttl: float) -> None:
        if has_nul(worker):
            raise ValueError("the PostgreSQL store cannot hold a worker id containing NUL")
        if not math.isfinite(ttl):
            raise ValueError(f"heartbeat ttl must be a finite number of seconds, not {ttl!r}")

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_heartbeat, worker, float(ttl))

        # Not on the pool: a heartbeat queued behind busy task writes would let this live worker's lease lapse.
        await self._db.run_aside(job)

    async def retire(self, worker: str) -> None:
        if has_nul(worker):
            return

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_retire, worker)

        await self._db.run(job)

    async def claim(
        self, task_id: str, worker: str, *, tenant: str = "", owner: str = "anonymous", request: bytes | None = None
    ) -> Claim | None:
        if has_nul(worker):
            raise ValueError("the PostgreSQL store cannot hold a worker id containing NUL")
        if has_nul(task_id, tenant, owner):
            return None
        await self._untold.settle(task_id)

        async def job(conn: Any) -> Any:
            return await conn.fetchrow(self._sql_claim, task_id, tenant, owner, worker, request)

        row = await self._db.run(job)
        if row is None:
            return None
        record = TaskRecord(stored_task(task_id, row[0]), tenant, owner, int(row[1]), int(row[2]))
        record.request = row[4]
        return Claim(record, row[3])

    async def release(self, task_id: str, worker: str) -> None:
        if has_nul(task_id, worker):
            return
        await self._untold.settle(task_id)

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_release, task_id, worker)

        await self._db.run(job)

    async def save_claimed(self, record: TaskRecord, worker: str | None) -> None:
        task_id, version = record.task.id, record.version
        if version == 0:
            raise ValueError(f"task {task_id}: a claimed task is stored already (save_claimed updates, never inserts)")
        if worker is not None and has_nul(worker):
            raise ValueError("the PostgreSQL store cannot hold a worker id containing NUL")
        if record.push_owed:
            await self._save_owed(record, self._row(record), version, claimed=True, worker=worker)
        elif (untold := self._untold.take(task_id, record.tenant, record.owner) if version == 1 else None) is not None:
            await self._carry(self._row(record), untold, worker)
        else:
            await self._untold.settle(task_id)
            if not await self._updates_claimed.write((*self._row(record), version, worker)):
                raise ConflictError(f"task {task_id} was changed by another writer (or is not in this scope)")
        record.version = version + 1

    async def insert_claimed(self, record: TaskRecord, worker: str, *, told: bool = True) -> None:
        task_id = record.task.id
        if record.version != 0:
            raise ValueError(f"task {task_id}: insert_claimed stores a new task (version 0)")
        if has_nul(worker):
            raise ValueError("the PostgreSQL store cannot hold a worker id containing NUL")
        row = (*self._row(record), record.request, worker)
        if task_id in self._untold:
            raise ConflictError(f"task {task_id} already exists")
        if told:
            if not await self._inserts_claimed.write(row):
                raise ConflictError(f"task {task_id} already exists")
        else:
            self._untold.add(task_id, row)  # its next write carries it, or it goes on its own (``_untold``)
        self._grown()
        record.version = 1

    async def claimant(self, task_id: str) -> str | None:
        if has_nul(task_id):
            return None
        await self._untold.settle(task_id)

        async def job(conn: Any) -> Any:
            return await conn.fetchval(self._sql_claimant, task_id)

        worker = await self._db.run(job)
        return str(worker) if worker is not None else None

    # builtins.list: in this class body ``list`` is the ListTasks method.
    async def orphans(self, *, unstarted_after: float, limit: int = 100) -> builtins.list[Orphan]:
        age_us = round(unstarted_after * 1_000_000)
        size = max(limit, 0)

        async def job(conn: Any) -> builtins.list[Any]:
            return list(await conn.fetch(self._sql_orphans, _ACTIVE, _ACTIVE, age_us, size))

        rows = await self._db.run(job)
        return [Orphan(str(row[0]), str(row[1]), str(row[2]), row[3]) for row in rows]
