"""The CLI against agents served by the testing kit (``a2a_server`` + ``ScriptedAgent``): outcomes the examples
don't have (a FAILED task, a bare Message reply, an agent without streaming, headers)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from relaykit.server import AgentExecutor, EventQueue, RequestContext, TaskUpdater
from relaykit.testing import ScriptedAgent, ServerThread, artifact, complete, fail, input_required, message

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.a2a_agent(ScriptedAgent([fail("the model is on fire")]))
def test_a_failed_task_exits_1(cli: Cli, a2a_server: str) -> None:
    result = cli("send", a2a_server, "anything")
    assert result.returncode == 1
    assert "FAILED" in result.stdout
    assert "the model is on fire" in result.stderr
    streamed = cli("send", "--stream", a2a_server, "anything")
    assert streamed.returncode == 1
    assert streamed.stdout.splitlines()[-1] == "[FAILED] the model is on fire"


@pytest.mark.a2a_agent(ScriptedAgent([message("just a message")]))
def test_a_message_reply(cli: Cli, a2a_server: str) -> None:
    result = cli("send", a2a_server, "hi")
    assert result.returncode == 0, result
    assert result.stdout.splitlines()[0].startswith("message ")
    assert result.stdout.splitlines()[-1] == "just a message"
    as_json = json.loads(cli("send", "--json", a2a_server, "hi").stdout)
    assert as_json["message"]["parts"] == [{"text": "just a message"}]
    streamed = cli("send", "--stream", a2a_server, "hi")
    assert streamed.returncode == 0, streamed
    assert streamed.stdout.splitlines()[0].startswith("message ")
    assert streamed.stdout.splitlines()[-1] == "just a message"
    assert cli("chat", a2a_server, stdin="hi\n").stdout == "agent: just a message\n"


def test_chat_with_an_agent_that_does_not_stream(cli: Cli) -> None:
    agent = ScriptedAgent([input_required("Which colour?"), artifact("Blue it is."), complete()])
    with ServerThread(agent, app_options={"streaming": False}) as url:
        card = json.loads(cli("card", "--json", url).stdout)
        assert card["capabilities"].get("streaming") is False
        result = cli("chat", url, stdin="paint it\nblue\n")
    assert result.returncode == 0, result
    assert result.stdout.splitlines() == ["agent: Which colour?", "agent: Blue it is."]
    assert [m.text for m in agent.received] == ["paint it", "blue"]


class HeaderEcho(AgentExecutor):
    """Answers with the Authorization and X-Test headers it was called with."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        headers = {k.lower(): v for k, v in context.call.headers.items()}
        text = f"{headers.get('authorization', '-')} | {headers.get('x-test', '-')}"
        await TaskUpdater(queue, context).complete_with_text(text)


@pytest.mark.a2a_agent.with_args(HeaderEcho)  # a class alone would be taken as the decorated object
def test_headers_and_token(cli: Cli, a2a_server: str) -> None:
    result = cli("send", "--token", "s3cret", "-H", "X-Test: yes", a2a_server, "hi")
    assert result.returncode == 0, result
    assert result.stdout.splitlines()[-1] == "Bearer s3cret | yes"
