"""A task's state change never loses its push notification in a crash (issue 19, the owed marker: ``push._owed``).

Real processes: ``relaykit serve`` on ``outbox_crash_agent.py``, whose server SIGKILLs itself between the task
store's commit of COMPLETED and the push outbox's commit of its notification (the worst instant), and the webhook
recorder of the push tests. The blocking caller gets no answer (the server died first), but the store holds
COMPLETED: after a restart on the same store (one process), or within the lease by a live replica's sweep
(scale-out), the webhook is told, by a ``{"task": ...}`` snapshot showing the state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.push.push_helpers import A2A, Recorder, Server, state_of, wait_until

AGENT = "tests/durability/outbox_crash_agent.py:agent"
PUSH = ("--push-allow", "127.0.0.1")
LEASE = 2.0


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    try:
        yield made
    finally:
        made.close()


def _crash_on_completed(server: Server, recorder: Recorder, flag: Path) -> None:
    """Send a blocking message with a push config; the server dies at the worst instant instead of answering."""
    with pytest.raises(httpx.TransportError):
        server.send("hi", push={"id": "hook", "url": recorder.url("/hook"), "token": "t"})
    assert server.process is not None
    assert server.process.proc.wait(timeout=10) == -9
    assert not flag.exists()  # it died where it was meant to


def _completed(recorder: Recorder) -> dict[str, Any] | None:
    for record in recorder.accepted("/hook"):
        if state_of(record["json"]) == "TASK_STATE_COMPLETED":
            return record
    return None


def _told_completed(recorder: Recorder, base: str, *, timeout: float) -> dict[str, Any]:
    record = wait_until(lambda: _completed(recorder), timeout=timeout, what="the COMPLETED notification")
    task = record["json"]["task"]  # a snapshot of the task as stored: its COMPLETED status event never got out
    assert task["artifacts"][0]["parts"][0]["text"] == "done: hi"
    assert record["headers"]["x-a2a-notification-token"] == "t"
    stored = httpx.get(f"{base}/tasks/{task['id']}", headers=A2A, timeout=10)
    assert stored.json()["status"]["state"] == "TASK_STATE_COMPLETED", stored.text
    return dict(task)


def test_sqlite_a_state_stored_before_a_crash_is_pushed_after_the_restart(recorder: Recorder, tmp_path: Path) -> None:
    flag = tmp_path / "crash"
    flag.touch()
    store = f"sqlite:///{tmp_path / 'owed.db'}"
    server = Server(AGENT, *PUSH, store=store, log_dir=tmp_path, env={"OUTBOX_CRASH_FLAG": str(flag)})
    try:
        _crash_on_completed(server, recorder, flag)
        server.start()
        _told_completed(recorder, server.base, timeout=10)
    finally:
        server.stop()


@pytest.mark.postgres
def test_postgres_a_state_stored_before_a_crash_is_pushed_after_the_restart(
    recorder: Recorder, postgres_url: str, pg_namespace: str, tmp_path: Path
) -> None:
    flag = tmp_path / "crash"
    flag.touch()
    args = (*PUSH, "--namespace", pg_namespace)
    server = Server(AGENT, *args, store=postgres_url, log_dir=tmp_path, env={"OUTBOX_CRASH_FLAG": str(flag)})
    try:
        _crash_on_completed(server, recorder, flag)
        server.start()
        _told_completed(recorder, server.base, timeout=10)
    finally:
        server.stop()


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(60)
def test_postgres_scale_out_a_live_replica_pushes_what_a_dead_one_owed(
    recorder: Recorder, postgres_url: str, redis_url: str, cluster_namespace: str, tmp_path: Path
) -> None:
    """Replica A runs the task and dies at the worst instant; replica B, running all along, notices the marker A
    left (older than the lease) in its sweep and pushes the snapshot: no replica needs to start."""
    flag = tmp_path / "crash"
    flag.touch()
    args = (*PUSH, "--bus", redis_url, "--namespace", cluster_namespace, "--lease", f"{LEASE:g}")
    env = {"OUTBOX_CRASH_FLAG": str(flag)}
    a = Server(AGENT, *args, store=postgres_url, log_dir=tmp_path, env=env)
    b = Server(AGENT, *args, "--no-worker", store=postgres_url, log_dir=tmp_path, env=env)
    try:
        _crash_on_completed(a, recorder, flag)
        # The lease, a sweep period, and slack for the delivery itself.
        _told_completed(recorder, b.base, timeout=LEASE + LEASE / 3 + 5)
    finally:
        a.kill()
        b.stop()
