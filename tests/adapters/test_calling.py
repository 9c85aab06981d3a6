"""The calling side: each framework's agent uses a remote A2A agent as a tool, through relaykit's client.

The remote is a relaykit echo agent (``examples/echo.py`` served in-process) or the a2a-sdk 1.3.0 server of the
client tests (``tests/client/_sdk_server.py``: text T ⇒ an artifact T). The local agent's offline model calls the
tool ``remote`` for ``remote M`` and answers ``remote said: R``. A remote question (INPUT_REQUIRED) comes back as the
tool's text, and the next call continues the remote task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from client._procs import start_sdk
from support.servers import ServerProcess

from adapters._fakes import FACTORIES, Probe
from adapters.conftest import CALL_TIMEOUT, FRAMEWORKS, serving
from relaykit import agent
from relaykit.adapters import RemoteAgent
from relaykit.adapters._remote import QUESTION_PREFIX
from relaykit.client import Client

TOOLS = {
    "pydantic-ai": "pydantic_ai_tool",
    "langgraph": "langchain_tool",
    "openai-agents": "openai_agents_tool",
    "adk": "adk_tool",
}


@agent
async def echo(context: Any) -> str:
    """Repeats your text back."""
    return str(context.text)


@agent
async def ask_name(context: Any) -> str:
    """Asks for a name, then greets."""
    if context.task is None:
        context.requires_input("What is your name?")
    return f"Hello, {context.text}!"


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    with serving(echo) as url:
        yield url


@pytest.fixture(scope="module")
def sdk_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server: ServerProcess = start_sdk(tmp_path_factory.mktemp("sdk-server"))
    try:
        yield server.url
    finally:
        server.stop()


async def make_tool(framework: str, url: str) -> Any:
    import relaykit.adapters

    factory = getattr(relaykit.adapters, TOOLS[framework])
    return await asyncio.wait_for(factory(url, name="remote"), CALL_TIMEOUT)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("remote", ["relaykit", "a2a-sdk"])
async def test_framework_agent_calls_a_remote_agent(
    framework: str, remote: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("echo_url" if remote == "relaykit" else "sdk_url")
    tool = await make_tool(framework, url)
    local = FACTORIES[framework](Probe(), extra_tools=[tool])
    with serving(local) as local_url:
        async with Client(local_url) as client:
            task = await asyncio.wait_for(client.send("remote ping"), CALL_TIMEOUT)
    assert task.status.state.name == "COMPLETED", task.status
    assert task.artifacts[-1].text_content == "remote said: ping"
    assert any(m.text == "Calling tool remote" for m in task.history)


async def test_tool_description_comes_from_the_card(echo_url: str) -> None:
    from relaykit.adapters import pydantic_ai_tool

    tool = await asyncio.wait_for(pydantic_ai_tool(echo_url), CALL_TIMEOUT)
    assert tool.name == "echo"
    assert tool.description is not None
    assert tool.description.startswith("Repeats your text back.")


async def test_remote_question_then_answer_continues_the_remote_task() -> None:
    with serving(ask_name) as url:
        remote = RemoteAgent(url)
        question = await asyncio.wait_for(remote.ask("hi", conversation="c1"), CALL_TIMEOUT)
        assert question == QUESTION_PREFIX + "What is your name?"
        # Another local conversation has its own remote conversation.
        other = await asyncio.wait_for(remote.ask("hi", conversation="c2"), CALL_TIMEOUT)
        assert other.startswith(QUESTION_PREFIX)
        answer = await asyncio.wait_for(remote.ask("Ada", conversation="c1"), CALL_TIMEOUT)
        assert answer == "Hello, Ada!"


async def test_remote_failure_is_a_typed_error() -> None:
    from relaykit.errors import A2ATaskFailedError

    @agent
    async def broken(context: Any) -> str:
        raise RuntimeError("nope")

    with serving(broken) as url, pytest.raises(A2ATaskFailedError):
        await asyncio.wait_for(RemoteAgent(url).ask("hi"), CALL_TIMEOUT)
