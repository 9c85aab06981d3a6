"""The README's curl examples work as written, against ``relaykit serve examples/echo.py``.

Each ``curl`` line of the "Try it with curl" section is run by bash (only the port is changed, to the test server's)
and its output is checked for what a reader is promised: the card, a completed echo over JSON-RPC and REST, an SSE
stream with ids, and a task list.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _curl_lines() -> list[str]:
    text = README.read_text()
    section = text.split("## Try it with curl", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("curl ")]
    assert len(lines) >= 5, "the README's curl section lost its examples"
    return lines


def _run(line: str, base_url: str) -> str:
    command = line.replace("http://localhost:8000", base_url)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"{command!r} failed: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def echo_url(relaykit_server: Callable[..., str]) -> str:
    return relaykit_server("examples/echo.py")


def test_card(echo_url: str) -> None:
    card = json.loads(_run(_curl_lines()[0], echo_url))
    assert card["name"] == "echo"
    assert [i["protocolBinding"] for i in card["supportedInterfaces"] if i["protocolVersion"] == "1.0"] == [
        "JSONRPC",
        "HTTP+JSON",
    ]


def test_jsonrpc_send(echo_url: str) -> None:
    reply = json.loads(_run(_curl_lines()[1], echo_url))
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hello"}]


def test_rest_send(echo_url: str) -> None:
    task = json.loads(_run(_curl_lines()[2], echo_url))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hello over REST"}]


def test_rest_stream(echo_url: str) -> None:
    out = _run(_curl_lines()[3], echo_url)
    ids = [int(m) for m in re.findall(r"^id: (\d+)$", out, re.M)]
    events = [json.loads(m) for m in re.findall(r"^data: (.*)$", out, re.M)]
    assert ids == sorted(ids)
    assert len(ids) == len(events) >= 3
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    texts = [e["artifactUpdate"]["artifact"]["parts"][0]["text"] for e in events if "artifactUpdate" in e]
    assert texts == ["hello, streamed"]


def test_list(echo_url: str) -> None:
    _run(_curl_lines()[2], echo_url)
    page = json.loads(_run(_curl_lines()[4], echo_url))
    assert page["pageSize"] == 2
    assert 1 <= len(page["tasks"]) <= 2
    assert "nextPageToken" in page
    assert "totalSize" in page


def _quickstart_commands() -> list[str]:
    section = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines() if line.split("#", 1)[0].strip()]


def test_quickstart_is_two_commands_that_exist(echo_url: str) -> None:
    # Exactly two set-up commands: install and run the demo agent, and run the whole suite, which is what CI runs.
    install_and_serve, run_tests = _quickstart_commands()
    assert install_and_serve == "pip install -e . && relaykit serve examples/echo.py"
    assert run_tests == "./scripts/test"
    root = README.parent
    assert (root / "examples/echo.py").is_file()
    script = root / "scripts/test"
    assert script.is_file()
    assert script.stat().st_mode & 0o111, "./scripts/test must be executable"
    assert "./scripts/test" in (root / ".ci/run").read_text().split(), ".ci/run must run the README's test command"
    # The served demo is the one the quickstart names (echo_url runs `relaykit serve examples/echo.py`).
    card = json.loads(_run(_curl_lines()[0], echo_url))
    assert card["name"] == "echo"
