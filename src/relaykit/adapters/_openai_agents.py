"""OpenAI Agents SDK: serve an ``Agent`` as an A2A agent, and call a remote A2A agent as a ``FunctionTool``.

Mapping (``_base`` states what every adapter guarantees):

* a turn is one ``Runner.run_streamed`` run; its text deltas (``response.output_text.delta``) stream as the turn's
  artifact, a ``tool_called`` item is a WORKING update naming the tool. The SDK runs the agent in a task of its own:
  when ``execute`` is cancelled the run is cancelled with it (``cancel(mode="immediate")``), so no model call follows;
* memory: the SDK's ``Session`` protocol, implemented on relaykit's conversation store (``_StoredSession``: the
  context's input items, loaded at the start of a turn and stored at its end); a paused run's ``RunState`` is stored
  with them;
* the run context: ``context=`` when given, else ``{"conversation_id": <A2A context id>}`` (a mapping, so a paused
  run's state serialises; tools can read it);
* tool approvals (``needs_approval``) are INPUT_REQUIRED: one question per call, the calls with their arguments as
  a data part ``{"toolApprovals": [...]}``; the answer on the same task approves (a yes-like text or
  ``{"approved": true}``) or rejects (with the user's words) every waiting call, and the run resumes from its stored
  ``RunState``. A new task in the same context while calls wait drops the paused run and starts from the new input;
* ``final_output``: text completes with the streamed text; any other output type completes with a data part.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, Runner, RunState, function_tool
from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings
from openai.types.responses import ResponseTextDeltaEvent
from pydantic_core import to_jsonable_python

from relaykit._card import AgentCard
from relaykit._types import Part
from relaykit.adapters._base import FrameworkExecutor, TextStream, approved, derive_card, first_paragraph, user_answer
from relaykit.adapters._conversations import ConversationStore
from relaykit.adapters._remote import RemoteAgent
from relaykit.client._client import Client
from relaykit.server._context import RequestContext
from relaykit.server._queue import EventQueue

__all__ = ["OpenAIAgentsExecutor", "adapt", "openai_agents_tool"]


class _StoredSession:
    """The SDK's ``Session`` protocol over one turn's copy of the stored items (stored by the executor)."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, items: list[TResponseInputItem]) -> None:
        self.session_id = session_id
        self.items = items

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return list(self.items if limit is None else self.items[-limit:] if limit > 0 else [])

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> TResponseInputItem | None:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


class OpenAIAgentsExecutor(FrameworkExecutor):
    """Serves an OpenAI Agents SDK ``Agent``; ``context``, ``run_config`` and ``max_turns`` go to every run."""

    kind = "openai-agents"

    def __init__(
        self,
        agent: Agent[Any],
        *,
        card: AgentCard | None = None,
        conversations: ConversationStore | None = None,
        context: Any = None,
        run_config: Any = None,
        max_turns: int | None = None,
    ) -> None:
        self.agent = agent
        self.context = context
        self.run_config = run_config
        self.max_turns = max_turns
        super().__init__(agent, card=card, conversations=conversations)

    def derive_card(self) -> AgentCard:
        agent = self.agent
        description = first_paragraph(agent.handoff_description) or first_paragraph(agent.instructions)
        tools = [
            (tool.name, first_paragraph(getattr(tool, "description", "")))
            for tool in agent.tools
            if hasattr(tool, "name")
        ]
        return derive_card(agent.name, description, tools)

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = await self.begin(context, queue)
        async with self.turn(context) as key:
            stored = await self.conversations.load(key)
            state = json.loads(stored) if stored is not None else {"items": [], "paused": None}
            session = _StoredSession(context.context_id, state["items"])
            run_input: Any = context.get_user_input()
            if state["paused"] is not None and context.task is not None:
                run_input = await self._resume(context, state["paused"])
            options: dict[str, Any] = {}
            if self.run_config is not None:
                options["run_config"] = self.run_config
            if self.max_turns is not None:
                options["max_turns"] = self.max_turns
            result = Runner.run_streamed(
                self.agent,
                run_input,
                context=self.context if self.context is not None else {"conversation_id": context.context_id},
                session=session,
                **options,
            )
            text = TextStream(updater)
            try:
                async for event in result.stream_events():
                    if event.type == "raw_response_event":
                        if isinstance(event.data, ResponseTextDeltaEvent):
                            await text.add(event.data.delta)
                    elif event.type == "run_item_stream_event" and event.name == "tool_called":
                        raw = getattr(event.item, "raw_item", None)
                        name = getattr(raw, "name", None) or getattr(event.item, "type", "tool")
                        await self.tool_called(updater, str(name))
            finally:
                if not result.is_complete:
                    # Cancelled (or failed) here: stop the SDK's own run task too, so no model call follows.
                    result.cancel()
            paused = result.to_state().to_string() if result.interruptions else None
            # Stored before the outcome is published: the next turn finds it.
            await self.conversations.save(key, json.dumps({"items": session.items, "paused": paused}).encode())
        await text.close()
        if result.interruptions:
            calls = [
                {"callId": getattr(item.raw_item, "call_id", ""), "toolName": item.name, "args": _args(item)}
                for item in result.interruptions
            ]
            questions = "\n".join(
                f"Approve the call to {item.name}? Answer yes or no." for item in result.interruptions
            )
            await updater.requires_input(self.question(updater, questions, {"toolApprovals": calls}))
            return
        output = result.final_output
        if isinstance(output, str):
            if not text.started:
                await text.add(output)
                await text.close()
        elif output is not None:
            await updater.artifact(Part(data=to_jsonable_python(output, fallback=str)), name="output")
        await updater.complete()

    async def _resume(self, context: RequestContext, paused: str) -> RunState[Any, Agent[Any]]:
        state = await RunState.from_string(self.agent, paused)
        text, data = user_answer(context)
        yes = approved(text, data)
        for item in state.get_interruptions():
            if yes:
                state.approve(item)
            else:
                state.reject(item, rejection_message=f"The user denied this call: {text}" if text else None)
        return state


def _args(item: Any) -> Any:
    raw = getattr(getattr(item, "raw_item", None), "arguments", None)
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return to_jsonable_python(raw, fallback=str)


def adapt(agent: Agent[Any], **options: Any) -> OpenAIAgentsExecutor:
    """The executor for an OpenAI Agents SDK ``Agent`` (``relaykit.adapters.as_executor`` calls this)."""
    return OpenAIAgentsExecutor(agent, **options)


async def openai_agents_tool(
    target: str | Client,
    *,
    name: str | None = None,
    description: str | None = None,
    client_options: dict[str, Any] | None = None,
) -> FunctionTool:
    """An OpenAI Agents SDK ``FunctionTool`` that asks the remote A2A agent at ``target`` (a base URL or a
    ``Client``).

    Name and description come from the remote card unless given. The remote conversation follows the run
    context's ``conversation_id`` (a mapping key or an attribute; relaykit's adapter sets it), else one per tool.
    A remote question comes back as the tool's answer; the next call continues that remote task.

    >>> # tool = await openai_agents_tool("http://localhost:8001"); agent = Agent(name="a", tools=[tool])
    """
    remote = RemoteAgent(target, client_options=client_options)
    if name is None or description is None:
        card_name, card_description = await remote.describe()
        name = name or card_name
        description = description or card_description

    async def ask(ctx: RunContextWrapper[Any], message: str) -> str:
        run_context = ctx.context
        if isinstance(run_context, dict):
            conversation = run_context.get("conversation_id")
        else:
            conversation = getattr(run_context, "conversation_id", None)
        return await remote.ask(message, conversation=str(conversation or ""))

    return function_tool(ask, name_override=name, description_override=description)
