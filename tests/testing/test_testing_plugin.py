"""The pytest plugin: its fixtures used directly here (it is loaded through the ``pytest11`` entry point), and a
user's test file run by a separate pytest, as someone who just installed relaykit would."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from relaykit import TaskState, agent
from relaykit.client import Client
from relaykit.server import AgentContext
from relaykit.testing import ScriptedAgent, artifact, complete, input_required
from relaykit.types import Task

PYTEST_TIMEOUT = 60.0


@agent
async def shout(context: AgentContext) -> str:
    """Answers in capitals."""
    return context.text.upper()


def test_the_plugin_is_registered(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("relaykit")
    assert plugin is not None, "the pytest11 entry point 'relaykit' is not installed (pip install -e .)"
    assert plugin.__name__ == "relaykit.testing.plugin"


class TestAnOverriddenAgent:
    @pytest.fixture
    def a2a_agent(self) -> object:
        return shout

    async def test_in_process_client(self, a2a_client: Client) -> None:
        assert await a2a_client.ask("quiet") == "QUIET"

    async def test_real_server(self, a2a_server: str) -> None:
        assert a2a_server.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{a2a_server}/.well-known/agent-card.json")).json()
        assert card["name"] == "shout"
        assert card["supportedInterfaces"][0]["url"] == f"{a2a_server}/"  # the card names the real port
        async with Client(a2a_server) as client:
            assert await client.ask("over tcp") == "OVER TCP"


@pytest.mark.a2a_agent(ScriptedAgent([input_required("Sure?"), artifact("done"), complete()]))
async def test_marker_gives_the_agent(a2a_client: Client) -> None:
    task = await a2a_client.send("do it")
    assert isinstance(task, Task)
    assert task.status.state is TaskState.INPUT_REQUIRED
    task = await a2a_client.send("yes", task_id=task.id)
    assert isinstance(task, Task)
    assert task.status.state is TaskState.COMPLETED


@pytest.mark.a2a_agent(ScriptedAgent([artifact("both"), complete()]))
async def test_client_and_server_together(a2a_client: Client, a2a_server: str) -> None:
    assert await a2a_client.ask("in process") == "both"
    async with Client(a2a_server) as client:
        assert await client.ask("over tcp") == "both"


USER_TESTS = """
import pytest
from relaykit import agent
from relaykit.testing import ScriptedAgent, artifact, complete

@agent
async def echo(context):
    return context.text

@pytest.fixture
def a2a_agent():
    return echo

@pytest.mark.asyncio
async def test_client(a2a_client):
    assert await a2a_client.ask("hi") == "hi"

def test_server(a2a_server):
    import httpx
    assert httpx.get(a2a_server + "/healthz").status_code == 200

"""

MARKED_TESTS = """
import pytest
from relaykit.testing import ScriptedAgent, artifact, complete

@pytest.mark.asyncio
@pytest.mark.a2a_agent(ScriptedAgent([artifact("scripted"), complete()]))
async def test_marked(a2a_client):
    assert await a2a_client.ask("x") == "scripted"
"""

MISSING_AGENT = """
def test_no_agent(a2a_server):
    pass
"""


def run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=PYTEST_TIMEOUT,
        check=False,
    )


def test_a_users_test_file(tmp_path: Path) -> None:
    # No configuration: pytest-asyncio in its default strict mode, the plugin found through the entry point.
    (tmp_path / "test_user_agent.py").write_text(textwrap.dedent(USER_TESTS))
    (tmp_path / "test_marked_agent.py").write_text(textwrap.dedent(MARKED_TESTS))
    (tmp_path / "test_missing_agent.py").write_text(textwrap.dedent(MISSING_AGENT))
    result = run_pytest(tmp_path, "-W", "error")
    assert "INTERNALERROR" not in result.stdout + result.stderr, result.stdout + result.stderr
    summary = result.stdout.splitlines()[-1]
    assert "warning" not in summary, result.stdout  # e.g. pytest-asyncio's unset loop-scope notice
    assert "3 passed" in summary, result.stdout + result.stderr
    assert "1 error" in summary, result.stdout + result.stderr
    assert "no agent to serve" in result.stdout
    assert "@pytest.mark.a2a_agent" in result.stdout


class TestAMarkerBesideAnOverriddenFixture:
    """The plugin docstring's example: a module overrides ``a2a_agent`` and one test marks another agent; the marker
    names the agent for that test (the closer, more specific choice), on both fixtures."""

    @pytest.fixture
    def a2a_agent(self) -> object:
        return shout

    async def test_the_fixture_serves_unmarked_tests(self, a2a_client: Client) -> None:
        assert await a2a_client.ask("quiet") == "QUIET"

    @pytest.mark.a2a_agent(ScriptedAgent([artifact("scripted"), complete()]))
    async def test_the_marker_wins_in_process(self, a2a_client: Client) -> None:
        assert await a2a_client.ask("anything") == "scripted"

    @pytest.mark.a2a_agent(ScriptedAgent([artifact("scripted"), complete()]))
    async def test_the_marker_wins_over_http(self, a2a_server: str) -> None:
        async with Client(a2a_server) as client:
            assert await client.ask("anything") == "scripted"
