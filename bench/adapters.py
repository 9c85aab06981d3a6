"""A 1,000-delta stream through each framework adapter against the plain ``@agent`` generator, in one run.

Each agent streams DELTAS text chunks from its framework's offline model (pydantic-ai ``FunctionModel``, a
langchain-core chat model in a LangGraph node, an OpenAI Agents SDK custom ``Model``, an ADK ``BaseLlm``); the
baseline is an ``@agent`` async generator yielding the same chunks. Every agent is served by ``create_app`` (memory
store) and streamed with relaykit's ``Client`` in-process (ASGI, no sockets), so the numbers compare the agents, not
the network. events/s = artifact events received / wall time from the send to the final status. Rounds alternate
the agents (A B C … A B C …); the table gives the median and [min-max] of the rounds, and each adapter's median
against the baseline's. "framework alone" consumes the framework's own stream directly (no A2A, no relaykit): the
ceiling no adapter can pass, so "served vs alone" is what serving over A2A costs on top of the framework.

The second table splits the cost of one delta in CPU time (``time.process_time``: what this process spent, so other
work on the machine barely moves it, unlike the wall-clock rates): the framework alone; the framework driven by its
adapter with every event discarded (the adapter's ``execute`` on a queue that drops events: no engine, no HTTP), so
the difference is the adapter's own per-delta work; served end to end; and the plain generator served, which is
relaykit's own cost of one event (engine, store, SSE, the in-process client's parsing).

    python bench/adapters.py [--deltas 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from relaykit import Message, Part, Role, TaskArtifactUpdateEvent, agent
from relaykit.adapters import as_executor
from relaykit.server import EventQueue, RequestContext
from relaykit.testing import InProcessClient

TOKEN = "tok "


def plain(deltas: int) -> Any:
    @agent
    async def stream(context: Any) -> AsyncIterator[str]:
        for _ in range(deltas):
            yield TOKEN

    return stream


def pydantic_ai(deltas: int) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    async def model(messages: list[Any], info: AgentInfo) -> AsyncIterator[str]:
        for _ in range(deltas):
            yield TOKEN

    return Agent(FunctionModel(stream_function=model), name="bench")


def langgraph(deltas: int) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
    from langgraph.graph import END, START, MessagesState, StateGraph

    class Tokens(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "tokens"

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=TOKEN * deltas))])

        async def _astream(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> AsyncIterator[ChatGenerationChunk]:
            for _ in range(deltas):
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=TOKEN))
                if run_manager is not None:
                    await run_manager.on_llm_new_token(TOKEN, chunk=chunk)
                yield chunk

    model = Tokens()

    async def chat(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder.compile(name="bench")


def openai_agents(deltas: int) -> Any:
    from agents import Agent, set_tracing_disabled
    from agents.models.interface import Model
    from agents.testing import ModelStep, ScriptedModel
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)
    parts = [ResponseOutputText(text=TOKEN, type="output_text", annotations=[], logprobs=[]) for _ in range(deltas)]
    item = ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=parts)

    class Tokens(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            return await ScriptedModel([ModelStep(output=[item])]).get_response(*args, **kwargs)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            # One delta event per output text part.
            return ScriptedModel([ModelStep(output=[item])]).stream_response(*args, **kwargs)

    return Agent(name="bench", model=Tokens())


def adk(deltas: int) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class Tokens(BaseLlm):
        model: str = "tokens"

        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncIterator[Any]:
            for _ in range(deltas):
                part = types.Part(text=TOKEN)
                yield LlmResponse(content=types.Content(role="model", parts=[part]), partial=True)
            text = types.Part(text=TOKEN * deltas)
            yield LlmResponse(content=types.Content(role="model", parts=[text]), turn_complete=True)

    return LlmAgent(name="bench", model=Tokens())


# --- each framework alone: its own stream consumed directly (no A2A), the ceiling an adapter cannot pass ----------


async def pydantic_ai_alone(obj: Any) -> int:
    from pydantic_ai import Agent, PartDeltaEvent, PartStartEvent

    count = 0
    async with obj.iter("go") as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as events:
                    async for event in events:
                        count += isinstance(event, PartDeltaEvent | PartStartEvent)
    return count


async def langgraph_alone(obj: Any) -> int:
    from langchain_core.messages import AIMessageChunk, HumanMessage

    count = 0
    async for mode, chunk in obj.astream({"messages": [HumanMessage("go")]}, stream_mode=["messages", "updates"]):
        count += mode == "messages" and isinstance(chunk[0], AIMessageChunk) and bool(chunk[0].content)
    return count


async def openai_agents_alone(obj: Any) -> int:
    from agents import Runner
    from openai.types.responses import ResponseTextDeltaEvent

    count = 0
    async for event in Runner.run_streamed(obj, "go").stream_events():
        count += event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)
    return count


async def adk_alone(obj: Any) -> int:
    from google.adk.agents import RunConfig
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="bench", user_id="u")
    runner = Runner(app_name="bench", agent=obj, session_service=sessions)
    message = types.Content(role="user", parts=[types.Part(text="go")])
    config = RunConfig.model_validate({"streaming_mode": "sse"})
    count = 0
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message, run_config=config):
        count += bool(event.partial)
    return count


ALONE: dict[str, Callable[[Any], Any]] = {
    "pydantic-ai": pydantic_ai_alone,
    "langgraph": langgraph_alone,
    "openai-agents": openai_agents_alone,
    "adk": adk_alone,
}

AGENTS: dict[str, Callable[[int], Any]] = {
    "@agent generator": plain,
    "pydantic-ai": pydantic_ai,
    "langgraph": langgraph,
    "openai-agents": openai_agents,
    "adk": adk,
}


async def one_stream(client: Any, deltas: int) -> float:
    """events/s of one stream of ``deltas`` chunks."""
    started = time.perf_counter()
    chunks = 0
    text: list[str] = []
    async for event in client.stream("go"):
        if isinstance(event, TaskArtifactUpdateEvent):
            chunks += 1
            text.append(event.artifact.text_content)
    elapsed = time.perf_counter() - started
    if chunks != deltas or "".join(text) != TOKEN * deltas:
        raise AssertionError(f"expected {deltas} chunks of {TOKEN!r}, got {chunks}")
    return chunks / elapsed


async def alone(name: str, obj: Any, deltas: int) -> float:
    """deltas/s of the framework's own stream, consumed directly."""
    started = time.perf_counter()
    count = await ALONE[name](obj)
    elapsed = time.perf_counter() - started
    if count != deltas:
        raise AssertionError(f"{name} alone: expected {deltas} deltas, got {count}")
    return count / elapsed


async def discarded(executor: Any, deltas: int, turn: int) -> None:
    """One turn of ``executor`` (a new context) on a queue that drops its events: the framework plus its adapter."""
    chunks = 0

    async def sink(event: Any) -> None:
        nonlocal chunks
        chunks += isinstance(event, TaskArtifactUpdateEvent)

    message = Message(message_id=f"m-{turn}", role=Role.USER, parts=[Part(text="go")])
    context = RequestContext(task_id=f"t-{turn}", context_id=f"c-{turn}", message=message)
    await executor.execute(context, EventQueue(sink))
    if chunks != deltas:
        raise AssertionError(f"expected {deltas} chunks, got {chunks}")


async def cpu(work: Any) -> float:
    """CPU seconds of this process while ``work`` (an awaitable) runs."""
    started = time.process_time()
    await work
    return time.process_time() - started


async def main(deltas: int, rounds: int) -> None:
    objects = {name: make(deltas) for name, make in AGENTS.items()}
    executors = {name: as_executor(make(deltas)) for name, make in AGENTS.items()}
    servers = {name: InProcessClient(make(deltas)) for name, make in AGENTS.items()}
    clients = {name: await server.__aenter__() for name, server in servers.items()}
    served: dict[str, list[float]] = {name: [] for name in AGENTS}
    bare: dict[str, list[float]] = {name: [] for name in ALONE}
    # CPU seconds per stream: served, the framework alone, the framework + adapter with events discarded
    cpu_served: dict[str, list[float]] = {name: [] for name in AGENTS}
    cpu_alone: dict[str, list[float]] = {name: [] for name in ALONE}
    cpu_adapter: dict[str, list[float]] = {name: [] for name in ALONE}
    turn = 0
    try:
        for name, client in clients.items():  # warm-up: imports, first-call caches
            await one_stream(client, deltas)
            if name in ALONE:
                await alone(name, objects[name], deltas)
                turn += 1
                await discarded(executors[name], deltas, turn)
        # Every framework is imported and warm: freeze that heap, and start each measurement from a collected one,
        # so a full collection (over 100 ms here with four frameworks loaded) lands in no measurement by chance.
        gc.collect()
        gc.freeze()
        for _ in range(rounds):
            for name, client in clients.items():
                gc.collect()
                started = time.process_time()
                served[name].append(await one_stream(client, deltas))
                cpu_served[name].append(time.process_time() - started)
                if name in ALONE:
                    gc.collect()
                    started = time.process_time()
                    bare[name].append(await alone(name, objects[name], deltas))
                    cpu_alone[name].append(time.process_time() - started)
                    turn += 1
                    gc.collect()
                    cpu_adapter[name].append(await cpu(discarded(executors[name], deltas, turn)))
    finally:
        for server in servers.values():
            await server.__aexit__(None, None, None)
    base = statistics.median(served["@agent generator"])

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"

    def us(values: list[float]) -> float:
        return statistics.median(values) / deltas * 1e6

    print(f"{deltas} deltas per stream, {rounds} rounds, medians [min-max]\n")
    print("| agent | served: events/s | vs @agent | framework alone: deltas/s | served vs alone |")
    print("|---|---|---|---|---|")
    for name, values in served.items():
        median = statistics.median(values)
        own = f"{cell(bare[name])} | {median / statistics.median(bare[name]):.2f}x" if name in bare else "- | -"
        print(f"| {name} | {cell(values)} | {median / base:.2f}x | {own} |")
    plain = us(cpu_served["@agent generator"])
    print(f"\nCPU µs per delta (medians); the plain generator served: {plain:.1f}\n")
    print("| agent | framework alone | + adapter, events discarded | served | adapter's own | relaykit's (the rest) |")
    print("|---|---|---|---|---|---|")
    for name in ALONE:
        a, b, c = us(cpu_alone[name]), us(cpu_adapter[name]), us(cpu_served[name])
        print(f"| {name} | {a:.1f} | {b:.1f} | {c:.1f} | {b - a:+.1f} | {c - b:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(main(options.deltas, options.rounds))
