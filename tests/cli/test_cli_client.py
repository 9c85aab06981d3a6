"""``relaykit card|send|get|list|cancel|subscribe`` against the ``examples/`` agents, each run as a subprocess."""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from relaykit.cli import main
from relaykit.cli._client_cmds import parse_state
from relaykit.types import TaskState

SHORT_SECONDS = 5  # SLOW_SECONDS of the "slow_short" example server (conftest.SHORT_SECONDS)

Cli = Callable[..., subprocess.CompletedProcess[str]]
TASK_LINE = re.compile(r"^task (\S+): (\w+) \(context (\S+)\)$", re.MULTILINE)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(result))


def send_json(cli: Cli, url: str, text: str, *args: str) -> dict[str, Any]:
    task: dict[str, Any] = json_of(cli("send", "--json", *args, url, text))["task"]
    return task


# --- card ---------------------------------------------------------------------------------------------------


def test_card_for_people(cli: Cli, examples: dict[str, str]) -> None:
    out = ok(cli("card", examples["echo"]))
    assert out.splitlines()[0] == "echo 1.0.0"
    assert "Repeats your text back as an artifact." in out
    assert f"JSONRPC    {examples['echo']}/" in out
    assert f"HTTP+JSON  {examples['echo']}" in out
    assert "capabilities: streaming" in out
    assert "skills:" in out


def test_card_json(cli: Cli, examples: dict[str, str]) -> None:
    card = json_of(cli("card", "--json", examples["stream"]))
    assert card["name"] == "stream"
    bindings = [i["protocolBinding"] for i in card["supportedInterfaces"]]
    assert bindings[:2] == ["JSONRPC", "HTTP+JSON"]
    assert card["capabilities"]["streaming"] is True


# --- send ---------------------------------------------------------------------------------------------------


def test_send_prints_task_state_and_artifact(cli: Cli, examples: dict[str, str]) -> None:
    out = ok(cli("send", examples["echo"], "hello there"))
    found = TASK_LINE.search(out)
    assert found is not None, out
    assert found.group(2) == "COMPLETED"
    assert out.splitlines()[-1] == "hello there"


def test_send_json_is_the_send_message_response(cli: Cli, examples: dict[str, str]) -> None:
    task = send_json(cli, examples["echo"], "as json")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [p["text"] for p in task["artifacts"][0]["parts"]] == ["as json"]
    assert task["contextId"]


def test_send_over_rest_only(cli: Cli, examples: dict[str, str]) -> None:
    task = send_json(cli, examples["echo"], "via rest", "--transport", "rest")
    assert task["artifacts"][0]["parts"][0]["text"] == "via rest"


def test_send_reads_text_from_stdin(cli: Cli, examples: dict[str, str]) -> None:
    out = ok(cli("send", examples["echo"], "-", stdin="from stdin\n"))
    assert out.splitlines()[-1] == "from stdin"


def test_send_stream_shows_chunks_then_the_final_state(cli: Cli, examples: dict[str, str]) -> None:
    out = ok(cli("send", "--stream", examples["stream"], "5"))
    lines = out.splitlines()
    assert TASK_LINE.match(lines[0]), lines
    assert lines[1] == "chunk 0chunk 1chunk 2chunk 3chunk 4"
    assert lines[-1] == "[COMPLETED]"


def test_send_stream_json_lines(cli: Cli, examples: dict[str, str]) -> None:
    out = ok(cli("send", "--stream", "--json", examples["stream"], "5"))
    events = [json.loads(line) for line in out.splitlines()]
    assert all(len(event) == 1 for event in events)  # one StreamResponse member per line
    assert "task" in events[0]
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == [f"chunk {i}" for i in range(5)]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    assert [c.get("append", False) for c in chunks] == [False, True, True, True, True]
    assert chunks[-1]["lastChunk"] is True
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_send_answers_input_required_with_task(cli: Cli, examples: dict[str, str]) -> None:
    first = cli("send", examples["ask"], "hi")
    out = ok(first)
    found = TASK_LINE.search(out)
    assert found is not None
    assert found.group(2) == "INPUT_REQUIRED"
    assert "agent: What is your name?" in out
    assert f"relaykit send --task {found.group(1)}" in first.stderr
    out = ok(cli("send", "--task", found.group(1), examples["ask"], "Grace"))
    assert "COMPLETED" in out
    assert "Nice to meet you, Grace!" in out


def test_send_stream_answering_input_required(cli: Cli, examples: dict[str, str]) -> None:
    task = send_json(cli, examples["ask"], "hi")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    out = ok(cli("send", "--stream", "--task", task["id"], examples["ask"], "Linus"))
    assert "Nice to meet you, Linus!" in out
    assert out.splitlines()[-1] == "[COMPLETED]"


# --- get / list ---------------------------------------------------------------------------------------------


def test_get_shows_the_task(cli: Cli, examples: dict[str, str]) -> None:
    task = send_json(cli, examples["echo"], "remember me")
    out = ok(cli("get", examples["echo"], task["id"]))
    assert f"task      {task['id']}" in out
    assert "state     COMPLETED" in out
    assert "  user   remember me" in out
    assert "artifacts" in out
    again = json_of(cli("get", "--json", examples["echo"], task["id"]))
    assert again["id"] == task["id"]
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"


def test_list_filters_by_context_and_state(cli: Cli, examples: dict[str, str]) -> None:
    url = examples["echo"]
    first = send_json(cli, url, "one")
    context = first["contextId"]
    second = send_json(cli, url, "two", "--context", context)
    assert second["contextId"] == context
    send_json(cli, url, "elsewhere")  # another context: never listed below

    out = ok(cli("list", url, "--context", context))
    lines = out.splitlines()
    assert lines[0].split() == ["TASK", "STATE", "CONTEXT", "UPDATED"]
    assert {line.split()[0] for line in lines[1:]} == {first["id"], second["id"]}
    assert all(line.split()[1] == "COMPLETED" for line in lines[1:])

    completed = json_of(cli("list", "--json", url, "--context", context, "--state", "completed"))
    assert {t["id"] for t in completed["tasks"]} == {first["id"], second["id"]}
    result = cli("list", url, "--context", context, "--state", "TASK_STATE_WORKING")
    assert ok(result) == ""
    assert "no tasks" in result.stderr


@pytest.mark.parametrize("spelling", ["working", "WORKING", "TASK_STATE_WORKING", "Working"])
def test_state_spellings(spelling: str) -> None:
    assert parse_state(spelling) is TaskState.WORKING


def test_state_spellings_of_interrupted_and_canceled() -> None:
    assert parse_state("input-required") is TaskState.INPUT_REQUIRED
    assert parse_state("INPUT_REQUIRED") is TaskState.INPUT_REQUIRED
    assert parse_state("cancelled") is TaskState.CANCELED
    with pytest.raises(argparse.ArgumentTypeError, match="unknown task state"):
        parse_state("unspecified")


# --- cancel / subscribe / live streams ----------------------------------------------------------------------


def test_cancel_a_slow_task(cli: Cli, examples: dict[str, str]) -> None:
    url = examples["slow"]
    task = send_json(cli, url, "take your time", "--no-wait")
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    working = json_of(cli("list", "--json", url, "--state", "working", "--context", task["contextId"]))
    assert [t["id"] for t in working["tasks"]] == [task["id"]]

    out = ok(cli("cancel", url, task["id"]))
    assert TASK_LINE.search(out) is not None
    assert f"task {task['id']}: CANCELED" in out

    again = cli("cancel", url, task["id"])
    assert again.returncode == 1
    assert "CANCELED" in again.stderr
    assert again.stdout == ""


def test_subscribe_follows_a_slow_task_to_completed(cli: Cli, examples: dict[str, str]) -> None:
    url = examples["slow_short"]
    task = send_json(cli, url, "follow me", "--no-wait")
    started = time.monotonic()
    # People's output and JSON Lines, subscribed at the same time.
    with ThreadPoolExecutor(2) as pool:
        as_text = pool.submit(cli, "subscribe", url, task["id"])
        as_json = pool.submit(cli, "subscribe", "--json", url, task["id"])
        out, json_out = ok(as_text.result()), ok(as_json.result())
    lines = out.splitlines()
    assert lines[0].startswith(f"task {task['id']}: ")
    assert f"done after {float(SHORT_SECONDS):g} seconds" in out
    assert lines[-1] == "[COMPLETED]"
    events = [json.loads(line) for line in json_out.splitlines()]
    assert events[0]["task"]["id"] == task["id"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert time.monotonic() - started < float(SHORT_SECONDS) + 15


class _Lines:
    """Reads a process's stdout lines on a thread, so the test can wait for one with a bound."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self.thread.start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 15.0) -> str:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(pattern in line for line in self.lines), timeout)
            assert ok, f"no line with {pattern!r} within {timeout}s: {self.lines}"
            return next(line for line in self.lines if pattern in line)


def test_send_stream_is_live_and_ends_when_canceled(
    cli: Cli, cli_process: Callable[..., subprocess.Popen[str]], examples: dict[str, str]
) -> None:
    url = examples["slow"]
    proc = cli_process(
        "send",
        "--stream",
        url,
        "wait for me",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        reader = _Lines(proc)
        first = reader.wait_for("task ")
        reader.wait_for("[WORKING]")
        assert proc.poll() is None  # the events were shown while the task still runs
        found = TASK_LINE.match(first)
        assert found is not None
        ok(cli("cancel", url, found.group(1)))
        assert proc.wait(timeout=15) == 0
        reader.thread.join(5)
        assert reader.lines[-1].startswith("[CANCELED]")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# --- errors and exit codes ----------------------------------------------------------------------------------


def test_unknown_task_is_an_a2a_error(cli: Cli, examples: dict[str, str]) -> None:
    missing = str(uuid.uuid4())
    for command in ("get", "cancel", "subscribe"):
        result = cli(command, examples["echo"], missing)
        assert result.returncode == 1, command
        assert "task not found" in result.stderr, command  # CONTRACT: its message printed, e.g. "task not found"
        assert result.stdout == ""


def test_subscribe_to_a_finished_task_is_an_a2a_error(cli: Cli, examples: dict[str, str]) -> None:
    task = send_json(cli, examples["echo"], "done already")
    result = cli("subscribe", examples["echo"], task["id"])
    assert result.returncode == 1
    assert "COMPLETED" in result.stderr


@pytest.mark.parametrize("command", ["card", "send", "chat"])
def test_connection_refused_exits_3(cli: Cli, unused_url: str, command: str) -> None:
    extra = ["hello"] if command == "send" else []
    result = cli(command, unused_url, *extra, stdin="hello\n" if command == "chat" else None)
    assert result.returncode == 3, result
    assert "cannot fetch the agent card" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("send", "--stream", "URL", "hi"),
        ("get", "URL", "TASK"),
        ("list", "URL", "--state", "working"),
        ("cancel", "URL", "TASK"),
        ("subscribe", "URL", "TASK"),
    ],
    ids=lambda a: a[0],
)
def test_connection_refused_exits_3_in_process(
    unused_url: str, args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([unused_url if a == "URL" else a for a in args]) == 3
    assert "cannot fetch the agent card" in capsys.readouterr().err


def test_a_malformed_token_is_not_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """httpx refuses a header value with a newline with an error quoting it (``Illegal header value b'Bearer …'``);
    that text used to be the error line the CLI printed, credential included."""
    with socket.create_server(("127.0.0.1", 0)) as listener:  # listening: the request gets as far as being encoded
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        assert main(["get", url, "TASK", "--token", "s3cret\n"]) == 3
    err = capsys.readouterr().err
    assert "s3cret" not in err
    assert "cannot fetch the agent card" in err


@pytest.mark.parametrize("args", [(), ("send", "http://127.0.0.1:1"), ("list", "http://127.0.0.1:1", "--state", "x")])
def test_usage_errors_exit_2(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert result.returncode == 2, result
    assert "usage:" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ("send",),
        ("get", "http://127.0.0.1:1"),
        ("send", "ftp://example.com", "hi"),
        ("send", "--header", "no-colon", "http://127.0.0.1:1", "hi"),
        ("send", "--stream", "--no-wait", "http://127.0.0.1:1", "hi"),
        ("send", "--transport", "carrier-pigeon", "http://127.0.0.1:1", "hi"),
        ("chat", "http://127.0.0.1:1", "extra"),
        ("frobnicate",),
    ],
)
def test_usage_errors_exit_2_in_process(args: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    assert exited.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_credentials_in_the_url_are_not_printed(cli: Cli, examples: dict[str, str], unused_url: str) -> None:
    """The agent URL's userinfo and query values are masked in errors and in the reply hint (stderr is often a log)."""
    secret, key = "s3cr3t-pw", "k3y-value"

    def with_creds(url: str) -> str:
        return url.replace("http://", f"http://user:{secret}@") + f"/?api_key={key}"

    refused = cli("get", with_creds(unused_url), "TASK")
    assert refused.returncode == 3, refused
    asked = cli("send", with_creds(examples["ask"]), "hello")
    assert asked.returncode == 0, asked
    assert "answer with: relaykit send --task" in asked.stderr
    for result in (refused, asked):
        assert secret not in result.stderr, result.stderr
        assert key not in result.stderr, result.stderr
        assert "***@127.0.0.1" in result.stderr


@pytest.mark.parametrize(
    "credential",
    [("--token", "s3cret"), ("-H", "X-Auth-Token: s3cret"), ("-H", "X-Upstream-Secret: s3cret")],
    ids=["token", "x-auth-token", "x-upstream-secret"],
)
def test_a_token_over_plain_http_to_a_remote_host_is_refused(
    credential: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 before anything is sent (192.0.2.10 is TEST-NET: nothing there would answer), for ``--token`` and for a
    header of the caller's naming that holds a credential."""
    assert main(["get", "http://192.0.2.10:8000", "TASK", *credential, "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert "--insecure-credentials" in err
    assert "s3cret" not in err
