"""Owed notifications: a task state the store holds whose push notifications never reached the outbox.

Why: the engine stores a task's new state, publishes it, and only then does the push hook put the state's
notifications in the outbox. A process killed in between (SIGKILL, power loss) lost them for good: on restart the
task is terminal, nothing tells its webhooks, and a receiver waiting for the terminal notification waits forever.

Invariants:

* a state change of a task that may have push configs (``PushSender.owes``: an inline config about to be bound, a
  task whose cached configs are not empty, or one whose configs are not cached) is stored with an owed marker, the
  event seq it is published under (``TaskRecord.push_owed``), by the very statement that stores the state: no
  instant has the state durable without the marker. A task known to have no configs (the common case, and the
  benchmarked one) writes none: same statements, same columns as without markers;
* the push hook of that event adds the state's outbox entries and then settles the marker into the same batch
  (``OutboxWriter.settle``), so one outbox transaction commits the entries and clears the marker; a newer state's
  marker is never cleared by an older one's commit (``push_owed <= seq``);
* a marker the hook did not settle (the process died first, or the hook failed) is turned by ``recover_owed`` into a
  ``{"task": ...}`` snapshot of the task as stored (the form a rate-gated notification already takes, ``_rate``), one
  entry per config (the 0.3 body for a 0.3 config), committed with the marker's clearing. A crash in the middle
  redoes it (at-least-once, a duplicate at worst), and only what the store holds is ever notified;
* recovery runs when the sender starts (one process: every marker is a dead process's; ``TaskEngine.recover`` marks
  the tasks it fails after that, and its own hook settles them) and, with an outbox shared by replicas, in the
  sweep, for markers older than the lease (their writer died, or it could not commit them in all that time);
* a row holds one marker: a newer state replaces it, so what is owed is where the task is now, which the snapshot
  shows, not every state it went through.

Why a marker rather than the outbox rows in the task's own transaction: the entries depend on things the store
cannot see (each config's protocol version, suspensions, the notification gate, the event's encoded body), and the
task is written by many paths (two stores, combined and put-off writes, claims, ``fail_orphans``). A marker is one
column in the write of a task that has push configs, cleared by one set-based statement of an outbox commit the
hook pays anyway; and the snapshot it turns into needs only what the row holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from relaykit._types import stream_json
from relaykit._v03 import push_body
from relaykit.backends._base import OutboxEntry, PushOutbox
from relaykit.push._config_cache import ConfigCache
from relaykit.push._outbox import OutboxWriter
from relaykit.push._suspend import Suspensions

__all__ = ["recover_owed"]

log = logging.getLogger("relaykit.push")

BATCH = 500  # markers read (and their notifications committed) per round


async def recover_owed(
    outbox: PushOutbox,
    configs: ConfigCache,
    writer: OutboxWriter,
    suspensions: Suspensions,
    *,
    age: float,
    flush_timeout: float,
    rounds: int = 1,
) -> int:
    """Queue a snapshot for every config of each task whose marker is at least ``age`` seconds old, and clear the
    markers with them; at most ``rounds`` rounds of ``BATCH`` tasks. Returns how many tasks were owed."""
    owed = getattr(outbox, "owed", None)
    if owed is None:
        return 0
    total = 0
    for _ in range(rounds):
        records = await owed(age, BATCH)
        if not records:
            break
        now = time.time()
        for record in records:
            task = record.task
            key = (record.tenant, record.owner, task.id)
            found = await configs.for_task(key)
            # From here to the settle nothing is awaited: the task's entries and its marker's clearing are in one
            # batch, so one commit.
            snapshot = stream_json(task, record.body)
            legacy: bytes | None = None
            for config in found:
                if suspensions and suspensions.suspended((*key, config.id)):
                    continue  # its receiver keeps failing: not attempted (as the hook does)
                body = snapshot
                if config.protocol_version:
                    legacy = legacy if legacy is not None else push_body(task)
                    body = legacy
                writer.add(
                    OutboxEntry(
                        event_id=uuid.uuid4().hex,
                        task_id=task.id,
                        config_id=config.id,
                        seq=record.event_seq,
                        body=body,
                        tenant=record.tenant,
                        owner=record.owner,
                        created_at=now,
                    )
                )
            writer.settle((*key, record.push_owed))
        total += len(records)
        log.warning("queued the owed push notification(s) of %d task(s) as snapshots", len(records))
        try:
            await asyncio.wait_for(asyncio.shield(writer.flush()), flush_timeout)
        except TimeoutError:
            # Still queued; the markers stay until it commits, so the next round would read them again.
            log.warning("push outbox commit is slow; the owed notifications are still queued")
            break
        if len(records) < BATCH:
            break
    return total
