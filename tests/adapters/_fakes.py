"""One agent per framework, each on its framework's own offline model (no network), all behaving alike.

The latest user text decides what the model does (``Probe`` records it, thread-safely, for the tests):

  ``slow``        one text chunk ``first``, then it waits (60 s): a cancel must interrupt it
  ``boom``        the model raises ``RuntimeError(SECRET)``
  ``delete N``    the tool ``delete_note(name=N)``, which needs a human's approval; its result is the answer
  ``lookup Q``    the tool ``lookup(query=Q)`` (no approval); its result ``found Q`` is the answer
  ``remote M``    the tool ``remote`` (a remote A2A agent, given by the test) with message M; answer ``remote said: R``
  anything T      ``You said: T (turn N)``, streamed word by word; N counts the user turns the model sees

Models: pydantic-ai ``FunctionModel``; LangGraph nodes over a langchain-core ``BaseChatModel``; an OpenAI Agents SDK
custom ``Model`` (building its events with the SDK's ``ScriptedModel``); an ADK custom ``BaseLlm``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

SECRET = "secret internals 1234"
SLOW_SECONDS = 60.0


@dataclass
class Probe:
    """What the model did, readable from the test's thread while the server runs in another."""

    calls: int = 0
    started: threading.Event = field(default_factory=threading.Event)  # ``slow`` sent its first chunk
    cancelled: threading.Event = field(default_factory=threading.Event)  # ``slow`` was interrupted
    prompts: list[str] = field(default_factory=list)


def words(text: str) -> list[str]:
    parts = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(parts)]


async def slow(probe: Probe) -> None:
    """The ``slow`` model's wait after its first chunk; records the cancellation that must end it."""
    probe.started.set()
    try:
        await asyncio.sleep(SLOW_SECONDS)
    except asyncio.CancelledError:
        probe.cancelled.set()
        raise


def plan(prompt: str, turns: int) -> tuple[str, Any]:
    """(action, argument) for the latest user text."""
    for action in ("delete", "lookup", "remote"):
        if prompt.startswith(action + " "):
            return action, prompt[len(action) + 1 :].strip()
    if prompt in ("slow", "boom"):
        return prompt, None
    return "say", f"You said: {prompt} (turn {turns})"


def tool_answer(name: str, result: Any) -> str:
    return f"remote said: {result}" if name == "remote" else str(result)


# --- pydantic-ai --------------------------------------------------------------------------------------------------


def pydantic_ai_agent(probe: Probe, extra_tools: list[Any] | None = None) -> Any:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    async def model(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        probe.calls += 1
        last = messages[-1]
        returned = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if returned:
            for w in words(tool_answer(returned[0].tool_name, returned[0].content)):
                yield w
            return
        prompts = [
            p.content
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        ]
        probe.prompts.append(prompts[-1])
        action, arg = plan(prompts[-1], len(prompts))
        if action == "slow":
            yield "first"
            await slow(probe)
        elif action == "boom":
            raise RuntimeError(SECRET)
        elif action in ("delete", "lookup", "remote"):
            key = {"delete": "name", "lookup": "query", "remote": "message"}[action]
            tool = {"delete": "delete_note"}.get(action, action)
            yield {0: DeltaToolCall(name=tool, json_args=f'{{"{key}": "{arg}"}}', tool_call_id="call-1")}
        else:
            for w in words(arg):
                yield w

    agent = Agent(
        FunctionModel(stream_function=model),
        name="notes",
        description="Test notes agent.",
        output_type=[str, DeferredToolRequests],
        tools=extra_tools or [],
    )

    @agent.tool_plain(requires_approval=True)
    def delete_note(name: str) -> str:
        """Delete the note called NAME."""
        return f"Deleted note {name}."

    @agent.tool_plain
    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {query}"

    return agent


# --- LangGraph ----------------------------------------------------------------------------------------------------


def langgraph_graph(probe: Probe, extra_tools: list[Any] | None = None) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import interrupt

    class Speaker(BaseChatModel):
        """Says its ``reply`` token by token (``slow``: one token, then waits)."""

        reply: str

        @property
        def _llm_type(self) -> str:
            return "speaker"

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply))])

        async def _astream(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> AsyncIterator[ChatGenerationChunk]:
            if self.reply == "slow":
                chunk = ChatGenerationChunk(message=AIMessageChunk(content="first"))
                if run_manager is not None:
                    await run_manager.on_llm_new_token("first", chunk=chunk)
                yield chunk
                await slow(probe)
            for w in words(self.reply):
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=w))
                if run_manager is not None:
                    await run_manager.on_llm_new_token(w, chunk=chunk)
                yield chunk

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {query}"

    async def agent(state: MessagesState) -> dict[str, Any]:
        probe.calls += 1
        messages = state["messages"]
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = tool_answer(last.name or "", last.content)
            return {"messages": [await Speaker(reply=reply).ainvoke(messages)]}
        prompts = [m.content for m in messages if isinstance(m, HumanMessage) and isinstance(m.content, str)]
        probe.prompts.append(prompts[-1])
        action, arg = plan(prompts[-1], len(prompts))
        if action == "boom":
            raise RuntimeError(SECRET)
        if action == "delete":
            answer = interrupt(f"Delete note {arg}?")
            done = f"Deleted note {arg}." if str(answer).strip().lower() == "yes" else f"Kept note {arg}."
            return {"messages": [AIMessage(content=done)]}
        if action in ("lookup", "remote"):
            key = "query" if action == "lookup" else "message"
            call = {"name": action, "args": {key: arg}, "id": f"call-{len(messages)}", "type": "tool_call"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        return {"messages": [await Speaker(reply="slow" if action == "slow" else arg).ainvoke(messages)]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup, *(extra_tools or [])]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    builder.add_edge("agent", END)
    return builder.compile(name="notes")


# --- OpenAI Agents SDK --------------------------------------------------------------------------------------------


def openai_agents_agent(probe: Probe, extra_tools: list[Any] | None = None) -> Any:
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.models.interface import Model
    from agents.testing import ModelStep, ScriptedModel, function_call
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText, ResponseTextDeltaEvent

    def message(text: str) -> ModelStep:
        parts = [ResponseOutputText(text=w, type="output_text", annotations=[], logprobs=[]) for w in words(text)]
        item = ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=parts)
        return ModelStep(output=[item])

    set_tracing_disabled(True)  # no trace exporter offline
    calls_by_id: dict[str, str] = {}

    def step(items: Any) -> tuple[str, ModelStep | None]:
        items = items if isinstance(items, list) else [{"role": "user", "content": items}]
        last = items[-1]
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            return "say", message(tool_answer(calls_by_id.get(str(last.get("call_id")), ""), last.get("output")))
        users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
        prompt = str(users[-1]["content"]) if users else ""
        probe.prompts.append(prompt)
        action, arg = plan(prompt, len(users))
        if action in ("delete", "lookup", "remote"):
            key = {"delete": "name", "lookup": "query", "remote": "message"}[action]
            tool = {"delete": "delete_note"}.get(action, action)
            call_id = f"call-{len(items)}"
            calls_by_id[call_id] = tool
            return action, ModelStep(output=[function_call(tool, {key: arg}, call_id=call_id)])
        if action == "slow":
            return action, message("first")
        if action == "boom":
            return action, None
        return action, message(arg)

    class Offline(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            probe.calls += 1
            _action, scripted = step(input)
            if scripted is None:
                raise RuntimeError(SECRET)
            return await ScriptedModel([scripted]).get_response(system_instructions, input, *args, **kwargs)

        async def stream_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> AsyncIterator[Any]:
            probe.calls += 1
            action, scripted = step(input)
            if scripted is None:
                raise RuntimeError(SECRET)
            events = ScriptedModel([scripted]).stream_response(system_instructions, input, *args, **kwargs)
            async for event in events:
                yield event
                if action == "slow" and isinstance(event, ResponseTextDeltaEvent):
                    await slow(probe)

    @function_tool(needs_approval=True)
    def delete_note(name: str) -> str:
        """Delete the note called NAME."""
        return f"Deleted note {name}."

    @function_tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {query}"

    return Agent(
        name="notes",
        handoff_description="Test notes agent.",
        model=Offline(),
        tools=[delete_note, lookup, *(extra_tools or [])],
    )


# --- Google ADK ---------------------------------------------------------------------------------------------------


def adk_agent(probe: Probe, extra_tools: list[Any] | None = None) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.tools.function_tool import FunctionTool
    from google.genai import types

    def said(text: str, partial: bool) -> LlmResponse:
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]), partial=partial)

    class Offline(BaseLlm):
        model: str = "offline"

        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncIterator[Any]:
            probe.calls += 1
            contents = llm_request.contents
            returned = [p.function_response for p in contents[-1].parts or [] if p.function_response]
            if returned:
                response = returned[0].response or {}
                text = tool_answer(returned[0].name or "", response.get("result", response.get("error", response)))
            else:
                prompts = [p.text for c in contents if c.role == "user" for p in c.parts or [] if p.text]
                probe.prompts.append(prompts[-1])
                action, arg = plan(prompts[-1], len(prompts))
                if action == "boom":
                    raise RuntimeError(SECRET)
                if action == "slow":
                    yield said("first", True)
                    await slow(probe)
                if action in ("delete", "lookup", "remote"):
                    key = {"delete": "name", "lookup": "query", "remote": "message"}[action]
                    tool = {"delete": "delete_note"}.get(action, action)
                    call = types.FunctionCall(name=tool, args={key: arg})
                    yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
                    return
                text = arg
            for w in words(text):
                yield said(w, True)
            yield said(text, False)

    def delete_note(name: str) -> str:
        """Delete the note called NAME."""
        return f"Deleted note {name}."

    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {query}"

    return LlmAgent(
        name="notes",
        description="Test notes agent.",
        model=Offline(),
        tools=[FunctionTool(delete_note, require_confirmation=True), lookup, *(extra_tools or [])],
    )


FACTORIES = {
    "pydantic-ai": pydantic_ai_agent,
    "langgraph": langgraph_graph,
    "openai-agents": openai_agents_agent,
    "adk": adk_agent,
}
