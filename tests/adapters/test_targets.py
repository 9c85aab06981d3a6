"""Framework objects as targets: detection by class name, ``relaykit serve FILE.py`` with each framework's example,
the card derived from the agent (and overridden), and no framework imported by ``import relaykit`` or by serving an
executor that is not a framework's.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.servers import REPO_ROOT, start_serve

from adapters._fakes import FACTORIES, Probe
from adapters.conftest import CALL_TIMEOUT, FRAMEWORKS, serving
from relaykit import AgentCard, AgentSkill, agent
from relaykit.adapters import as_executor, framework_of
from relaykit.cli._target import load_target
from relaykit.client import Client

FRAMEWORK_MODULES = ("pydantic_ai", "langgraph", "langchain_core", "agents", "google.adk", "google.genai", "openai")
EXAMPLES = {
    "pydantic-ai": "examples/pydantic_ai_agent.py",
    "langgraph": "examples/langgraph_agent.py",
    "openai-agents": "examples/openai_agents_agent.py",
    "adk": "examples/adk_agent.py",
}


def framework_modules(names: list[str]) -> list[str]:
    return [n for n in names if any(n == m or n.startswith(m + ".") for m in FRAMEWORK_MODULES)]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_detected_by_type(framework: str) -> None:
    obj = FACTORIES[framework](Probe())
    assert framework_of(obj) == framework
    assert framework_of(type(obj)) is None, "a class is not an agent"
    executor = as_executor(obj)
    assert as_executor(executor) is executor


def test_other_objects_are_not_agents() -> None:
    @agent
    async def echo(context: Any) -> str:
        return str(context.text)

    assert framework_of(echo) is None
    assert framework_of({"name": "agent"}) is None
    assert as_executor(echo) is echo
    with pytest.raises(TypeError, match="pydantic-ai"):
        as_executor(object())


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_load_target_accepts_the_example(framework: str) -> None:
    executor = load_target(EXAMPLES[framework])
    assert type(executor).__module__ == f"relaykit.adapters._{framework.replace('-', '_')}"
    assert executor.card.name in ("notes", "notes-graph")


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_card_is_derived_from_the_agent(framework: str) -> None:
    obj = FACTORIES[framework](Probe())
    with serving(obj) as url:
        async with Client(url) as client:
            card = client.card
    assert card is not None
    assert card.name == "notes"
    if framework != "langgraph":  # a graph has no description; its tools are in its ToolNode
        assert card.description == "Test notes agent."
    skills = {s.id: s.description for s in card.skills}
    assert skills["lookup"] == "Look something up."
    if framework != "langgraph":
        assert skills["delete_note"] == "Delete the note called NAME."
    assert card.capabilities.streaming is True


async def test_card_can_be_overridden() -> None:
    card = AgentCard(
        name="custom",
        description="Overridden.",
        version="2.0.0",
        skills=[AgentSkill(id="s", name="s", description="d", tags=["t"])],
    )
    executor = as_executor(FACTORIES["pydantic-ai"](Probe()), card=card)
    with serving(executor) as url:
        async with Client(url) as client:
            assert client.card is not None
            assert (client.card.name, client.card.version) == ("custom", "2.0.0")
            assert await asyncio.wait_for(client.ask("hi"), CALL_TIMEOUT) == "You said: hi (turn 1)"


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_relaykit_serve_the_example(framework: str, tmp_path: Path) -> None:
    server = start_serve(EXAMPLES[framework], tmp_path, env={"OPENAI_API_KEY": None, "GOOGLE_API_KEY": None})
    try:
        async with Client(server.url) as client:
            first = await asyncio.wait_for(client.send("hi"), CALL_TIMEOUT)
            assert first.artifacts[0].text_content == "You said: hi (turn 1)"
            second = await asyncio.wait_for(client.send("again", context_id=first.context_id), CALL_TIMEOUT)
            assert second.artifacts[0].text_content == "You said: again (turn 2)"
            asked = await asyncio.wait_for(client.send("delete list", context_id=first.context_id), CALL_TIMEOUT)
            assert asked.status.state.name == "INPUT_REQUIRED"
            done = await asyncio.wait_for(client.send("yes", task_id=asked.id), CALL_TIMEOUT)
            assert done.artifacts[-1].text_content == "Deleted note list."
    finally:
        server.stop()


def test_import_relaykit_imports_no_framework() -> None:
    code = (
        "import json, sys, relaykit, relaykit.http, relaykit.client, relaykit.adapters, relaykit.cli, relaykit.testing;"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert framework_modules(json.loads(out.stdout)) == []


async def test_serving_echo_imports_no_framework(tmp_path: Path) -> None:
    # sitecustomize records the server process's modules when it exits (SIGTERM: uvicorn returns, atexit runs).
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import atexit, json, os, sys\n"
        "def _dump():\n"
        "    with open(os.environ['RELAYKIT_TEST_MODULES'], 'w') as f:\n"
        "        json.dump(sorted(sys.modules), f)\n"
        "atexit.register(_dump)\n"
    )
    out = tmp_path / "modules.json"
    path = os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])
    server = start_serve(
        "examples/echo.py", tmp_path, env={"PYTHONPATH": path, "RELAYKIT_TEST_MODULES": str(out)}, cwd=REPO_ROOT
    )
    try:
        async with Client(server.url) as client:
            assert await asyncio.wait_for(client.ask("hello"), CALL_TIMEOUT) == "hello"
    finally:
        server.stop()
    modules = json.loads(out.read_text())
    assert "relaykit.http._app" in modules, "the hook saw the server"
    assert framework_modules(modules) == []


async def test_structured_output_is_a_data_part() -> None:
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    class City(BaseModel):
        name: str
        population: int

    model = TestModel(custom_output_args={"name": "Paris", "population": 2100000})
    with serving(Agent(model, name="cities", output_type=City)) as url:
        async with Client(url) as client:
            task = await asyncio.wait_for(client.send("the biggest city?"), CALL_TIMEOUT)
    assert task.status.state.name == "COMPLETED"
    assert [p.data for a in task.artifacts for p in a.parts] == [{"name": "Paris", "population": 2100000}]


async def test_a_graph_without_messages_answers_with_its_values() -> None:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        question: str
        answer: str

    def answer(state: State) -> State:
        return {"answer": state["question"].upper()}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    executor = as_executor(builder.compile(), input_key="question")
    with serving(executor) as url:
        async with Client(url) as client:
            task = await asyncio.wait_for(client.send("shout"), CALL_TIMEOUT)
    assert task.status.state.name == "COMPLETED"
    assert [p.data for a in task.artifacts for p in a.parts] == [{"question": "shout", "answer": "SHOUT"}]
