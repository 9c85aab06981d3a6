"""``relaykit serve`` as an operator sees it: graceful stop, crash recovery, one process per SQLite file.

CONTRACT "relaykit serve": SIGTERM lets running executions finish for ``--grace`` seconds, ends open streams
cleanly and marks what still runs FAILED ("server shutdown"); on start, tasks a dead process left active are marked
FAILED ("server restarted"); a second ``relaykit serve`` on the same SQLite file is refused with a clear message.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.servers import REPO_ROOT, ServerProcess, start_serve, stop_all

HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
SLOW = {"SLOW_SECONDS": "60"}


def _send_slow(base_url: str) -> dict:
    body = {
        "message": {"messageId": "m-slow", "role": "ROLE_USER", "parts": [{"text": "work"}]},
        "configuration": {"returnImmediately": True},
    }
    reply = httpx.post(f"{base_url}/message:send", json=body, headers=HEADERS, timeout=10)
    assert reply.status_code == 200, reply.text
    task = reply.json()["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    return task


def _get(base_url: str, task_id: str) -> dict:
    reply = httpx.get(f"{base_url}/tasks/{task_id}", headers=HEADERS, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _status_text(task: dict) -> str:
    return "".join(p.get("text", "") for p in task["status"].get("message", {}).get("parts", []))


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[Callable[[str], ServerProcess]]:
    """``slow_server(store)`` ⇒ ``relaykit serve examples/slow.py`` on that store, ready; all stopped at teardown."""
    started: list[ServerProcess] = []

    def start(store: str) -> ServerProcess:
        started.append(start_serve("examples/slow.py", tmp_path, store=store, env=SLOW))
        return started[-1]

    yield start
    stop_all(started)


def test_sigterm_fails_running_tasks_and_ends_streams(
    slow_server: Callable[[str], ServerProcess], tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    server = slow_server(store)
    task = _send_slow(server.url)

    # An open SubscribeToTask stream must end cleanly (not hang) when the server stops.
    events: list[dict] = []
    stream_ended = threading.Event()

    def read_stream() -> None:
        with httpx.stream(
            "POST", f"{server.url}/tasks/{task['id']}:subscribe", headers=HEADERS, timeout=30
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        stream_ended.set()

    reader = threading.Thread(target=read_stream, daemon=True)
    reader.start()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=20) == 0
    assert stream_ended.wait(timeout=10), "the subscription did not end when the server stopped"
    assert events
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_FAILED"

    restarted = slow_server(store)
    stored = _get(restarted.url, task["id"])
    assert stored["status"]["state"] == "TASK_STATE_FAILED"
    assert "server shutdown" in _status_text(stored)


def test_crash_leaves_no_task_working(slow_server: Callable[[str], ServerProcess], tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    server = slow_server(store)
    task = _send_slow(server.url)
    assert _get(server.url, task["id"])["status"]["state"] == "TASK_STATE_WORKING"
    server.kill9()  # no chance to clean up

    restarted = slow_server(store)
    stored = _get(restarted.url, task["id"])
    assert stored["status"]["state"] == "TASK_STATE_FAILED"
    assert "server restarted" in _status_text(stored)


def test_second_server_on_the_same_sqlite_file_is_refused(
    slow_server: Callable[[str], ServerProcess], tmp_path: Path
) -> None:
    db = tmp_path / "tasks.db"
    slow_server(f"sqlite:///{db}")
    second = subprocess.run(
        [sys.executable, "-m", "relaykit.cli", "serve", "examples/echo.py", "--port", "0", "--store", str(db)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert second.returncode != 0
    assert "already serving" in second.stderr
    assert str(db) in second.stderr
    assert "Traceback" not in second.stderr
