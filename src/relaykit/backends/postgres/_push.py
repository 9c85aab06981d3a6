"""The PostgreSQL push-config store: configs in ``<namespace>_push_configs``, next to the tasks (see the package)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from relaykit._types import TaskPushNotificationConfig
from relaykit.backends._handle import AttachedStore
from relaykit.backends.postgres._db import CONNECT_TIMEOUT, Database, has_nul, rowcount, shared_database

if TYPE_CHECKING:
    from relaykit.backends.postgres._tasks import PostgresTaskStore

__all__ = ["PostgresPushConfigStore"]


class PostgresPushConfigStore(AttachedStore[Database]):
    """Push configs in ``<namespace>_push_configs``, next to the tasks.

    Pass the ``PostgresTaskStore`` to share its pool (the normal case); given a URL it opens its own pool and takes
    no single-process guard (that belongs to the task store). ``put`` of an existing (tenant, owner, task id,
    config id) replaces the config in place: it keeps its position in ``list``.
    """

    def __init__(
        self,
        tasks_or_dsn: PostgresTaskStore | str,
        *,
        namespace: str = "relaykit",
        pool: Any = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self._db = shared_database(
            tasks_or_dsn, namespace, pool=pool, min_size=min_size, max_size=max_size, connect_timeout=connect_timeout
        )
        self._started = False
        p = f"{self._db.namespace}_push_configs"
        # seq (an identity column) numbers configs in insertion order; the upsert leaves it alone, so a replaced
        # config keeps its place, and a config deleted then put again goes last.
        self._sql_put = (
            f"INSERT INTO {p} (tenant, owner, task_id, id, body) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (tenant, owner, task_id, id) DO UPDATE SET body = excluded.body"
        )
        self._sql_get = f"SELECT body FROM {p} WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND id = $4"
        self._sql_list = f"SELECT body FROM {p} WHERE tenant = $1 AND owner = $2 AND task_id = $3 ORDER BY seq"
        self._sql_delete = f"DELETE FROM {p} WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND id = $4"
        self._sql_delete_tasks = (
            f"DELETE FROM {p} AS c USING unnest($1::text[], $2::text[], $3::text[]) AS k(tenant, owner, task_id) "
            "WHERE c.tenant = k.tenant AND c.owner = k.owner AND c.task_id = k.task_id"
        )

    @property
    def namespace(self) -> str:
        """The table prefix (lower case)."""
        return self._db.namespace

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        if has_nul(config.tenant, owner, config.task_id, config.id):
            raise ValueError("the PostgreSQL store cannot hold a push config id or scope containing NUL")
        body = config.to_record()

        async def job(conn: Any) -> None:
            await conn.execute(self._sql_put, config.tenant, owner, config.task_id, config.id, body)

        await self._db.run(job)

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        if has_nul(task_id, config_id, tenant, owner):
            return None

        async def job(conn: Any) -> Any:
            return await conn.fetchval(self._sql_get, tenant, owner, task_id, config_id)

        body = await self._db.run(job)
        return TaskPushNotificationConfig.from_json(body) if body is not None else None

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        if has_nul(task_id, tenant, owner):
            return []

        async def job(conn: Any) -> list[Any]:
            return list(await conn.fetch(self._sql_list, tenant, owner, task_id))

        return [TaskPushNotificationConfig.from_json(row[0]) for row in await self._db.run(job)]

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        if has_nul(task_id, config_id, tenant, owner):
            return False

        async def job(conn: Any) -> str:
            return str(await conn.execute(self._sql_delete, tenant, owner, task_id, config_id))

        return rowcount(await self._db.run(job)) > 0

    async def delete_tasks(self, tasks: builtins.list[tuple[str, str, str]]) -> int:
        """Remove every config of these ``(tenant, owner, task id)`` tasks (one statement); returns the count."""
        keys = [key for key in tasks if not has_nul(*key)]
        if not keys:
            return 0
        tenants, owners, task_ids = ([key[i] for key in keys] for i in range(3))

        async def job(conn: Any) -> str:
            return str(await conn.execute(self._sql_delete_tasks, tenants, owners, task_ids))

        return rowcount(await self._db.run(job))
