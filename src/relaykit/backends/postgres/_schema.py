"""The PostgreSQL schema: its version, the migrations that build it, and the advisory-lock keys.

``migrate`` creates or upgrades a namespace's tables in one transaction holding ``pg_advisory_xact_lock(<namespace
key>)``, so any number of replicas may start at once: the first one migrates, the others wait for its commit and find
the schema current. A schema written by a newer relaykit is refused rather than misread.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "check_namespace", "lock_key", "migrate"]

SCHEMA_VERSION = 7
"""The schema version this relaykit writes; older schemas are migrated on start, newer ones refused."""

_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}\Z")


# Schema migrations, applied in order: entry i brings a namespace from version i to version i + 1. Never edit
# an entry that has shipped; append a new one and bump SCHEMA_VERSION. Constraint and sequence names are given
# explicitly: PostgreSQL would truncate generated ones past 63 bytes for long namespaces.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE {ns}_tasks (
            id         TEXT COLLATE "C" NOT NULL,
            tenant     TEXT COLLATE "C" NOT NULL,
            owner      TEXT COLLATE "C" NOT NULL,
            context_id TEXT COLLATE "C" NOT NULL,
            state      TEXT COLLATE "C" NOT NULL,
            status_ts  BIGINT NOT NULL,
            version    BIGINT NOT NULL,
            event_seq  BIGINT NOT NULL DEFAULT 0,
            body       BYTEA NOT NULL,
            CONSTRAINT {ns}_tasks_pk PRIMARY KEY (id)
        )""",
        # ListTasks without a context filter: an index range scan in exactly the output order, so a page costs
        # O(page size), not O(tasks of the owner). INCLUDE (state): the COUNT of a state-filtered list is then an
        # index-only scan as well.
        "CREATE INDEX {ns}_tasks_list ON {ns}_tasks (tenant, owner, status_ts DESC, id DESC) INCLUDE (state)",
        # ListTasks with a context filter (the common "tasks of this conversation" query).
        "CREATE INDEX {ns}_tasks_context ON {ns}_tasks "
        "(tenant, owner, context_id, status_ts DESC, id DESC) INCLUDE (state)",
        # fail_orphans on start and purge on a timer: touch only active / old terminal rows, not every body.
        "CREATE INDEX {ns}_tasks_state ON {ns}_tasks (state, status_ts)",
        """CREATE TABLE {ns}_push_configs (
            tenant  TEXT COLLATE "C" NOT NULL,
            owner   TEXT COLLATE "C" NOT NULL,
            task_id TEXT COLLATE "C" NOT NULL,
            id      TEXT COLLATE "C" NOT NULL,
            seq     BIGINT GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME {ns}_push_seq),
            body    BYTEA NOT NULL,
            CONSTRAINT {ns}_push_pk PRIMARY KEY (tenant, owner, task_id, id)
        )""",
    ],
    # 2: task claims (scale-out). Adding a nullable column without a default rewrites nothing (catalog only).
    [
        # The worker holding the task (TaskClaims.claim); NULL = unclaimed.
        'ALTER TABLE {ns}_tasks ADD COLUMN worker TEXT COLLATE "C"',
        # Live workers: a worker is alive while expires_at > now() (the database clock, one for every replica).
        """CREATE TABLE {ns}_workers (
            id         TEXT COLLATE "C" NOT NULL,
            expires_at TIMESTAMPTZ NOT NULL,
            CONSTRAINT {ns}_workers_pk PRIMARY KEY (id)
        )""",
        # The tasks of one worker (cancel routing, a worker's own claims); only claimed rows are indexed.
        "CREATE INDEX {ns}_tasks_worker ON {ns}_tasks (worker) WHERE worker IS NOT NULL",
    ],
    # 3: the push-notification outbox (``_outbox``): pending entries and dead letters, per-config delivery
    # health, and the stream leases that keep two replicas from delivering one (task, config) at once. Every name
    # fits in 63 bytes with the longest namespace (48 characters).
    [
        # Times are epoch seconds (double precision: an OutboxEntry's floats round-trip exactly); dead_at NULL =
        # pending, set = dead letter.
        """CREATE TABLE {ns}_push_outbox (
            event_id        TEXT COLLATE "C" NOT NULL,
            tenant          TEXT COLLATE "C" NOT NULL,
            owner           TEXT COLLATE "C" NOT NULL,
            task_id         TEXT COLLATE "C" NOT NULL,
            config_id       TEXT COLLATE "C" NOT NULL,
            seq             BIGINT NOT NULL,
            body            BYTEA NOT NULL,
            created_at      DOUBLE PRECISION NOT NULL,
            attempts        INTEGER NOT NULL DEFAULT 0,
            next_attempt_at DOUBLE PRECISION NOT NULL DEFAULT 0,
            last_error      TEXT NOT NULL DEFAULT '',
            dead_at         DOUBLE PRECISION,
            CONSTRAINT {ns}_push_outbox_pk PRIMARY KEY (event_id)
        )""",
        # Pending entries in delivery order (pending(), a stream's discard, the pending counts of health()).
        "CREATE INDEX {ns}_outbox_pending ON {ns}_push_outbox (tenant, owner, task_id, config_id, seq) "
        "WHERE dead_at IS NULL",
        # Dead letters of a task, oldest first (dead_letters(), the dead counts of health()).
        "CREATE INDEX {ns}_outbox_dead ON {ns}_push_outbox (tenant, owner, task_id, dead_at, seq) "
        "WHERE dead_at IS NOT NULL",
        """CREATE TABLE {ns}_push_health (
            tenant       TEXT COLLATE "C" NOT NULL,
            owner        TEXT COLLATE "C" NOT NULL,
            task_id      TEXT COLLATE "C" NOT NULL,
            config_id    TEXT COLLATE "C" NOT NULL,
            url          TEXT NOT NULL DEFAULT '',
            delivered    BIGINT NOT NULL DEFAULT 0,
            failures     BIGINT NOT NULL DEFAULT 0,
            consecutive  BIGINT NOT NULL DEFAULT 0,
            last_success DOUBLE PRECISION,
            last_failure DOUBLE PRECISION,
            last_error   TEXT NOT NULL DEFAULT '',
            CONSTRAINT {ns}_push_health_pk PRIMARY KEY (tenant, owner, task_id, config_id)
        )""",
        # One row per leased delivery stream: held by worker while expires_at > now() (the database clock).
        """CREATE TABLE {ns}_push_leases (
            tenant     TEXT COLLATE "C" NOT NULL,
            owner      TEXT COLLATE "C" NOT NULL,
            task_id    TEXT COLLATE "C" NOT NULL,
            config_id  TEXT COLLATE "C" NOT NULL,
            worker     TEXT COLLATE "C" NOT NULL,
            expires_at TIMESTAMPTZ NOT NULL,
            CONSTRAINT {ns}_push_leases_pk PRIMARY KEY (tenant, owner, task_id, config_id)
        )""",
    ],
    # 4: the queued request of a task's current message (scale-out): the sweeper re-creates a lost queue entry, or
    # re-runs a lost worker's message, exactly as it was sent (configuration, metadata, extensions). Catalog only.
    [
        "ALTER TABLE {ns}_tasks ADD COLUMN request BYTEA",
    ],
    # 5: a big task's body without its artifacts (``_tasks.LEAN``), written with the body by every statement that
    # writes the body, so ListTasks (artifacts left out by default) never reads or parses a big artifact. NULL: a
    # small body (or a row written before this version), trimmed when listed. Catalog only.
    [
        "ALTER TABLE {ns}_tasks ADD COLUMN lean BYTEA",
    ],
    # 6: the W3C traceparent of the execution a push notification came from (relaykit.telemetry), so a delivery
    # resumed by another replica or after a restart stays in the request's trace. Catalog only.
    [
        "ALTER TABLE {ns}_push_outbox ADD COLUMN trace TEXT",
    ],
    # 7: a task's owed push notification (``relaykit.push._owed``): the event seq of a state written but not yet in
    # the outbox (NULL: nothing owed), and when it was written, by the database clock (a replica's sweep takes over
    # the markers its writer left for longer than the lease: it died). Catalog only for the columns; the index holds
    # the marked rows alone, so the sweep reads those and a write that leaves the marker alone adds no index entry.
    [
        "ALTER TABLE {ns}_tasks ADD COLUMN push_owed BIGINT",
        "ALTER TABLE {ns}_tasks ADD COLUMN push_owed_at TIMESTAMPTZ",
        "CREATE INDEX {ns}_tasks_owed ON {ns}_tasks (push_owed_at) WHERE push_owed IS NOT NULL",
    ],
]


def lock_key(purpose: str, namespace: str) -> int:
    # A stable signed 64-bit key per (purpose, namespace): the same in every process and every relaykit version.
    digest = hashlib.blake2b(f"relaykit:{purpose}:{namespace}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def check_namespace(namespace: str) -> str:
    if not _NAMESPACE.match(namespace):
        raise ValueError(
            f"invalid namespace {namespace!r}: letters, digits and underscores, not starting with a digit "
            "(at most 48 characters)"
        )
    # Unquoted identifiers fold to lower case: "Acme" and "acme" name the same tables, so they share locks too.
    return namespace.lower()


async def migrate(conn: Any, namespace: str, where: str) -> tuple[int, int]:
    """Create or migrate the schema of ``namespace`` on ``conn``; returns (version found, version now)."""
    table = f"{namespace}_schema"
    async with conn.transaction():
        # Waits for any replica migrating the same namespace; released at COMMIT / ROLLBACK.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("migrate", namespace))
        if await conn.fetchval("SELECT to_regclass($1)", table) is None:
            await conn.execute(
                f"CREATE TABLE {table} (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
            )
        found = await conn.fetchval(f"SELECT version FROM {table} WHERE id = 1")
        current = int(found) if found is not None else 0
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"the PostgreSQL store {where} has schema version {current} (namespace {namespace!r}), "
                f"newer than this relaykit supports ({SCHEMA_VERSION}); upgrade relaykit"
            )
        for statements in MIGRATIONS[current:SCHEMA_VERSION]:
            for statement in statements:
                await conn.execute(statement.format(ns=namespace))
        if current != SCHEMA_VERSION:
            await conn.execute(
                f"INSERT INTO {table} (id, version) VALUES (1, $1) "
                "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                SCHEMA_VERSION,
            )
    return current, SCHEMA_VERSION
