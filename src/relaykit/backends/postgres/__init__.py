"""The PostgreSQL store: tasks and push configs in namespaced tables, shared by every replica of an agent.

Invariants (on top of the ``TaskStore`` / ``PushConfigStore`` rules in ``_base``, mirroring ``sqlite``):

* **One pool per URL.** ``PostgresTaskStore`` owns an asyncpg pool (or borrows the one it is given);
  ``PostgresPushConfigStore(task_store)`` shares the task store's pool, which closes when the last of the two
  closes. ``open_store`` / ``open_push_store`` build exactly that pair from one URL.
* **Schema on start, under an advisory lock.** ``start()`` creates or migrates ``<namespace>_tasks``,
  ``<namespace>_push_configs`` and ``<namespace>_schema`` (its version) in one transaction holding
  ``pg_advisory_xact_lock(<namespace key>)``, so any number of replicas may start at once: the first one
  migrates, the others wait for its commit and find the schema current. The transaction-scoped lock is
  released by COMMIT/ROLLBACK, or by the server when the connection dies, so a crashed migrator never leaves it
  held. A schema written by a newer relaykit is refused rather than misread. ``upgrade()`` (``relaykit db
  upgrade``) runs the same migration alone.
* **One process per namespace, or replicas, never both.** With the in-process (memory) bus, only one process may
  serve a namespace: events and cancels of a task would otherwise never reach the process running it, and its
  start marks every task left active FAILED ("server restarted"). Replicas on the Redis bus share a namespace, and
  recover a lost replica's tasks by lease instead. The task store holds one advisory lock per namespace on a
  dedicated connection (outside the pool) from ``start()`` to ``close()``: ``pg_try_advisory_lock`` (exclusive)
  with the in-process bus, ``pg_try_advisory_lock_shared`` with ``exclusive=False`` (each Redis-bus replica or
  worker). Any number of replicas start at once; a second in-process-bus process, an in-process-bus process beside
  replicas, and a replica beside an in-process-bus process get ``StoreInUseError`` at ``start()``, before the schema
  or any task is touched, naming the holders and what to do. An in-process-bus process is also refused while a
  replica's heartbeat in ``<namespace>_workers`` is live, even if it got the lock (a server restart drops every
  session lock; replicas take theirs back at their next operation, a heartbeat at the latest). The lock is only
  ever *tried*, never waited for, so it cannot deadlock with the migration lock. If the guard connection dies, the
  next operation (or heartbeat) takes the lock again first; if a process of the other kind took it meanwhile,
  operations fail with ``ServiceUnavailableError`` instead of silently sharing the namespace.
* **Outages are ``ServiceUnavailableError``.** An unreachable server at ``start()``, and a connection lost or
  refused during an operation, surface as ``relaykit.errors.ServiceUnavailableError`` naming the server (the
  password redacted). The mapping happens in one place (``_Database.run``). Operations are not retried (a lost
  ``save`` may or may not have committed; the caller's version then lags and its next ``save`` conflicts,
  which is safe); asyncpg's pool replaces dead connections on the next acquire, so the store recovers by
  itself when the server is back.
* **Optimistic concurrency in one statement.** Insert is ``INSERT … ON CONFLICT (id) DO NOTHING``, update is
  ``UPDATE … WHERE id = $ AND version = $ AND tenant = $ AND owner = $``; zero rows ⇒ ``ConflictError``. Task
  writes that wait behind others of their kind go as one ``unnest`` statement, each caller told its own row's
  outcome (``_batch``).
* **A task found by id costs the same however many are stored.** asyncpg prepares every statement, and a prepared
  statement may keep a plan made from its first executions' statistics (a new namespace's: an empty table). So the
  one-row statements check the scope in a form no index can serve (only the primary key finds the row), and the
  store refreshes the tasks table's statistics (ANALYZE) after it created 1,000 tasks and at every doubling since,
  which re-plans the combined writes' joins: needed with autovacuum off, and in autovacuum's first minute otherwise
  (``tests/backends/test_pg_plans.py``).
* **Same order and cursor as every store.** ``status_ts`` is ``_paging.sort_key`` in µs; ids (and every key
  column) use ``COLLATE "C"``, i.e. byte order, which for UTF-8 is Python's ``str`` order, so the keyset
  ``(status_ts, id) < cursor`` means exactly what it means in SQLite and memory, and page tokens are
  ``_paging``'s. ``list`` computes the count and the page in ONE statement (one snapshot, one round trip), on
  the indexes ``(tenant, owner, status_ts DESC, id DESC)`` and ``(tenant, owner, context_id, status_ts DESC,
  id DESC)``, both ``INCLUDE (state)`` so a count filtered by state is index-only too.
* **Bodies are ``bytea``,** the task's ProtoJSON bytes exactly as written (``TaskRecord.body`` when the writer
  has it). ``jsonb`` would make the server parse every write and re-serialise every read (and asyncpg return
  ``str`` to be re-encoded); the store never queries inside a body, so bytes in, the same bytes out.
* Namespaces follow the SQLite rule (letters, digits, underscores, not starting with a digit); table names are
  unquoted, so like SQLite they are case-insensitive.
* PostgreSQL text cannot hold NUL: an id or scope containing one can match no stored row (reads return
  nothing, ``save`` raises ``ValueError``).
* **Claims** (``TaskClaims``, schema version 2): the ``worker`` column of a task names its claimant,
  ``<namespace>_workers`` holds each worker's heartbeat expiry. Liveness is judged on the database clock
  (``expires_at > now()``), never a replica's, so clock skew between replicas cannot make a live worker look
  dead. ``claim`` is one statement (the row locked, the holder's liveness checked, the claim written, the version
  bumped); ``save`` leaves the column alone; ``save_claimed`` sets it in the update that writes the task.
* **Owed push notifications** (schema version 7): a state whose notification is owed (``TaskRecord.push_owed``) is
  stored with its marker and the marker's time (the database clock) by the same statement, one row at a time (never
  a combined write: a task with push configs is not the path combining is for); the outbox's commit of those
  notifications clears it in its transaction (``relaykit.push._owed``).
* **A task nobody is told of is inserted late.** ``insert_claimed(told=False)`` (a caller waiting for the outcome
  alone) puts the insert off for 50 ms: the task's next write, when it comes first, inserts the task as it then is
  (one statement per quickly answered message); else the insert goes alone, asynchronously committed. Every
  operation of this store on the task settles it first, and ``list`` settles them all (``_untold``).

Modules: this one states the invariants and exports the public names; ``_db`` the pool, the namespace guard, outage
mapping and administration (``upgrade``, ``drop_namespace``); ``_schema`` the schema version and migrations; ``_tasks``
``PostgresTaskStore``; ``_batch`` its write combining; ``_untold`` its put-off inserts; ``_push``
``PostgresPushConfigStore``; ``_outbox`` ``PostgresPushOutbox`` (the durable push outbox, schema version 3);
``_leases`` its cross-replica stream leases.
asyncpg is imported with this package: ``relaykit.backends`` imports it only when a PostgreSQL store is used.
"""

from relaykit.backends.postgres._db import StoreInUseError, drop_namespace, redact, upgrade
from relaykit.backends.postgres._outbox import PostgresPushOutbox
from relaykit.backends.postgres._push import PostgresPushConfigStore
from relaykit.backends.postgres._schema import SCHEMA_VERSION
from relaykit.backends.postgres._tasks import PostgresTaskStore

__all__ = [
    "SCHEMA_VERSION",
    "PostgresPushConfigStore",
    "PostgresPushOutbox",
    "PostgresTaskStore",
    "StoreInUseError",
    "drop_namespace",
    "redact",
    "upgrade",
]
