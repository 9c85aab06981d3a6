"""Agents for the scale-out tests (``relaykit serve tests/cluster/agents.py:NAME``).

``paced`` (the default ``agent``): text ``N [DELAY]`` ⇒ one artifact streamed as ``chunk 0`` … ``chunk N-1``
(appended chunks, the last with ``lastChunk``), ``DELAY`` seconds before each chunk after the first (default: the
``CLUSTER_CHUNK_DELAY`` environment variable, else 0), then COMPLETED. Not idempotent: a lost worker's task is
marked FAILED "worker lost".

``resumable``: the same stream from an executor that declares itself ``idempotent`` (a lost worker's task is run
again by another worker). Its artifact id is derived from the task id and its first chunk has ``append`` false, so
a re-run replaces the artifact instead of adding a second one: the finished task holds each chunk exactly once.

Each execution appends one line ``TASK_ID MESSAGE_ID PID`` to the file named by ``CLUSTER_RUN_LOG`` (if set), so a
test can count how often, and in which process, a message ran.
"""

from __future__ import annotations

import asyncio
import os
import re

import relaykit
from relaykit.server import AgentExecutor, EventQueue, RequestContext, TaskUpdater

_SPEC = re.compile(r"^\s*(\d+)(?:\s+(\d+(?:\.\d+)?))?")


def _spec(text: str) -> tuple[int, float]:
    found = _SPEC.match(text)
    default_delay = float(os.environ.get("CLUSTER_CHUNK_DELAY") or 0)
    if found is None:
        return 10, default_delay
    delay = found.group(2)
    return int(found.group(1)), float(delay) if delay is not None else default_delay


def _record_run(task_id: str, message_id: str) -> None:
    path = os.environ.get("CLUSTER_RUN_LOG")
    if path:
        # One short O_APPEND write per run: lines of concurrent processes do not interleave.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{task_id} {message_id} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


@relaykit.agent
async def paced(context):  # type: ignore[no-untyped-def]
    """Streams N chunks, DELAY seconds apart; send ``N [DELAY]``."""
    count, delay = _spec(context.text)
    _record_run(context.task_id, context.message.message_id)
    for i in range(count):
        if i and delay:
            await asyncio.sleep(delay)
        yield f"chunk {i}"


agent = paced  # the file's default target


class Resumable(AgentExecutor):
    """``paced``, idempotent: safe to run again for the same message."""

    idempotent = True

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        count, delay = _spec(context.text)
        _record_run(context.task_id, context.message.message_id)
        await updater.working()
        artifact_id = f"{context.task_id}-out"
        for i in range(count):
            if i and delay:
                await asyncio.sleep(delay)
            await updater.artifact(f"chunk {i}", artifact_id=artifact_id, append=i > 0, last_chunk=i == count - 1)
        await updater.complete()


resumable = Resumable()
