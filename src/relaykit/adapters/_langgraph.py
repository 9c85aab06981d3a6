"""LangGraph: serve a compiled graph as an A2A agent, and call a remote A2A agent as a LangChain tool.

Mapping (``_base`` states what every adapter guarantees):

* a turn is one ``graph.astream(..., stream_mode=["messages", "updates"])`` run in ``execute``'s coroutine, with
  ``thread_id`` = the A2A context id; the text of AI messages (model token chunks, or whole messages a node returns)
  streams as the turn's artifact; an AI message's tool calls are WORKING updates naming the tools;
* input: ``{"messages": [HumanMessage(text)]}`` by default (``input_key`` names another channel, which gets the
  text; a message whose only content is a JSON object data part is given to the graph as it is);
  ``make_input(context)`` replaces both;
* memory: a graph compiled without a checkpointer (or with LangGraph's ``InMemorySaver``) runs with
  ``ConversationSaver``, kept with relaykit's tasks (``_lg_checkpoint``); a graph compiled with another checkpointer
  keeps it (its threads are then keyed by context id only, not by tenant and owner);
* ``interrupt(value)`` is INPUT_REQUIRED: the question is ``value`` when it is text (or its ``"question"``), and
  the interrupts are a data part ``{"interrupts": [{"id", "value"}]}``; the answer on the same task resumes with
  ``Command(resume=answer)`` (the data part's value, else the text; several interrupts get it by id). A new task
  while an interrupt waits starts a new run from the new input;
* the final answer: the streamed text, else the last AI message; a ``structured_response`` (prebuilt agents with a
  response format) is a data part; a graph without a ``messages`` channel completes with its output values as a
  data part.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, Interrupt
from pydantic_core import to_jsonable_python

from relaykit._card import AgentCard
from relaykit._types import Part
from relaykit.adapters._base import FrameworkExecutor, TextStream, derive_card, first_paragraph, user_answer
from relaykit.adapters._conversations import ConversationKey, ConversationStore
from relaykit.adapters._lg_checkpoint import KIND, ConversationSaver, scope_config
from relaykit.adapters._remote import RemoteAgent
from relaykit.client._client import Client
from relaykit.server._context import RequestContext
from relaykit.server._queue import EventQueue
from relaykit.server._updater import TaskUpdater

__all__ = ["LangGraphExecutor", "adapt", "langchain_tool"]

_INTERRUPT = "__interrupt__"


def _text(content: Any) -> str:
    """The text of a message's content (a string, or a list of content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for block in content:
            if isinstance(block, str):
                out.append(block)
            elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                out.append(block["text"])
        return "".join(out)
    return ""


def _messages(update: Any) -> list[BaseMessage]:
    if isinstance(update, dict):
        found = update.get("messages")
        if isinstance(found, BaseMessage):
            return [found]
        if isinstance(found, list):
            return [m for m in found if isinstance(m, BaseMessage)]
    return []


class LangGraphExecutor(FrameworkExecutor):
    """Serves a compiled LangGraph graph (a ``Pregel``)."""

    kind = KIND

    def __init__(
        self,
        graph: Any,
        *,
        card: AgentCard | None = None,
        conversations: ConversationStore | None = None,
        input_key: str = "messages",
        make_input: Callable[[RequestContext], Any] | None = None,
        config: RunnableConfig | None = None,
    ) -> None:
        self.input_key = input_key
        self.make_input = make_input
        self.base_config: RunnableConfig = config or {}
        self.saver: ConversationSaver | None = None
        checkpointer = getattr(graph, "checkpointer", None)
        if checkpointer is None or isinstance(checkpointer, InMemorySaver):
            # Memory that lives with the tasks (durable, shared by replicas) instead of none or the process's own.
            self.saver = ConversationSaver(lambda: self.conversations)
            graph = graph.copy(update={"checkpointer": self.saver})
        self.graph = graph
        super().__init__(graph, card=card, conversations=conversations)

    def derive_card(self) -> AgentCard:
        graph = self.graph
        name = getattr(graph, "name", None) or "LangGraph"
        description = first_paragraph(getattr(graph, "description", None))
        tools: list[tuple[str, str]] = []
        for node in getattr(graph, "nodes", {}).values():
            # A prebuilt ToolNode declares its tools by name.
            for tool_name, tool in (getattr(getattr(node, "bound", None), "tools_by_name", None) or {}).items():
                tools.append((tool_name, first_paragraph(getattr(tool, "description", ""))))
        return derive_card(name, description, tools)

    def _config(self, context: RequestContext) -> RunnableConfig:
        configurable = {
            **self.base_config.get("configurable", {}),
            "thread_id": context.context_id,
            **scope_config(context.call.tenant, context.call.user),
        }
        return {**self.base_config, "configurable": configurable}

    def _memory(self, key: ConversationKey) -> contextlib.AbstractAsyncContextManager[Any]:
        return self.saver.thread(key) if self.saver is not None else contextlib.nullcontext()

    def _input(self, context: RequestContext) -> Any:
        if self.make_input is not None:
            return self.make_input(context)
        text, data = user_answer(context)
        if isinstance(data, dict) and not text:
            return data
        if self.input_key == "messages":
            return {"messages": [HumanMessage(content=text)]}
        return {self.input_key: text}

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = await self.begin(context, queue)
        config = self._config(context)
        # The thread is stored when the block ends well, before the outcome below is published: the next turn finds
        # it. A failed or cancelled run leaves it as it was.
        async with self.turn(context) as key, self._memory(key):
            text = TextStream(updater)
            interrupts = await self._run(context, config, updater, text)
            values = None if interrupts else (await self.graph.aget_state(config)).values
        if interrupts:
            await text.close()
            await updater.requires_input(self.question(updater, _question(interrupts), _interrupt_data(interrupts)))
            return
        await self._finish(updater, text, values)

    async def _run(
        self, context: RequestContext, config: RunnableConfig, updater: TaskUpdater, text: TextStream
    ) -> list[Interrupt]:
        graph_input: Any = None
        if context.task is not None:
            waiting = (await self.graph.aget_state(config)).interrupts
            if waiting:
                answer_text, data = user_answer(context)
                answer = data if data is not None else answer_text
                graph_input = Command(resume=answer if len(waiting) == 1 else {i.id: answer for i in waiting})
        if graph_input is None:
            graph_input = self._input(context)
        interrupts: list[Interrupt] = []
        last_id: str | None = None
        async for mode, chunk in self.graph.astream(graph_input, config, stream_mode=["messages", "updates"]):
            if mode == "messages":
                message = chunk[0]
                if isinstance(message, AIMessage):
                    content = _text(message.content)
                    if content:
                        if text.started and message.id != last_id:
                            await text.add("\n\n")  # two AI messages in one turn: keep them apart
                        last_id = message.id
                        await text.add(content)
            elif isinstance(chunk, dict):
                for node, update in chunk.items():
                    if node == _INTERRUPT:
                        interrupts.extend(i for i in update if isinstance(i, Interrupt))
                        continue
                    for message in _messages(update):
                        if isinstance(message, AIMessage):
                            for call in message.tool_calls:
                                await self.tool_called(updater, call["name"])
        return interrupts

    async def _finish(self, updater: TaskUpdater, text: TextStream, values: Any) -> None:
        structured = values.get("structured_response") if isinstance(values, dict) else None
        if isinstance(values, dict) and "messages" in values:
            if not text.started:
                final = next((m for m in reversed(_messages(values)) if isinstance(m, AIMessage)), None)
                if final is not None:
                    await text.add(_text(final.content))
            await text.close()
        else:
            await text.close()
            if structured is None and values:
                structured = values
        if structured is not None:
            await updater.artifact(Part(data=to_jsonable_python(structured, fallback=str)), name="output")
        await updater.complete()


def _question(interrupts: list[Interrupt]) -> str:
    lines = []
    for item in interrupts:
        value = item.value
        if isinstance(value, dict) and isinstance(value.get("question"), str):
            value = value["question"]
        lines.append(value if isinstance(value, str) else json.dumps(to_jsonable_python(value, fallback=str)))
    return "\n".join(lines)


def _interrupt_data(interrupts: list[Interrupt]) -> dict[str, Any]:
    return {"interrupts": [{"id": i.id, "value": to_jsonable_python(i.value, fallback=str)} for i in interrupts]}


def adapt(graph: Any, **options: Any) -> LangGraphExecutor:
    """The executor for a compiled LangGraph graph (``relaykit.adapters.as_executor`` calls this)."""
    return LangGraphExecutor(graph, **options)


async def langchain_tool(
    target: str | Client,
    *,
    name: str | None = None,
    description: str | None = None,
    client_options: dict[str, Any] | None = None,
) -> BaseTool:
    """A LangChain tool (for LangGraph's ``ToolNode``, prebuilt agents, or ``model.bind_tools``) that asks the remote
    A2A agent at ``target`` (a base URL or a ``Client``).

    Name and description come from the remote card unless given. Each LangGraph thread has its own remote
    conversation; a remote question comes back as the tool's answer, and the next call continues that remote task.

    >>> # tool = await langchain_tool("http://localhost:8001"); agent = create_react_agent(model, [tool])
    """
    remote = RemoteAgent(target, client_options=client_options)
    if name is None or description is None:
        card_name, card_description = await remote.describe()
        name = name or card_name
        description = description or card_description

    async def ask(message: str, config: RunnableConfig) -> str:
        thread = (config.get("configurable") or {}).get("thread_id", "")
        return await remote.ask(message, conversation=str(thread or ""))

    return StructuredTool.from_function(coroutine=ask, name=name, description=description)
