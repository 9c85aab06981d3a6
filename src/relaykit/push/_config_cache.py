"""The push configs as the request handler and the push sender see them: the store, with each task's configs cached.

The engine hook looks up a task's configs for every event; ``ConfigCache`` answers from memory, so the hot path does
not read the store, and keeps the cache right across this process's writes and (announced) other replicas' writes.
"""

from __future__ import annotations

import builtins
import collections
from collections.abc import Callable

from relaykit._types import TaskPushNotificationConfig
from relaykit.backends._base import PushConfigStore, StreamKey, delete_task_configs

__all__ = ["ConfigCache", "TaskKey"]

TaskKey = tuple[str, str, str]  # (tenant, owner, task_id)


class ConfigCache:
    """The push-config store as the request handler and the sender see it: writes go through, a task's configs
    are cached (LRU), so the engine hook does not read the store for every event.

    Consistency: every write in this process goes through here and updates the cache; a load that raced with a
    write is not cached. Replicas sharing the store (scale-out) announce each write (``on_change``) and drop the
    entries the others announce (``forget``).
    """

    def __init__(self, store: PushConfigStore, *, size: int = 4096) -> None:
        self.store = store
        self.size = size
        self.on_delete: Callable[[StreamKey], None] | None = None
        self.on_put: Callable[[StreamKey], None] | None = None  # told (tenant, owner, task id, config id)
        self.on_change: Callable[[TaskKey], None] | None = None
        self._entries: collections.OrderedDict[TaskKey, dict[str, TaskPushNotificationConfig]] = (
            collections.OrderedDict()
        )
        self._writes = 0

    async def start(self) -> None:
        await self.store.start()

    async def close(self) -> None:
        await self.store.close()

    def _remember(self, key: TaskKey, configs: dict[str, TaskPushNotificationConfig]) -> None:
        self._entries[key] = configs
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def forget(self, key: TaskKey | None = None) -> None:
        """Drop a task's cached configs (another process changed them), or every cached entry (``None``)."""
        self._writes += 1
        if key is None:
            self._entries.clear()
        else:
            self._entries.pop(key, None)

    def seed(self, key: TaskKey) -> None:
        """A task created just now: it has no configs but those put from now on."""
        if key not in self._entries:
            self._remember(key, {})

    def may_have(self, key: TaskKey) -> bool:
        """Whether the task may have configs, from memory alone: False only when its cached entry is empty (a task
        not cached may have some)."""
        entry = self._entries.get(key)
        return entry is None or bool(entry)

    async def for_task(self, key: TaskKey) -> list[TaskPushNotificationConfig]:
        """The task's configs (cached)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return list(entry.values())
        writes = self._writes
        configs = await self.store.list(key[2], tenant=key[0], owner=key[1])
        if writes == self._writes:
            self._remember(key, {c.id: c for c in configs})
        return configs

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        if self.on_put is not None:
            self.on_put((config.tenant, owner, config.task_id, config.id))
        self._writes += 1
        await self.store.put(config, owner=owner)
        self._writes += 1
        entry = self._entries.get((config.tenant, owner, config.task_id))
        if entry is not None:
            entry[config.id] = config
        if self.on_change is not None:
            self.on_change((config.tenant, owner, config.task_id))

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        entry = self._entries.get((tenant, owner, task_id))
        if entry is not None:
            return entry.get(config_id)
        return await self.store.get(task_id, config_id, tenant=tenant, owner=owner)

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        entry = self._entries.get((tenant, owner, task_id))
        if entry is not None:
            return list(entry.values())
        return await self.store.list(task_id, tenant=tenant, owner=owner)

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        self._writes += 1
        removed = await self.store.delete(task_id, config_id, tenant=tenant, owner=owner)
        self._writes += 1
        entry = self._entries.get((tenant, owner, task_id))
        if entry is not None:
            entry.pop(config_id, None)
        if removed and self.on_delete is not None:
            self.on_delete((tenant, owner, task_id, config_id))
        if removed and self.on_change is not None:
            self.on_change((tenant, owner, task_id))
        return removed

    async def delete_tasks(self, tasks: builtins.list[TaskKey]) -> int:
        """Remove every config of ``tasks`` (retention purged them); returns how many were removed.

        Their cached entries go. Nothing is announced to other replicas (one announcement per task of a purge would
        flood them): a purged task has no events to notify, the API answers "task not found" for it whatever they
        cached, and their caches forget it in LRU order. A stream still queued for such a config finds it gone at
        its next attempt and is discarded (``StreamDelivery._step``).
        """
        self._writes += 1
        removed = await delete_task_configs(self.store, tasks)
        self._writes += 1
        for key in tasks:
            self._entries.pop(key, None)
        return removed
