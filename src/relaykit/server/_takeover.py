"""Taking over a task whose runner is gone (scale-out, ``server._cluster``).

A worker that has just claimed a task from a dead runner, or one nobody ever started (its queue entry was lost), or
one its own execution left unsettled while the store was down, decides here what becomes of it:

* a task no longer SUBMITTED/WORKING, or running here already, is only released;
* a never-started task (SUBMITTED, first message only, no previous claimant), or any task of an ``idempotent``
  executor, runs (again) from the message as it was queued (``TaskRecord.request``), else from the last user message;
* any other task is marked FAILED "worker lost" (after an execution was under way, running it again could repeat
  effects the agent had).

Either way the claim is released when nothing runs the task here. Lease takeovers and lost workers are counted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from relaykit._enums import Role, TaskState
from relaykit._errors import ResourceExhaustedError, ServiceUnavailableError
from relaykit._requests import SendMessageRequest
from relaykit._types import Message, Task
from relaykit.backends._base import Claim
from relaykit.server._context import CallContext
from relaykit.server._front import decode_call, requeued

if TYPE_CHECKING:
    from relaykit.server._cluster import Cluster

__all__ = ["ACTIVE", "take_over"]

log = logging.getLogger("relaykit.cluster")

ACTIVE = (TaskState.SUBMITTED, TaskState.WORKING)


def _last_user_message(task: Task) -> Message | None:
    for message in reversed(task.history):
        if message.role is Role.USER:
            return message
    return None


def _count(cluster: Cluster, name: str) -> None:
    tel = cluster.engine.telemetry
    if tel is not None and tel.metrics is not None:
        tel.metrics.add(name)


async def take_over(cluster: Cluster, claim: Claim) -> None:
    """A task this worker just claimed from a dead (or no) runner: start, re-run or fail it."""
    record = claim.record
    task = record.task
    if task.status.state not in ACTIVE or task.id in cluster.engine.registry:
        await cluster._release(task.id)
        return
    if claim.previous is not None:
        _count(cluster, "a2a.queue.lease_takeovers")
    message = _last_user_message(task)
    unstarted = task.status.state is TaskState.SUBMITTED and len(task.history) == 1
    if message is not None and ((unstarted and claim.previous is None) or cluster.engine.executor.idempotent):
        # The message as it was queued (configuration, metadata, extensions, forwarded headers), when stored.
        item = requeued(record, fresh=unstarted)
        if item is not None:
            request = SendMessageRequest.model_validate_json(item.request)
            call = decode_call(item.call)
        else:
            request = SendMessageRequest(tenant=record.tenant, message=message)
            call = CallContext(user=record.owner, tenant=record.tenant)
        log.warning(
            "task %s: %s",
            task.id,
            "starting (its queue entry was lost)"
            if claim.previous is None
            else f"re-running after worker {claim.previous} was lost",
        )
        try:
            cluster.engine.admit_claimed(request, call, record, fresh=unstarted, rerun=not unstarted)
            return
        except (ResourceExhaustedError, ServiceUnavailableError) as exc:
            # This worker is full or stopping: leave the task to the next sweep (here or elsewhere).
            log.info("task %s: not taken over now: %s", task.id, exc)
            await cluster._release(task.id)
            return
    log.warning("task %s: worker %s was lost; marking it FAILED", task.id, claim.previous)
    _count(cluster, "a2a.queue.worker_lost")
    try:
        await cluster.engine.fail_lost(record, "worker lost")
    finally:
        await cluster._release(task.id)
