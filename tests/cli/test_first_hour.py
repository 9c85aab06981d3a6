"""A newcomer's first hour with ``relaykit serve`` and the client commands: every mistake they are likely to make is
ONE line on stderr naming what is wrong (their file and line where there is one) and exit code 2, with no traceback
and no relaykit frames; the banner appears only once the server really listens; ``--reload`` reloads.

Every case runs the real CLI as a subprocess (``python -m relaykit.cli``) on 127.0.0.1, each wait bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.server
import importlib.metadata
import json
import os
import pty
import queue
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from support.servers import HOST, REPO_ROOT, environ, free_port, start_serve

RUN_TIMEOUT = 30.0  # seconds any one refused command may take
START_TIMEOUT = 20.0  # seconds for a server to print its banner
RELOAD_TIMEOUT = 20.0  # seconds for --reload to pick up an edit (an outside process watching files)
STOP_TIMEOUT = 10.0
BANNER = "relaykit: serving "
REDIS = "redis://127.0.0.1:6379/0"

ECHO = """\
from relaykit import agent


@agent
async def echo(context):
    return "{prefix}" + context.text
"""


def run(
    *args: str, cwd: Path = REPO_ROOT, env: dict[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m relaykit.cli ARGS`` to completion (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "relaykit.cli", *args],
        cwd=cwd,
        env=environ({"RELAYKIT_DEBUG": None, **(env or {})}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], command: str = "serve") -> str:
    """The single error line of a refused command (asserting exit 2, no traceback, no frames, no banner)."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert 'File "' not in result.stderr  # no frame at all, relaykit's or anyone's
    assert BANNER not in result.stdout
    prefix = f"relaykit {command}: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0].removeprefix(prefix)


# --- mistakes in the agent file ----------------------------------------------------------------------------------

AGENT_MISTAKES = {
    "syntax": ("from relaykit import agent\n\ndef broken(:\n    pass\n", "agent.py:3: SyntaxError: invalid syntax"),
    "import": (
        "from relaykit import agent\n\n\n\nimport nope\n",
        "agent.py:5: ModuleNotFoundError: No module named 'nope'",
    ),
    "raise": ("from relaykit import agent\n\n\n\n\n\nraise RuntimeError('boom')\n", "agent.py:7: RuntimeError: boom"),
    # Raised inside relaykit (the decorator refuses a non-function): the user's line, not relaykit's.
    "misuse": ("from relaykit import agent\n\nagent(42)\n", "agent.py:3: "),
}


@pytest.mark.parametrize("mistake", list(AGENT_MISTAKES))
def test_a_mistake_in_the_agent_file_is_one_line_at_its_line(mistake: str, tmp_path: Path) -> None:
    source, expected = AGENT_MISTAKES[mistake]
    (tmp_path / "agent.py").write_text(source)
    error = one_line_error(run("serve", "agent.py", "--store", "memory", cwd=tmp_path))
    assert error.startswith(expected), error


def test_a_mistake_in_a_module_the_agent_imports_names_that_module(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("VALUE = 1\n\n\nraise KeyError('model')\n")
    (tmp_path / "agent.py").write_text("from relaykit import agent\n\nimport helpers\n")
    error = one_line_error(run("serve", "agent.py", "--store", "memory", cwd=tmp_path))
    assert error == "helpers.py:4: KeyError: 'model'"


@pytest.mark.parametrize("how", ["--debug before the command", "--debug after it", "RELAYKIT_DEBUG=1"])
def test_debug_shows_the_whole_traceback(how: str, tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT_MISTAKES["raise"][0])
    args = {
        "--debug before the command": ("--debug", "serve", "agent.py"),
        "--debug after it": ("serve", "agent.py", "--debug"),
        "RELAYKIT_DEBUG=1": ("serve", "agent.py"),
    }[how]
    env: dict[str, str | None] = {"RELAYKIT_DEBUG": "1"} if how == "RELAYKIT_DEBUG=1" else {}
    result = run(*args, "--store", "memory", cwd=tmp_path, env=env)
    assert result.returncode == 2, result
    assert "Traceback" in result.stderr
    assert 'agent.py", line 7' in result.stderr  # the user's frame
    assert "RuntimeError: boom" in result.stderr


def test_several_agents_are_named(tmp_path: Path) -> None:
    two = "from relaykit import agent\n\n@agent\nasync def alpha(c):\n    return 'a'\n\n"
    two += "@agent\nasync def beta(c):\n    return 'b'\n"
    (tmp_path / "x.py").write_text(two)
    error = one_line_error(run("serve", "x.py", "--store", "memory", cwd=tmp_path))
    assert error == "x.py defines several agents (alpha, beta); name one as x.py:alpha"


def test_a_class_and_its_one_instance_are_one_executor(tmp_path: Path) -> None:
    # CONTRACT: without :name, "the file's agent (or its only executor)": an instance made of the file's class is it.
    from relaykit.cli._target import load_target

    source = "from relaykit import AgentExecutor\n\n\nclass Echo(AgentExecutor):\n"
    source += "    async def execute(self, context, events):\n        pass\n\n\nthing = Echo()\n"
    path = tmp_path / "only.py"
    path.write_text(source)
    found = load_target(str(path))
    assert type(found).__name__ == "Echo"
    assert not isinstance(found, type)
    # Two instances of it are two executors: the file must say which.
    path.write_text(source.replace("only", "x") + "other = Echo()\n")
    error = one_line_error(run("serve", "only.py", "--store", "memory", cwd=tmp_path))
    assert error == "only.py defines several agents (thing, other); name one as only.py:thing"


@pytest.mark.parametrize("target", ["examples", "examples/"])
def test_a_directory_says_which_file_to_pass(target: str) -> None:
    error = one_line_error(run("serve", target, "--store", "memory"))
    first = sorted(p.name for p in (REPO_ROOT / "examples").glob("*.py"))[0]
    assert error.startswith(f"{target} is a directory: pass the agent's Python file, e.g. examples/{first}"), error


def test_a_missing_file() -> None:
    assert one_line_error(run("serve", "examples/nope.py", "--store", "memory")) == "no such file: examples/nope.py"


# --- extras, ports, stores ---------------------------------------------------------------------------------------

# Runs the CLI with every import of redis-py refused, as on the base install (the extra not installed).
WITHOUT_REDIS = """
import sys

class NoRedis:
    def find_spec(self, name, path=None, target=None):
        if name == "redis" or name.startswith("redis."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoRedis())
from relaykit.cli import main
sys.exit(main())
"""


def test_the_redis_bus_without_the_extra_is_one_line_with_the_install_hint() -> None:
    serve = ["serve", "examples/echo.py", "--store", "memory", "--bus", REDIS, "--port", str(free_port())]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_REDIS, *serve],
        cwd=REPO_ROOT,
        env=environ(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert one_line_error(result) == "the Redis bus needs redis-py: pip install 'relaykit[redis]'"


def test_a_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "examples/echo.py", "--store", "memory", "--host", HOST, "--port", str(port))
    error = one_line_error(result)
    assert error.startswith(f"cannot listen on {HOST}:{port}: Address already in use"), error


def test_a_second_serve_on_the_same_sqlite_file_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    first = start_serve("examples/echo.py", tmp_path, store=f"sqlite:///{db}")
    try:
        result = run("serve", "examples/echo.py", "--store", str(db), "--port", str(free_port()))
    finally:
        first.stop()
    error = one_line_error(result)
    assert "already serving" in error
    assert str(db) in error


def test_an_unreachable_postgresql_is_one_line() -> None:
    store = "postgresql://postgres@127.0.0.1:1/x"
    error = one_line_error(run("serve", "examples/echo.py", "--store", store, "--port", str(free_port())))
    assert error.startswith(f"cannot connect to the PostgreSQL store {store}"), error


# --- a server that starts ----------------------------------------------------------------------------------------


class Output:
    """A started process's output (stdout and stderr merged), line by line, read by a thread: waits are bounded."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._stream = stream
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        for line in self._stream:
            self.lines.put(line)
        self.lines.put(None)

    def close(self) -> None:
        """After the process ended: the reader has seen EOF; close the pipe."""
        self._reader.join(STOP_TIMEOUT)
        self._stream.close()

    def until(self, start: str, timeout: float) -> str:
        """The next line starting with ``start``."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line starting {start!r} within {timeout:g} s; output:\n{''.join(self.seen)}"
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, f"the process ended before {start!r}; output:\n{''.join(self.seen)}"
            self.seen.append(line)
            if line.startswith(start):
                return line


@contextlib.contextmanager
def started(args: Sequence[str], cwd: Path) -> Iterator[tuple[subprocess.Popen[str], Output]]:
    """``python -m relaykit.cli ARGS`` in its own process group, stopped (the whole group) at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "relaykit.cli", *args],
        cwd=cwd,
        env=environ({"RELAYKIT_DEBUG": None}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # --reload's worker is a child: stop the group, not just the reloader
    )
    assert proc.stdout is not None
    output = Output(proc.stdout)
    try:
        yield proc, output
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT)
        output.close()


def test_the_banner_appears_once_the_port_accepts_connections(tmp_path: Path) -> None:
    port = free_port()
    args = ["serve", "examples/echo.py", "--store", "memory", "--host", HOST, "--port", str(port)]
    with started(args, REPO_ROOT) as (_, output):
        banner = output.until(BANNER, START_TIMEOUT)
        with socket.create_connection((HOST, port), timeout=5):
            pass  # connected: the banner did not come early
    assert f"on http://{HOST}:{port}" in banner
    assert f"agent card at http://localhost:{port}/.well-known/agent-card.json" in banner


def _send(url: str, text: str) -> str:
    """SendMessage over JSON-RPC; the text of the task's artifact."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}},
    }
    response = httpx.post(url + "/", json=body, headers={"A2A-Version": "1.0"}, timeout=10.0)
    task = response.json()["result"]["task"]
    return str(task["artifacts"][0]["parts"][0]["text"])


def test_reload_picks_up_an_edit_of_the_agent_file(tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    agent = work / "agent.py"
    agent.write_text(ECHO.format(prefix="v1 "))
    port = free_port()
    url = f"http://{HOST}:{port}"
    args = ["serve", "agent.py", "--reload", "--store", "memory", "--host", HOST, "--port", str(port)]
    args += ["--log-level", "warning"]
    with started(args, work) as (proc, output):
        output.until(BANNER, START_TIMEOUT)
        assert _send(url, "hi") == "v1 hi"
        agent.write_text(ECHO.format(prefix="v2 "))
        # Polling is right here: the reload is done by another process watching the file.
        deadline = time.monotonic() + RELOAD_TIMEOUT
        answer = ""
        while answer != "v2 hi":
            assert proc.poll() is None, "".join(output.seen)
            assert time.monotonic() < deadline, f"still {answer!r} after {RELOAD_TIMEOUT:g} s"
            with contextlib.suppress(httpx.HTTPError):
                answer = _send(url, "hi")
            time.sleep(0.1)


# --- the client commands -----------------------------------------------------------------------------------------


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0, result
    assert result.stdout == f"relaykit {importlib.metadata.version('relaykit')}\n"


def test_the_input_required_error_lives_with_its_siblings() -> None:
    import relaykit.client
    import relaykit.errors

    assert issubclass(relaykit.errors.A2ATaskInputRequiredError, relaykit.errors.A2ATaskOutcomeError)
    assert "A2ATaskInputRequiredError" not in relaykit.client.__all__


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers the push status endpoint with no configs and keeps the request's headers."""

    seen: queue.Queue[dict[str, str]] = queue.Queue()

    def do_GET(self) -> None:
        self.seen.put(dict(self.headers.items()))
        body = json.dumps({"taskId": "t1", "configs": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def test_push_status_takes_headers_and_token_as_the_other_commands_do() -> None:
    with http.server.ThreadingHTTPServer((HOST, 0), _Recorder) as recorder:
        threading.Thread(target=recorder.serve_forever, daemon=True).start()
        try:
            url = f"http://{HOST}:{recorder.server_address[1]}"
            result = run("push", "status", "-H", "X-Test: yes", "-H", "X-Other:no", "--token", "s3cret", url, "t1")
        finally:
            recorder.shutdown()
    assert result.returncode == 0, result
    headers = {k.lower(): v for k, v in _Recorder.seen.get(timeout=5).items()}
    assert (headers["x-test"], headers["x-other"], headers["authorization"]) == ("yes", "no", "Bearer s3cret")
    # A malformed header is the same usage error for every command.
    bad = [run(*command, "-H", "no colon", "http://127.0.0.1:1", "t1") for command in (["push", "status"], ["get"])]
    for result in bad:
        assert result.returncode == 2, result
        assert "a header is NAME:VALUE, not 'no colon'" in result.stderr


def _wait_asleep(pid: int, timeout: float = 5.0) -> None:
    """Wait (bounded) until the process sleeps, here: blocked reading the terminal after printing its prompt.

    CPython's ``input()`` checks for signals only when its blocking read is interrupted, so a SIGINT that lands
    between the prompt being written and the read starting waits for the next key. A person cannot type that fast;
    a test on a loaded machine can, so it sends Ctrl-C only once the read has begun."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "S":
        assert time.monotonic() < deadline, f"process {pid} did not block on the terminal within {timeout:g} s"
        time.sleep(0.01)


def test_ctrl_c_at_the_chat_prompt_ends_the_chat(examples: dict[str, str]) -> None:
    master, slave = pty.openpty()

    def controlling_terminal() -> None:  # in the child, after setsid: Ctrl-C on the pty sends it SIGINT
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [sys.executable, "-m", "relaykit.cli", "chat", examples["echo"]],
        cwd=REPO_ROOT,
        env=environ({"TERM": "dumb", "RELAYKIT_TOKEN": None}),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_terminal,
    )
    os.close(slave)
    shown = b""
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while b"you> " not in shown:
            remaining = deadline - time.monotonic()
            assert remaining > 0, shown
            if select.select([master], [], [], remaining)[0]:
                shown += os.read(master, 4096)
        _wait_asleep(proc.pid)
        os.write(master, b"\x03")  # Ctrl-C, once
        try:
            code = proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            while select.select([master], [], [], 0.5)[0]:
                shown += os.read(master, 4096)
            raise AssertionError(f"chat still running after Ctrl-C; the terminal showed {shown!r}") from None
        assert code == 130, shown
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
        os.close(master)
