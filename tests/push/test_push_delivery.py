"""Push delivery end to end: ``relaykit serve`` processes posting to a webhook recorder process, on 127.0.0.1.

Order and headers, retries after failures, a SIGKILLed server resuming its outbox after a restart, dead letters after
the give-up limit, and the status endpoint / ``relaykit push status`` that report it all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from push_helpers import A2A, Recorder, Server, state_of, stream_kinds, wait_until
from support.servers import REPO_ROOT

FAST = ("--push-backoff", "0.05", "--push-max-backoff", "0.2")
PUSH = {"token": "per-task-token", "authentication": {"scheme": "Bearer", "credentials": "s3cret"}}


def _chunk_texts(records: list[dict[str, Any]]) -> list[str]:
    return [
        r["json"]["artifactUpdate"]["artifact"]["parts"][0]["text"] for r in records if "artifactUpdate" in r["json"]
    ]


def _status_when(server: Server, task_id: str, done: Any, what: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = server.status(task_id)
        return status if status["configs"] and done(status["configs"][0]) else None

    return wait_until(probe, what=what)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaykit.cli", "push", "status", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_events_arrive_in_order_with_the_right_headers(recorder: Recorder, log_dir: Path) -> None:
    server = Server("examples/stream.py", "--push-allow", "127.0.0.1", log_dir=log_dir)
    try:
        reply = server.send("5", push={"id": "hook-1", "url": recorder.url("/ordered"), **PUSH})
        assert reply.status_code == 200, reply.text
        task = reply.json()["task"]
        records = recorder.wait_accepted("/ordered", 7)
    finally:
        server.stop()
    assert len(recorder.records("/ordered")) == 7  # nothing twice
    assert stream_kinds(records) == ["task", *["artifactUpdate"] * 5, "statusUpdate"]
    assert _chunk_texts(records) == [f"chunk {i}" for i in range(5)]
    assert state_of(records[-1]["json"]) == "TASK_STATE_COMPLETED"
    for record in records:
        headers = record["headers"]
        assert headers["content-type"] == "application/a2a+json"
        assert headers["authorization"] == "Bearer s3cret"
        assert headers["x-a2a-notification-token"] == "per-task-token"
        assert int(headers["content-length"]) == len(record["body"])
        body = record["json"]
        assert (body["task"]["id"] if "task" in body else next(iter(body.values()))["taskId"]) == task["id"]
    assert len({r["headers"]["x-relaykit-event-id"] for r in records}) == 7


def test_state_changes_only(recorder: Recorder, log_dir: Path) -> None:
    server = Server("examples/stream.py", "--push-allow", "127.0.0.1", "--push-events", "state", log_dir=log_dir)
    try:
        task_id = server.send("5", push={"url": recorder.url("/states")}).json()["task"]["id"]
        status = _status_when(server, task_id, lambda c: c["pending"] == 0 and c["delivered"] >= 2, "delivery")
        records = recorder.accepted("/states")
    finally:
        server.stop()
    assert len(records) == status["configs"][0]["delivered"]
    assert "artifactUpdate" not in stream_kinds(records)
    states = [state_of(r["json"]) for r in records]
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert len(states) == len(set(states))


def test_a_receiver_failing_the_first_attempts_still_gets_every_event_once(recorder: Recorder, log_dir: Path) -> None:
    recorder.control(fail_first=3, fail_status=503)
    server = Server("examples/stream.py", "--push-allow", "127.0.0.1", *FAST, log_dir=log_dir)
    try:
        task = server.send("3", push={"url": recorder.url("/flaky"), **PUSH}).json()["task"]
        accepted = recorder.wait_accepted("/flaky", 5)
        status = _status_when(server, task["id"], lambda c: c["pending"] == 0, "the outbox to empty")
    finally:
        server.stop()
    attempts = recorder.records("/flaky")
    assert [r["status"] for r in attempts] == [503, 503, 503, 200, 200, 200, 200, 200]
    # The three failures were retries of the first notification: same event id, same body.
    assert len({r["headers"]["x-relaykit-event-id"] for r in attempts[:4]}) == 1
    assert len({r["body"] for r in attempts[:4]}) == 1
    assert stream_kinds(accepted) == ["task", "artifactUpdate", "artifactUpdate", "artifactUpdate", "statusUpdate"]
    assert len({r["headers"]["x-relaykit-event-id"] for r in accepted}) == 5
    [config] = status["configs"]
    assert (config["delivered"], config["failures"], config["consecutiveFailures"], config["dead"]) == (5, 3, 0, 0)
    assert config["lastError"] == "HTTP 503"


def test_a_killed_server_delivers_what_was_pending_after_a_restart(
    recorder: Recorder, log_dir: Path, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'push.db'}"
    args = ("--push-allow", "127.0.0.1", "--push-backoff", "0.2", "--push-max-backoff", "0.5")
    recorder.control(fail_all=True, fail_status=503)
    server = Server("examples/stream.py", *args, store=store, log_dir=log_dir)
    try:
        reply = server.send("4", push={"id": "durable", "url": recorder.url("/durable"), **PUSH})
        assert reply.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        task_id = reply.json()["task"]["id"]
        _status_when(server, task_id, lambda c: c["failures"] >= 1 and c["pending"] == 6, "a failed first attempt")
        server.kill()  # SIGKILL: nothing is flushed on the way out
        head = recorder.records("/durable")[0]["headers"]["x-relaykit-event-id"]
        recorder.control(fail_all=False)
        server.start()
        accepted = recorder.wait_accepted("/durable", 6)
        status = _status_when(server, task_id, lambda c: c["pending"] == 0 and c["delivered"] == 6, "delivery")
        from_store = _cli("--store", store, task_id, "--json")
    finally:
        server.stop()
    assert stream_kinds(accepted) == ["task", *["artifactUpdate"] * 4, "statusUpdate"]
    assert _chunk_texts(accepted) == [f"chunk {i}" for i in range(4)]
    ids = [r["headers"]["x-relaykit-event-id"] for r in accepted]
    assert len(set(ids)) == 6
    assert ids[0] == head  # the same notification, retried by the new process
    assert all(r["headers"]["authorization"] == "Bearer s3cret" for r in accepted)
    [config] = status["configs"]
    assert config["failures"] >= 1  # health survived the kill
    assert from_store.returncode == 0, from_store.stderr
    [stored] = json.loads(from_store.stdout)["configs"]
    assert (stored["configId"], stored["delivered"], stored["pending"], stored["dead"]) == ("durable", 6, 0, 0)


def test_dead_letters_after_the_give_up_limit(recorder: Recorder, log_dir: Path, tmp_path: Path) -> None:
    """Every notification gets its 3 attempts, then becomes a dead letter. The receiver fails for well under the
    suspension time (60 s by default: a config is suspended only after 10 failures in a row spanning a minute), so a
    short outage like this one costs retries, not the config; ``test_a_failing_receiver_is_suspended`` shows the
    suspension."""
    store = f"sqlite:///{tmp_path / 'dead.db'}"
    recorder.control(fail_all=True, fail_status=500)
    server = Server(
        "examples/echo.py", "--push-allow", "127.0.0.1", "--push-retries", "3", *FAST, store=store, log_dir=log_dir
    )
    try:
        task_id = server.send("hello", push={"id": "gone", "url": recorder.url("/dead")}).json()["task"]["id"]
        status = _status_when(server, task_id, lambda c: c["pending"] == 0 and c["dead"] > 0, "dead letters")
        human = _cli(server.base, task_id)
        as_json = _cli(server.base, task_id, "--json")
        from_store = _cli("--store", store, task_id, "--json")  # read-only, while the server runs
    finally:
        server.stop()
    [config] = status["configs"]
    events = config["dead"]
    assert events >= 2  # the task snapshot, ..., COMPLETED
    assert (config["delivered"], config["failures"], config["consecutiveFailures"]) == (0, 3 * events, 3 * events)
    assert config["lastError"] == "HTTP 500"
    assert config["lastSuccess"] is None
    assert config["lastFailure"] is not None
    assert len(recorder.records("/dead")) == 3 * events
    assert human.returncode == 0, human.stderr
    assert f"dead {events}" in human.stdout
    assert "HTTP 500" in human.stdout
    assert json.loads(as_json.stdout) == status
    assert from_store.returncode == 0, from_store.stderr
    assert json.loads(from_store.stdout)["configs"][0]["dead"] == events


def test_status_endpoint_and_cli_errors(log_dir: Path) -> None:
    server = Server("examples/echo.py", log_dir=log_dir)
    try:
        task_id = server.send("hi").json()["task"]["id"]
        no_version = httpx.get(f"{server.base}/relaykit/push/status/{task_id}", timeout=10)
        missing = httpx.get(f"{server.base}/relaykit/push/status/nope", headers=A2A, timeout=10)
        empty = server.status(task_id)
        cli_missing = _cli(server.base, "nope")
        cli_usage = _cli(server.base)
    finally:
        server.stop()
    cli_unreachable = _cli(server.base, task_id)
    assert no_version.status_code == 400
    assert no_version.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert missing.status_code == 404
    assert missing.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    assert empty == {"taskId": task_id, "configs": []}
    assert cli_missing.returncode == 1
    assert "not found" in cli_missing.stderr.lower()
    assert cli_usage.returncode == 2
    assert cli_unreachable.returncode == 3


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
def test_configs_added_after_creation_receive_later_events(recorder: Recorder, log_dir: Path, binding: str) -> None:
    """Configs created with CreateTaskPushNotificationConfig on a running (INPUT_REQUIRED) task: several per task."""
    server = Server("examples/ask.py", "--push-allow", "127.0.0.1", log_dir=log_dir)
    try:
        task = server.send("hello").json()["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        for name in ("a", "b"):
            config = {"taskId": task["id"], "id": name, "url": recorder.url(f"/{binding}-{name}")}
            if binding == "rest":
                reply = httpx.post(
                    f"{server.base}/tasks/{task['id']}/pushNotificationConfigs", json=config, headers=A2A, timeout=10
                )
                assert reply.status_code == 200, reply.text
            else:
                body = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig", "params": config}
                reply = httpx.post(f"{server.base}/", json=body, headers=A2A, timeout=10)
                assert "result" in reply.json(), reply.text
        assert server.send("Ada", task_id=task["id"]).json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # Each receiver gets the continuation's events in order, COMPLETED last (waiting for "at least one" alone
        # would read the records while the later events are still on their way).
        got = {
            name: wait_until(
                lambda name=name: (
                    records
                    if (records := recorder.accepted(f"/{binding}-{name}"))
                    and state_of(records[-1]["json"]) == "TASK_STATE_COMPLETED"
                    else None
                ),
                what=f"COMPLETED delivered to {name}",
            )
            for name in ("a", "b")
        }
        status = _status_when(server, task["id"], lambda c: c["pending"] == 0, "delivery")
    finally:
        server.stop()
    for records in got.values():
        assert state_of(records[-1]["json"]) == "TASK_STATE_COMPLETED"
    assert [c["configId"] for c in status["configs"]] == ["a", "b"]


def test_a_failing_receiver_is_suspended(recorder: Recorder, log_dir: Path) -> None:
    """Issue 14 (Build 4): a config whose receiver keeps failing is suspended: after ``--push-suspend-after``
    failures in a row (spanning ``--push-suspend-seconds``) nothing more is attempted, what was queued becomes dead
    letters, the status says so; registering the config again resumes it."""
    recorder.control(fail_all=True, fail_status=500)
    args = ("--push-allow", "127.0.0.1", "--push-retries", "5", "--push-suspend-after", "2")
    server = Server("examples/ask.py", *args, "--push-suspend-seconds", "0", *FAST, log_dir=log_dir)
    try:
        config = {"id": "flaky", "url": recorder.url("/flaky")}
        task = server.send("hello", push=config).json()["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        suspended = _status_when(server, task["id"], lambda c: c["suspended"] and c["pending"] == 0, "suspension")
        # Two attempts, both failed; nothing after (a retry of the first event, the later events).
        [health] = suspended["configs"]
        assert (health["failures"], health["consecutiveFailures"], health["delivered"]) == (2, 2, 0)
        assert health["dead"] >= 1
        assert len(recorder.records("/flaky")) == 2
        # Registering the config again resumes it: the follow-up's events are delivered.
        recorder.control(fail_all=False)
        reply = httpx.post(
            f"{server.base}/tasks/{task['id']}/pushNotificationConfigs",
            json={"taskId": task["id"], **config},
            headers=A2A,
            timeout=10,
        )
        assert reply.status_code == 200, reply.text
        assert not server.status(task["id"])["configs"][0]["suspended"]
        assert server.send("Ada", task_id=task["id"]).json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        accepted = wait_until(
            lambda: (
                records
                if (records := recorder.accepted("/flaky")) and state_of(records[-1]["json"]) == "TASK_STATE_COMPLETED"
                else None
            ),
            what="COMPLETED delivered after resuming",
        )
    finally:
        server.stop()
    assert len(recorder.records("/flaky")) == 2 + len(accepted)
