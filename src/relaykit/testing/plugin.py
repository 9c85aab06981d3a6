"""relaykit's pytest plugin (entry point ``pytest11: relaykit``, active once relaykit is installed).

Fixtures:

* ``a2a_agent``: the agent under test. Override it (in a conftest or a test module), or mark a test with
  ``@pytest.mark.a2a_agent(executor)``; an ``AgentExecutor`` instance or class, or an ASGI app. A marked test gets
  the marker's agent even where the fixture is overridden (the marker is the more specific choice). (pytest takes a
  class given alone to a marker as the decorated object: write ``@pytest.mark.a2a_agent.with_args(MyExecutor)``.)
* ``a2a_client``: a connected ``relaykit.client.Client`` for ``a2a_agent``, in-process (no sockets); an async
  fixture, so it needs pytest-asyncio.
* ``a2a_server``: the base URL of a real uvicorn server on a free 127.0.0.1 port serving ``a2a_agent``, stopped
  after the test (for the CLI, other processes, or any HTTP client).

Example (``test_my_agent.py``)::

    import pytest
    from relaykit import agent
    from relaykit.testing import ScriptedAgent, artifact, complete

    @agent
    async def echo(context):
        return context.text

    @pytest.fixture
    def a2a_agent():
        return echo

    async def test_echo(a2a_client):
        assert await a2a_client.ask("hi") == "hi"

    @pytest.mark.a2a_agent(ScriptedAgent([artifact("scripted"), complete()]))
    async def test_scripted(a2a_client):
        assert await a2a_client.ask("anything") == "scripted"

    def test_over_http(a2a_server):
        assert a2a_server.startswith("http://127.0.0.1:")
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from relaykit.client import Client
from relaykit.testing._inprocess import InProcessClient
from relaykit.testing._server import ServerThread

_async_fixture: Any
try:
    import pytest_asyncio

    _async_fixture = pytest_asyncio.fixture
    _HAS_ASYNCIO = True
except ImportError:  # pragma: no cover - depends on the environment
    _async_fixture = pytest.fixture
    _HAS_ASYNCIO = False

__all__ = ["a2a_agent", "a2a_client", "a2a_server", "pytest_configure"]

_HOW = (
    "the a2a_client / a2a_server fixtures serve the agent given by the 'a2a_agent' fixture: override it "
    "(@pytest.fixture def a2a_agent(): return MyExecutor()) or mark the test "
    "(@pytest.mark.a2a_agent(MyExecutor()))"
)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the ``a2a_agent`` marker (so ``--strict-markers`` runs accept it), and keep pytest-asyncio quiet.

    pytest-asyncio (0.24 and later) warns at start-up when ``asyncio_default_fixture_loop_scope`` is unset, and under
    ``-W error`` that warning is an INTERNALERROR before any test runs. A user who installed relaykit and wrote the
    example above has set nothing. The plugin's own async fixture is function-scoped, so for it the two meanings the
    warning is about (the fixture's own scope today, "function" in later pytest-asyncio releases) are the same. So
    when the option is unset (and only then), the plugin ignores that one warning; a project that sets the option is
    untouched.
    """
    config.addinivalue_line(
        "markers",
        "a2a_agent(target): the AgentExecutor (instance or class) or ASGI app that a2a_client/a2a_server serve",
    )
    if _HAS_ASYNCIO and not _loop_scope_set(config):
        # tryfirst: this runs before pytest-asyncio's own pytest_configure, inside the same catch_warnings block
        # pytest opens for the configure hooks, and a filter inserted now takes precedence over ``-W error``.
        warnings.filterwarnings(
            "ignore",
            message=r'The configuration option "asyncio_default_fixture_loop_scope" is unset',
        )


def _loop_scope_set(config: pytest.Config) -> bool:
    try:
        return bool(config.getini("asyncio_default_fixture_loop_scope"))
    except ValueError:  # an old pytest-asyncio that has no such option: nothing to warn about
        return True


@pytest.fixture
def a2a_agent(request: pytest.FixtureRequest) -> Any:
    """The agent under test: the ``a2a_agent`` marker's argument (override this fixture to give your own)."""
    marker = request.node.get_closest_marker("a2a_agent")
    if marker is None or not marker.args:
        pytest.fail(f"no agent to serve: {_HOW}", pytrace=False)
    return marker.args[0]


def _agent_under_test(request: pytest.FixtureRequest) -> Any:
    """The marker's agent when the test is marked, else the ``a2a_agent`` fixture's (the plugin's or an override).

    Asking for the fixture by name, only when there is no marker, is what lets a marker win over a module or conftest
    that overrides ``a2a_agent``: an override replaces the plugin's fixture, marker reading included."""
    marker = request.node.get_closest_marker("a2a_agent")
    if marker is not None and marker.args:
        return marker.args[0]
    return request.getfixturevalue("a2a_agent")


@_async_fixture  # type: ignore[untyped-decorator]
async def a2a_client(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """A ``relaykit.client.Client`` connected in-process to the agent under test (memory store, live streams)."""
    if not _HAS_ASYNCIO:  # pragma: no cover - depends on the environment
        pytest.fail("the a2a_client fixture needs pytest-asyncio (pip install pytest-asyncio)", pytrace=False)
    async with InProcessClient(_agent_under_test(request)) as client:
        yield client


@pytest.fixture
def a2a_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """The base URL of a uvicorn server on 127.0.0.1 serving the agent under test; stopped after the test."""
    with ServerThread(_agent_under_test(request)) as url:
        yield url
