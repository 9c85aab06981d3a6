"""Gap 3 (issue 19): the push outbox of a crashed replica is taken over by a live one within the lease time, by the
live replica's periodic sweep (not when some replica starts).

Real processes on the test PostgreSQL and Redis: replica A (the only worker) runs a task whose webhook answers 503,
so A holds the stream's lease while it retries; replica B (API only) is already running. A is SIGKILLed and the
webhook starts accepting: B delivers every notification. The takeover time (kill to the first delivery by B) is
measured and must be under the lease plus one sweep period (a third of the lease) plus a backoff step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.push.push_helpers import Recorder, Server, stream_kinds, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(90)]

AGENT = "tests/cluster/agents.py:agent"
LEASE = 2.0
BACKOFF = 0.2


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    try:
        yield made
    finally:
        made.close()


def test_a_dead_replicas_outbox_is_taken_over_within_the_lease(
    recorder: Recorder, postgres_url: str, redis_url: str, cluster_namespace: str, tmp_path: Path
) -> None:
    args = (
        *("--bus", redis_url, "--namespace", cluster_namespace, "--lease", f"{LEASE:g}"),
        *("--push-allow", "127.0.0.1", "--push-backoff", f"{BACKOFF:g}", "--push-max-backoff", f"{BACKOFF:g}"),
        *("--push-retries", "1000"),
    )
    recorder.control(fail_all=True, fail_status=503)
    a = Server(AGENT, *args, store=postgres_url, log_dir=tmp_path)
    b = Server(AGENT, *args, "--no-worker", store=postgres_url, log_dir=tmp_path)
    try:
        reply = a.send("3", push={"id": "hook", "url": recorder.url("/hook"), "token": "t"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        wait_until(lambda: len(recorder.records("/hook")) >= 2, what="A retrying the first notification")
        a.kill()
        killed = time.time()
        recorder.control(fail_all=False)
        accepted = recorder.wait_accepted("/hook", 5, timeout=10 * LEASE)
        takeover = accepted[0]["at"] - killed
    finally:
        a.kill()
        b.stop()
    print(f"push outbox takeover after the replica's death: {takeover:.2f} s (lease {LEASE:g} s)")
    assert stream_kinds(accepted) == ["task", "artifactUpdate", "artifactUpdate", "artifactUpdate", "statusUpdate"]
    assert len({r["headers"]["x-relaykit-event-id"] for r in accepted}) == 5
    assert takeover < LEASE + LEASE / 3 + BACKOFF + 1.0
