"""The SQLite schema: the version this relaykit writes and the migrations that build it, one list per version.

``_db.Database`` applies them on start, in one transaction; see the package for the tables' invariants.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

SCHEMA_VERSION = 5
"""The schema version this relaykit writes; older files are migrated on start, newer ones refused."""

# Schema migrations, applied in order: entry i brings a file from version i to version i + 1. Never edit an
# entry that has shipped; append a new one and bump SCHEMA_VERSION.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE {ns}_tasks (
            id         TEXT PRIMARY KEY,
            tenant     TEXT NOT NULL,
            owner      TEXT NOT NULL,
            context_id TEXT NOT NULL,
            state      TEXT NOT NULL,
            status_ts  INTEGER NOT NULL,
            version    INTEGER NOT NULL,
            event_seq  INTEGER NOT NULL DEFAULT 0,
            body       BLOB NOT NULL
        )""",
        # ListTasks without a context filter: an index range scan in exactly the output order, so a page costs
        # O(page size), not O(tasks of the owner).
        "CREATE INDEX {ns}_tasks_list ON {ns}_tasks (tenant, owner, status_ts DESC, id DESC)",
        # ListTasks with a context filter (the common "tasks of this conversation" query).
        "CREATE INDEX {ns}_tasks_context ON {ns}_tasks (tenant, owner, context_id, status_ts DESC, id DESC)",
        # fail_orphans on start and purge on a timer: touch only active / old terminal rows, not every body.
        "CREATE INDEX {ns}_tasks_state ON {ns}_tasks (state, status_ts)",
        """CREATE TABLE {ns}_push_configs (
            tenant  TEXT NOT NULL,
            owner   TEXT NOT NULL,
            task_id TEXT NOT NULL,
            id      TEXT NOT NULL,
            seq     INTEGER NOT NULL,
            body    BLOB NOT NULL,
            PRIMARY KEY (tenant, owner, task_id, id)
        )""",
    ],
    # 2: the push-notification outbox (pending entries and dead letters) and per-config delivery health.
    [
        """CREATE TABLE {ns}_push_outbox (
            event_id   TEXT PRIMARY KEY,
            tenant     TEXT NOT NULL,
            owner      TEXT NOT NULL,
            task_id    TEXT NOT NULL,
            config_id  TEXT NOT NULL,
            seq        INTEGER NOT NULL,
            body       BLOB NOT NULL,
            created_at REAL NOT NULL,
            attempts   INTEGER NOT NULL DEFAULT 0,
            next_at    REAL NOT NULL DEFAULT 0,
            last_error TEXT NOT NULL DEFAULT '',
            dead_at    REAL
        )""",
        # A stream's pending entries in delivery order, its counts, and "discard this stream" are index ranges.
        "CREATE INDEX {ns}_push_outbox_stream ON {ns}_push_outbox (tenant, owner, task_id, config_id, dead_at, seq)",
        """CREATE TABLE {ns}_push_health (
            tenant       TEXT NOT NULL,
            owner        TEXT NOT NULL,
            task_id      TEXT NOT NULL,
            config_id    TEXT NOT NULL,
            url          TEXT NOT NULL DEFAULT '',
            delivered    INTEGER NOT NULL DEFAULT 0,
            failures     INTEGER NOT NULL DEFAULT 0,
            consecutive  INTEGER NOT NULL DEFAULT 0,
            last_success REAL,
            last_failure REAL,
            last_error   TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (tenant, owner, task_id, config_id)
        )""",
    ],
    # 3: the W3C traceparent of the execution a push notification came from (relaykit.telemetry), so a delivery
    # after a restart stays in the request's trace.
    [
        "ALTER TABLE {ns}_push_outbox ADD COLUMN trace TEXT",
    ],
    # 4: a task's owed push notification (``relaykit.push._owed``): the event seq of a state written but not yet
    # in the outbox, NULL when nothing is owed. Only rows with a marker are indexed, so finding them on start reads
    # those rows alone, and a write that leaves the column alone touches no index for it.
    [
        "ALTER TABLE {ns}_tasks ADD COLUMN push_owed INTEGER",
        "CREATE INDEX {ns}_tasks_owed ON {ns}_tasks (push_owed) WHERE push_owed IS NOT NULL",
    ],
    # 5: when a task's owed marker was written (epoch seconds), so the sweep of a live process recovers only the
    # markers a failed hook left, never one whose notifications are about to be committed. Written only with a
    # marker, by the same statement; read on the marked rows alone (the index above).
    [
        "ALTER TABLE {ns}_tasks ADD COLUMN push_owed_at REAL",
    ],
]
