"""An echo agent whose server dies at the worst instant for push (``relaykit serve THIS_FILE``).

The agent answers text T with one artifact ``done: T``, then COMPLETED. What this module adds is the crash, here in
the test's own target file (the package has no fault hook): the durable push outboxes' ``commit`` is wrapped so that,
while the file named by ``OUTBOX_CRASH_FLAG`` exists, the commit carrying a task's COMPLETED notification removes
the file and SIGKILLs its own process before it writes anything. The task store has committed COMPLETED by then (the
engine persists a state before it publishes it, and the push hook runs after the publish), so the process dies
between the two commits: the state is durable, its notification is in no outbox. Once only: the file is gone, so a
restart on the same store runs normally.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

import relaykit
from relaykit.backends._base import OutboxChanges
from relaykit.backends.postgres import PostgresPushOutbox
from relaykit.backends.sqlite import SQLitePushOutbox


@relaykit.agent
async def agent(context):  # type: ignore[no-untyped-def]
    return f"done: {context.text}"


def _completes(changes: OutboxChanges) -> bool:
    return any(e.body.startswith(b'{"statusUpdate"') and b"TASK_STATE_COMPLETED" in e.body for e in changes.added)


def _crash_before_completed(cls: Any) -> None:
    commit = cls.commit

    async def crashing(self: Any, changes: OutboxChanges) -> None:
        flag = os.environ.get("OUTBOX_CRASH_FLAG")
        if flag and _completes(changes):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(flag)
                os.kill(os.getpid(), signal.SIGKILL)
        await commit(self, changes)

    cls.commit = crashing


_crash_before_completed(SQLitePushOutbox)
_crash_before_completed(PostgresPushOutbox)
