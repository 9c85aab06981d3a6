"""The embedded SQLite store: tasks and push configs in one file, owned by one process.

Invariants (on top of the ``TaskStore`` / ``PushConfigStore`` rules in ``_base``):

* **One owner.** ``start()`` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<file>.lock`` and holds it until
  ``close()``; a second process (or a second store object in this process) on the same file gets
  ``StoreLockedError`` naming the file. The kernel drops the lock when the process dies, so a crash never
  leaves a stale lock behind, and the lock file itself is never deleted (unlinking it would let two owners
  lock two different inodes). The database file itself is flocked too, so the same file reached by another name
  (a hard link, another mount) is refused as well: the lock is on the file, not its path. POSIX only.
* **One connection, one thread.** Every statement runs on the store's single worker thread
  (``ThreadPoolExecutor(max_workers=1)``), so calls execute one at a time in the order they were made, the
  connection is never shared between threads, and ``close()`` runs after every call already made.
  ``SQLitePushConfigStore(task_store)`` shares the task store's file, connection, thread and lock; the file
  is closed when the last of the two closes.
* **Durable on acknowledgement.** ``journal_mode=WAL`` with ``synchronous=NORMAL``: a call that returned
  survives a crash of the process (an OS crash or power loss may lose the last transactions, never corrupt
  the file); ``synchronous="full"`` (URL ``?synchronous=full``) fsyncs every commit, so it survives those too.
  ``busy_timeout=5000`` makes outside readers (``sqlite3`` CLI, backups) wait instead of failing.
* **Atomic writes.** A ``save`` is one statement; ``fail_orphans`` is one explicit transaction; after a crash a
  write is either all there or not at all. Saves made while earlier ones are on the thread go together in one
  transaction (``Database.write``: one commit for many under load, each caller answered after it, a failing
  statement undone alone); a lone save is its own implicit transaction.
* **Same order and cursor as every store.** ``status_ts`` is ``_paging.sort_key`` of the task given to
  ``save``; ``list`` filters, counts and pages by the keyset ``(status_ts, id) < cursor`` in SQL; page tokens
  are ``_paging``'s, so a token means the same to every backend. Ids compare as UTF-8 bytes (SQLite's
  BINARY collation), the same order as Python's ``str`` comparison.
* **Namespaced schema.** Tables are ``<namespace>_tasks``, ``<namespace>_push_configs``, the push outbox
  ``<namespace>_push_outbox`` / ``<namespace>_push_health``, and ``<namespace>_schema`` (its version); the
  schema is created or migrated on start in one transaction, and a file written by a newer relaykit is refused
  rather than misread.
* **Owed push notifications.** A state whose notification is owed (``TaskRecord.push_owed``) is stored with its
  marker by the same statement; the outbox's commit of those notifications clears it in its transaction, so the
  file never holds the state without either the marker or the notifications (``relaykit.push._owed``). The marker's
  time (``push_owed_at``) goes with it, so a live process's sweep recovers only the markers a failed hook left.
* The directory of the file must exist: a typo in ``--store`` is an error, not a new directory tree.

A cancelled call may still complete on the worker thread (a statement cannot be interrupted half-way); the
caller's ``TaskRecord.version`` is then behind and its next ``save`` raises ``ConflictError``, which is safe.

Modules: this one states the invariants and exports the public names; ``_db`` the owner lock, the connection, its
thread and the migration on open; ``_schema`` the schema version and migrations; ``_tasks`` ``SQLiteTaskStore``;
``_push`` ``SQLitePushConfigStore``; ``_outbox`` ``SQLitePushOutbox``.
"""

from relaykit.backends._base import StoreLockedError
from relaykit.backends.sqlite._outbox import SQLitePushOutbox
from relaykit.backends.sqlite._push import SQLitePushConfigStore
from relaykit.backends.sqlite._schema import MIGRATIONS, SCHEMA_VERSION
from relaykit.backends.sqlite._tasks import SQLiteTaskStore

__all__ = ["SCHEMA_VERSION", "SQLitePushConfigStore", "SQLitePushOutbox", "SQLiteTaskStore", "StoreLockedError"]

_MIGRATIONS = MIGRATIONS  # the name tests know the migrations by
