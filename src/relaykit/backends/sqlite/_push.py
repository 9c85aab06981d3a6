"""The SQLite push-config store: configs in ``<namespace>_push_configs``, in the task store's file (see the package)."""

from __future__ import annotations

import builtins
import os
import sqlite3

from relaykit._types import TaskPushNotificationConfig
from relaykit.backends._handle import AttachedStore
from relaykit.backends.sqlite._db import Database, transaction
from relaykit.backends.sqlite._tasks import SQLiteTaskStore

__all__ = ["SQLitePushConfigStore"]


class SQLitePushConfigStore(AttachedStore[Database]):
    """Push configs in the same SQLite file as the tasks.

    Pass the ``SQLiteTaskStore`` to share its connection, thread and owner lock (the normal case); given a
    path it opens the file itself, and then no task store in this process may hold that file. ``put`` of an
    existing (tenant, owner, task id, config id) replaces the config in place: it keeps its position in
    ``list``.
    """

    def __init__(self, tasks_or_path: SQLiteTaskStore | str | os.PathLike[str], *, namespace: str = "relaykit") -> None:
        if isinstance(tasks_or_path, SQLiteTaskStore):
            self._db = tasks_or_path._db
        else:
            self._db = Database(os.fspath(tasks_or_path), namespace)
        self._started = False
        p = f"{self._db.namespace}_push_configs"
        # seq numbers configs per task in insertion order; the upsert leaves seq alone, so a replaced config
        # keeps its place. The subquery reads the primary-key index prefix only.
        self._sql_put = (
            f"INSERT INTO {p} (tenant, owner, task_id, id, seq, body) VALUES (?, ?, ?, ?, "
            f"(SELECT COALESCE(MAX(seq), 0) + 1 FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ?), ?) "
            "ON CONFLICT (tenant, owner, task_id, id) DO UPDATE SET body = excluded.body"
        )
        self._sql_get = f"SELECT body FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ? AND id = ?"
        self._sql_list = f"SELECT body FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ? ORDER BY seq"
        self._sql_delete = f"DELETE FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ? AND id = ?"
        self._sql_any = f"SELECT 1 FROM {p} LIMIT 1"
        self._sql_delete_task = f"DELETE FROM {p} WHERE tenant = ? AND owner = ? AND task_id = ?"

    @property
    def path(self) -> str:
        """The absolute path of the database file."""
        return self._db.path

    async def any_configs(self) -> bool:
        """Whether any config is stored (the push sender hooks the engine only once one may exist)."""

        def job(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql_any).fetchone() is not None

        return await self._db.run(job)

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        body = config.to_record()
        scope = (config.tenant, owner, config.task_id)

        def job(conn: sqlite3.Connection) -> None:
            conn.execute(self._sql_put, (*scope, config.id, *scope, body))

        await self._db.run(job)

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        def job(conn: sqlite3.Connection) -> TaskPushNotificationConfig | None:
            row = conn.execute(self._sql_get, (tenant, owner, task_id, config_id)).fetchone()
            return TaskPushNotificationConfig.from_json(row[0]) if row is not None else None

        return await self._db.run(job)

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        def job(conn: sqlite3.Connection) -> list[TaskPushNotificationConfig]:
            rows = conn.execute(self._sql_list, (tenant, owner, task_id)).fetchall()
            return [TaskPushNotificationConfig.from_json(row[0]) for row in rows]

        return await self._db.run(job)

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql_delete, (tenant, owner, task_id, config_id)).rowcount > 0

        return await self._db.run(job)

    async def delete_tasks(self, tasks: builtins.list[tuple[str, str, str]]) -> int:
        """Remove every config of these ``(tenant, owner, task id)`` tasks (one transaction); returns the count."""

        def job(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.executemany(self._sql_delete_task, tasks).rowcount

        return await self._db.run(job) if tasks else 0
