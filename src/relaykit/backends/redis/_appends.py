"""Batched appends to the task event streams: the events published in one pass of the event loop go out in one
pipeline (an ``XADD`` each, one ``PEXPIRE`` per stream), and a pipeline is in flight at a time, so events published
while one is on the wire go out together in the next.

An event reaches this process's taps only once its append landed (a client never sees an event the log could lose
to a crash of this process). A publisher waits for its own append, except for artifact chunks (``wait=False``),
which return at once while fewer than ``BACKLOG`` of the task's appends are unwritten: a streaming agent is not held
to one round trip per chunk. A failed append fails the task's later appends too (never a gap in its log) and is
raised by its next publish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relaykit.backends._base import ConflictError
from relaykit.backends.redis._hot import Command
from relaykit.backends.redis._retry import retrying

__all__ = ["BACKLOG", "Appends"]

BACKLOG = 256  # unwritten appends of one task before its publisher waits (back-pressure, e.g. during an outage)


@dataclass(slots=True)
class _Entry:
    task_id: str
    key: str
    seq: int
    fields: dict[bytes, bytes | str]
    terminal: bool
    deliver: Callable[[], None]
    done: asyncio.Future[None]


class Appends:
    """The appends of one process, written in order, one pipeline at a time."""

    def __init__(self, bus: Any) -> None:
        self._bus = bus  # its client, hot line, maxlen, expiries and ``retrying`` policy
        self._queue: list[_Entry] = []
        self._unwritten: dict[str, int] = {}
        self._last: dict[str, asyncio.Future[None]] = {}  # each task's newest unwritten append
        self._failed: dict[str, BaseException] = {}
        self._writer: asyncio.Task[None] | None = None

    def check(self, task_id: str) -> None:
        """Raise the error of an earlier append of the task that failed (a later one must not leave a gap)."""
        error = self._failed.get(task_id)
        if error is not None:
            raise error

    def forget(self, task_id: str) -> None:
        """A new execution of the task starts from what the log holds: earlier failures are its past."""
        self._failed.pop(task_id, None)

    async def add(
        self,
        task_id: str,
        key: str,
        seq: int,
        fields: dict[bytes, bytes | str],
        terminal: bool,
        deliver: Any,
        wait: bool,
    ) -> None:
        self.check(task_id)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Entry(task_id, key, seq, fields, terminal, deliver, done))
        self._unwritten[task_id] = self._unwritten.get(task_id, 0) + 1
        self._last[task_id] = done
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_all(), name="relaykit-redis-appends")
        if wait or self._unwritten[task_id] > BACKLOG:
            await done
        else:
            done.add_done_callback(_retrieved)

    async def settle(self, task_id: str) -> None:
        """Wait until the task's appends queued so far are written (or failed): before reading its log's top."""
        last = self._last.get(task_id)
        if last is not None and not last.done():
            await asyncio.wait({last})

    async def drain(self, within: float) -> None:
        """Wait (bounded) for the appends queued so far (shutdown)."""
        if self._writer is not None:
            await asyncio.wait({self._writer}, timeout=within)

    async def _write_all(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._write(batch)
        finally:
            self._writer = None

    async def _write(self, batch: list[_Entry]) -> None:
        live = [entry for entry in batch if entry.task_id not in self._failed]
        errors: dict[int, BaseException] = {}
        attempts = 0

        async def job() -> dict[int, BaseException]:
            nonlocal attempts
            attempts += 1
            return await self._pipeline(live, retried=attempts > 1)

        if live:
            try:
                errors = await retrying(self._bus.url, self._bus.outage_timeout, job)
            except BaseException as exc:
                errors = {id(entry): exc for entry in live}
        for entry in batch:
            count = self._unwritten.get(entry.task_id, 1) - 1
            if count > 0:
                self._unwritten[entry.task_id] = count
            else:
                self._unwritten.pop(entry.task_id, None)
                self._last.pop(entry.task_id, None)
            error = self._failed.get(entry.task_id) or errors.get(id(entry))
            if error is None:
                entry.deliver()
                if not entry.done.done():
                    entry.done.set_result(None)
                continue
            self._failed[entry.task_id] = error
            if not entry.done.done():
                entry.done.set_exception(error)

    async def _pipeline(self, entries: list[_Entry], *, retried: bool) -> dict[int, BaseException]:
        """One round trip for the batch; the errors of the entries that did not land, by ``id(entry)``."""
        bus = self._bus
        commands: list[Command] = []
        expire: dict[str, bool] = {}
        for entry in entries:
            command: list[bytes | str | int] = ["XADD", entry.key, "MAXLEN", "~", bus.maxlen, f"{entry.seq}-0"]
            for name, value in entry.fields.items():
                command += (name, value)
            commands.append(command)
            expire[entry.key] = entry.terminal  # the stream's last event in the batch sets its expiry
        for key, terminal in expire.items():
            commands.append(("PEXPIRE", key, int((bus.ttl if terminal else bus.live_ttl) * 1000)))
        # On the hot path's own connection, with the other hot commands of this loop pass.
        results = await bus.hot.run(commands)
        errors: dict[int, BaseException] = {}
        failed: set[str] = set()
        for entry, result in zip(entries, results, strict=False):
            if entry.task_id in failed:
                errors[id(entry)] = ConflictError(f"task {entry.task_id}: an earlier event could not be appended")
                continue
            if not isinstance(result, BaseException):
                continue
            if "equal or smaller" in str(result):
                # A retry of an append that did land before the connection broke is not a conflict.
                if retried and await bus.client.xrange(entry.key, min=f"{entry.seq}-0", max=f"{entry.seq}-0"):
                    continue
                result = ConflictError(
                    f"task {entry.task_id}: event {entry.seq} is already in the log (another process runs this task)"
                )
            errors[id(entry)] = result
            failed.add(entry.task_id)
        return errors


def _retrieved(done: asyncio.Future[None]) -> None:
    # An unawaited append's failure is raised by the task's next publish, not logged as never retrieved.
    if not done.cancelled():
        done.exception()
