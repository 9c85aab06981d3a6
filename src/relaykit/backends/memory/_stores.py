"""In-memory reference implementations of ``TaskStore`` (with ``TaskClaims``) and ``PushConfigStore``.

Tasks are held as compact ProtoJSON bytes, not live model graphs: a stored task costs its encoded size plus a small
tuple, well under the official SDK's ~1.9 KB per task, and a reader can never mutate the stored copy.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import time
from datetime import datetime
from typing import Final

from relaykit._enums import TaskState
from relaykit._types import TaskPushNotificationConfig
from relaykit.backends._base import (
    Claim,
    ConflictError,
    DeliveryHealth,
    ListPage,
    Orphan,
    OutboxChanges,
    OutboxEntry,
    StreamKey,
    TaskQuery,
    TaskRecord,
    failed_orphan,
    from_epoch,
    stored_task,
)
from relaykit.backends._paging import decode_token, encode_token, listed_tasks, timestamp_us

__all__ = ["MemoryPushConfigStore", "MemoryPushOutbox", "MemoryTaskStore"]

_ACTIVE = (TaskState.SUBMITTED, TaskState.WORKING)
_TERMINAL = (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED)
_INTERRUPTED = (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED)


# A stored task is a plain tuple of atomic values (bytes, str, int, a datetime, None), never an object of a class of
# ours: CPython stops tracking such a tuple in the cyclic garbage collector the first time a collection sees it, so
# a store holding many tasks adds nothing to the full collections (a class instance, slotted or not, stays tracked:
# with 100k tasks, each full collection walked them, ~0.2 s, several times a minute under load). Rows are replaced,
# never changed in place. The state is kept as its plain string value (an enum member is itself tracked, and would
# keep its tuple tracked); TaskState members compare equal to it.
_Row = tuple[bytes, str, str, str, str, str, "datetime | None", int, int, "str | None", "bytes | None"]
_BODY: Final = 0
_TENANT: Final = 1
_OWNER: Final = 2
_CONTEXT: Final = 3
_STATE: Final = 4
_ID: Final = 5
_STAMP: Final = 6
_VERSION: Final = 7
_SEQ: Final = 8
_WORKER: Final = 9
_REQUEST: Final = 10


def _new_row(record: TaskRecord, version: int, worker: str | None, request: bytes | None) -> _Row:
    task = record.task
    status = task.status
    return (
        record.body if record.body is not None else task.to_json(),
        record.tenant,
        record.owner,
        task.context_id,
        status.state._value_,
        task.id,
        status.timestamp,
        version,
        record.event_seq,
        worker,
        request,
    )


def _changed(row: _Row, index: int, value: object) -> _Row:
    """``row`` with one field replaced."""
    return (*row[:index], value, *row[index + 1 :])  # type: ignore[return-value]


def _key(row: _Row) -> tuple[int, str]:
    """``sort_key`` of the stored task (computed when needed: most rows are overwritten before anyone lists them)."""
    return (timestamp_us(row[_STAMP]), row[_ID])


class MemoryTaskStore:
    """Tasks in a dict; nothing survives the process.

    Claims (``TaskClaims``) are in-process: worker liveness runs on ``time.monotonic()``, the unstarted-task age in
    ``orphans`` on the wall clock (status timestamps are wall-clock times).

    >>> store = MemoryTaskStore()
    """

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        # worker id -> monotonic time its heartbeat expires
        self._workers: dict[str, float] = {}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def _row(self, task_id: str, tenant: str, owner: str) -> _Row | None:
        row = self._rows.get(task_id)
        if row is None or row[_TENANT] != tenant or row[_OWNER] != owner:
            return None
        return row

    async def get(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> TaskRecord | None:
        row = self._row(task_id, tenant, owner)
        if row is None:
            return None
        body = row[_BODY]
        return TaskRecord(stored_task(task_id, body), row[_TENANT], row[_OWNER], row[_VERSION], row[_SEQ], read=body)

    async def save(self, record: TaskRecord) -> None:
        self._write(record)

    def _write(self, record: TaskRecord, claimed: bool = False, worker: str | None = None) -> None:
        """``save``; with ``claimed``, the row's claimant becomes ``worker`` in the same row (one tuple per write)."""
        current = self._rows.get(record.task.id)
        if record.version == 0:
            if current is not None:
                raise ConflictError(f"task {record.task.id} already exists")
        elif current is None or current[_VERSION] != record.version:
            raise ConflictError(f"task {record.task.id} was changed by another writer")
        elif current[_TENANT] != record.tenant or current[_OWNER] != record.owner:
            raise ConflictError(f"task {record.task.id} belongs to another scope")
        if current is None:
            self._rows[record.task.id] = _new_row(record, 1, worker, record.request)
        else:
            # The claimant and the queued request are kept across saves (written on insert and by claims only).
            kept = worker if claimed else current[_WORKER]
            self._rows[record.task.id] = _new_row(record, record.version + 1, kept, current[_REQUEST])
        record.version += 1

    async def list(self, query: TaskQuery) -> ListPage:
        after = decode_token(query.page_token) if query.page_token else None
        min_ts = timestamp_us(query.status_after) if query.status_after is not None else None
        matches: list[tuple[tuple[int, str], _Row]] = []
        for row in self._rows.values():
            if row[_TENANT] != query.tenant or row[_OWNER] != query.owner:
                continue
            if query.context_id and row[_CONTEXT] != query.context_id:
                continue
            if query.state is not None and row[_STATE] != query.state:
                continue
            key = _key(row)
            if min_ts is not None and key[0] < min_ts:
                continue
            matches.append((key, row))
        matches.sort(key=lambda item: item[0], reverse=True)
        start = 0
        if after is not None:
            # Keys are sorted descending; the page starts at the first key strictly below the cursor.
            start = next((i for i, (key, _) in enumerate(matches) if key < after), len(matches))
        page = matches[start : start + query.page_size]
        more = start + query.page_size < len(matches)
        return ListPage(
            tasks=listed_tasks(
                ((key[1], row[_BODY]) for key, row in page), query.history_length, query.include_artifacts
            ),
            next_page_token=encode_token(page[-1][0]) if more and page else "",
            total_size=len(matches),
        )

    async def delete(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        if self._row(task_id, tenant, owner) is None:
            return False
        del self._rows[task_id]
        return True

    async def fail_orphans(self, reason: str, *, failed: builtins.list[TaskRecord] | None = None) -> int:
        count = 0
        for task_id, row in list(self._rows.items()):
            if row[_STATE] in _ACTIVE:
                task = failed_orphan(task_id, row[_CONTEXT], row[_BODY], reason)
                tenant, owner, version, seq = row[_TENANT], row[_OWNER], row[_VERSION] + 1, row[_SEQ] + 1
                record = TaskRecord(task, tenant, owner, 0, seq)
                self._rows[task_id] = _new_row(record, version, row[_WORKER], row[_REQUEST])
                if failed is not None:
                    failed.append(TaskRecord(task.model_copy(deep=True), tenant, owner, version, seq))
                count += 1
        return count

    async def purge(
        self,
        before: datetime,
        *,
        interrupted: bool = False,
        purged: builtins.list[tuple[str, str, str]] | None = None,
    ) -> int:
        limit = timestamp_us(before)
        states = _INTERRUPTED if interrupted else _TERMINAL
        doomed = [k for k, row in self._rows.items() if row[_STATE] in states and _key(row)[0] < limit]
        for task_id in doomed:
            row = self._rows.pop(task_id)
            if purged is not None:
                purged.append((row[_TENANT], row[_OWNER], task_id))
        return len(doomed)

    # --- TaskClaims ---------------------------------------------------------------------------------------------

    def _alive(self, worker: str) -> bool:
        expires = self._workers.get(worker)
        return expires is not None and expires > time.monotonic()

    async def heartbeat(self, worker: str, ttl: float) -> None:
        if not math.isfinite(ttl):
            raise ValueError(f"heartbeat ttl must be a finite number of seconds, not {ttl!r}")
        self._workers[worker] = time.monotonic() + ttl

    async def retire(self, worker: str) -> None:
        self._workers.pop(worker, None)

    async def claim(
        self, task_id: str, worker: str, *, tenant: str = "", owner: str = "anonymous", request: bytes | None = None
    ) -> Claim | None:
        row = self._row(task_id, tenant, owner)
        if row is None:
            return None
        previous = row[_WORKER]
        if previous is not None and previous != worker and self._alive(previous):
            return None
        # Fencing: the version moves, so a save by the previous holder (read before this claim) conflicts.
        version = row[_VERSION] + 1
        kept = request if request is not None else row[_REQUEST]
        row = self._rows[task_id] = (*row[:_VERSION], version, row[_SEQ], worker, kept)
        record = TaskRecord(stored_task(task_id, row[_BODY]), row[_TENANT], row[_OWNER], version, row[_SEQ])
        record.request = kept
        return Claim(record, previous)

    async def release(self, task_id: str, worker: str) -> None:
        row = self._rows.get(task_id)
        if row is not None and row[_WORKER] == worker:
            self._rows[task_id] = _changed(row, _WORKER, None)

    async def save_claimed(self, record: TaskRecord, worker: str | None) -> None:
        if record.version == 0:
            raise ValueError(
                f"task {record.task.id}: a claimed task is stored already (save_claimed updates, never inserts)"
            )
        self._write(record, True, worker)  # the write and the claim change are one step

    async def insert_claimed(self, record: TaskRecord, worker: str, *, told: bool = True) -> None:
        if record.version != 0:
            raise ValueError(f"task {record.task.id}: insert_claimed stores a new task (version 0)")
        self._write(record, True, worker)  # the insert and the claim are one step

    async def claimant(self, task_id: str) -> str | None:
        row = self._rows.get(task_id)
        return row[_WORKER] if row is not None else None

    # builtins.list: in this class body ``list`` is the ListTasks method.
    async def orphans(self, *, unstarted_after: float, limit: int = 100) -> builtins.list[Orphan]:
        stale_before = round((time.time() - unstarted_after) * 1_000_000)
        found: list[tuple[tuple[int, str], Orphan]] = []
        for task_id, row in self._rows.items():
            if row[_STATE] not in _ACTIVE:
                continue
            worker, key = row[_WORKER], _key(row)
            if worker is not None:
                if self._alive(worker):
                    continue
            elif key[0] >= stale_before:
                continue
            found.append((key, Orphan(task_id, row[_TENANT], row[_OWNER], worker)))
        found.sort(key=lambda item: item[0])
        return [orphan for _, orphan in found[: max(limit, 0)]]


class MemoryPushConfigStore:
    """Push configs in a dict, keyed by (tenant, owner, task id), insertion-ordered."""

    def __init__(self) -> None:
        self._configs: dict[tuple[str, str, str], dict[str, bytes]] = {}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def any_configs(self) -> bool:
        """Whether any config is stored (the push sender hooks the engine only once one may exist)."""
        return bool(self._configs)

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        self._configs.setdefault((config.tenant, owner, config.task_id), {})[config.id] = config.to_record()

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        body = self._configs.get((tenant, owner, task_id), {}).get(config_id)
        return TaskPushNotificationConfig.from_json(body) if body is not None else None

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        return [
            TaskPushNotificationConfig.from_json(b) for b in self._configs.get((tenant, owner, task_id), {}).values()
        ]

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        configs = self._configs.get((tenant, owner, task_id))
        if not configs or config_id not in configs:
            return False
        del configs[config_id]
        if not configs:
            del self._configs[(tenant, owner, task_id)]
        return True

    async def delete_tasks(self, tasks: builtins.list[tuple[str, str, str]]) -> int:
        """Remove every config of these ``(tenant, owner, task id)`` tasks; returns how many were removed."""
        return sum(len(self._configs.pop(key, ())) for key in tasks)


class _Health:
    __slots__ = ("consecutive", "delivered", "failures", "last_error", "last_failure", "last_success", "url")

    def __init__(self) -> None:
        self.url = ""
        self.delivered = 0
        self.failures = 0
        self.consecutive = 0
        self.last_success: float | None = None
        self.last_failure: float | None = None
        self.last_error = ""


class MemoryPushOutbox:
    """The push outbox in dicts: pending entries per stream in ``seq`` order, dead letters, health counters.

    Nothing survives the process (``durable`` is false): a commit is an in-process append.
    """

    durable = False

    def __init__(self) -> None:
        self._pending: dict[StreamKey, dict[str, OutboxEntry]] = {}
        self._dead: dict[StreamKey, dict[str, OutboxEntry]] = {}
        self._health: dict[StreamKey, _Health] = {}
        self._claims: dict[StreamKey, str] = {}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def commit(self, changes: OutboxChanges) -> None:
        # Copies in: the caller keeps mutating its entries (attempt counts) after the commit.
        for stream in changes.discarded:
            self._pending.pop(stream, None)
        for entry in changes.added:
            self._pending.setdefault(entry.stream, {})[entry.event_id] = dataclasses.replace(entry)
        for entry in changes.delivered:
            self._remove(entry)
        for entry in changes.retried:
            stored = self._pending.get(entry.stream, {}).get(entry.event_id)
            if stored is not None:
                stored.attempts = entry.attempts
                stored.next_attempt_at = entry.next_attempt_at
                stored.last_error = entry.last_error
        for entry in changes.dead:
            self._remove(entry)
            dead = dataclasses.replace(entry)
            if dead.dead_at is None:
                dead.dead_at = time.time()
            self._dead.setdefault(entry.stream, {})[entry.event_id] = dead
        for outcome in changes.outcomes:
            health = self._health.get(outcome.stream)
            if health is None:
                health = self._health[outcome.stream] = _Health()
            if outcome.url:
                health.url = outcome.url
            if outcome.ok:
                health.delivered += 1
                health.consecutive = 0
                health.last_success = outcome.at
            else:
                health.failures += 1
                health.consecutive += 1
                health.last_failure = outcome.at
                health.last_error = outcome.error

    def _remove(self, entry: OutboxEntry) -> None:
        entries = self._pending.get(entry.stream)
        if entries is not None:
            entries.pop(entry.event_id, None)
            if not entries:
                del self._pending[entry.stream]

    async def pending(self) -> list[OutboxEntry]:
        out: list[OutboxEntry] = []
        for stream in sorted(self._pending):
            out.extend(dataclasses.replace(e) for e in sorted(self._pending[stream].values(), key=lambda e: e.seq))
        return out

    async def claim(self, stream: StreamKey, worker: str) -> bool:
        holder = self._claims.setdefault(stream, worker)
        return holder == worker

    async def release(self, stream: StreamKey, worker: str) -> None:
        if self._claims.get(stream) == worker:
            del self._claims[stream]

    def _streams_of(self, task_id: str, tenant: str, owner: str) -> list[StreamKey]:
        keys = {*self._health, *self._pending, *self._dead}
        return sorted(k for k in keys if k[0] == tenant and k[1] == owner and k[2] == task_id)

    async def health(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[DeliveryHealth]:
        out = []
        for stream in self._streams_of(task_id, tenant, owner):
            row = self._health.get(stream) or _Health()
            out.append(
                DeliveryHealth(
                    task_id=task_id,
                    config_id=stream[3],
                    tenant=tenant,
                    owner=owner,
                    url=row.url,
                    delivered=row.delivered,
                    failures=row.failures,
                    consecutive_failures=row.consecutive,
                    last_success=from_epoch(row.last_success),
                    last_failure=from_epoch(row.last_failure),
                    last_error=row.last_error,
                    pending=len(self._pending.get(stream, ())),
                    dead=len(self._dead.get(stream, ())),
                )
            )
        return out

    async def purge(self, before: float) -> tuple[int, int]:
        dead = 0
        for stream, entries in list(self._dead.items()):
            for event_id in [k for k, e in entries.items() if (e.dead_at or 0.0) < before]:
                del entries[event_id]
                dead += 1
            if not entries:
                del self._dead[stream]
        idle = [
            stream
            for stream, row in self._health.items()
            if stream not in self._pending
            and stream not in self._dead
            and max(row.last_success or 0.0, row.last_failure or 0.0) < before
        ]
        for stream in idle:
            del self._health[stream]
        return dead, len(idle)

    async def dead_letters(self, task_id: str, *, tenant: str = "", owner: str = "anonymous") -> list[OutboxEntry]:
        out: list[OutboxEntry] = []
        for stream in self._streams_of(task_id, tenant, owner):
            out.extend(dataclasses.replace(e) for e in self._dead.get(stream, {}).values())
        return sorted(out, key=lambda e: (e.dead_at or 0.0, e.seq))
