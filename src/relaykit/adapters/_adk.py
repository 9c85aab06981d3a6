"""Google ADK: serve an agent (``LlmAgent`` or any ``BaseAgent``) as an A2A agent, and call a remote A2A agent as
an ADK ``FunctionTool``.

Mapping (``_base`` states what every adapter guarantees):

* a turn is one ``Runner.run_async`` with SSE streaming, driven in ``execute``'s coroutine; partial text events
  stream as the turn's artifact (the final event that repeats them is not sent again; a model that does not stream
  has its final text sent whole), a function call is a WORKING update naming the tool;
* memory: the ADK session (app = the agent's name, user = the caller's principal, session id = the A2A context id)
  is rebuilt each turn from its events kept in relaykit's conversation store, run in an ``InMemorySessionService``,
  and its events are stored again at the end of the turn: every replica sees the same session;
* tool confirmation (``FunctionTool(require_confirmation=True)``, ``tool_context.request_confirmation``) is
  INPUT_REQUIRED: one question per call, the calls as a data part ``{"toolConfirmations": [...]}``; the answer on the
  same task is sent back as the ``adk_request_confirmation`` function response (confirmed: a yes-like text or
  ``{"approved": true}``). Other long-running tools wait the same way and get the answer as their result (the data
  part's object, else ``{"result": text}``). A new task while calls wait answers them as not confirmed, then runs;
* the final answer completes the task; an agent's ``output_schema`` output (JSON text) stays text.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from google.adk.agents import BaseAgent, RunConfig
from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from relaykit._card import AgentCard
from relaykit.adapters._base import FrameworkExecutor, TextStream, approved, derive_card, first_paragraph, user_answer
from relaykit.adapters._conversations import ConversationStore
from relaykit.adapters._remote import RemoteAgent
from relaykit.client._client import Client
from relaykit.server._context import RequestContext
from relaykit.server._queue import EventQueue
from relaykit.server._updater import TaskUpdater

__all__ = ["ADKExecutor", "adapt", "adk_tool"]

CONFIRMATION = "adk_request_confirmation"
_MOVED_ON = "The user sent a new request instead of answering."


class ADKExecutor(FrameworkExecutor):
    """Serves a Google ADK agent; ``run_config`` replaces the default (SSE streaming)."""

    kind = "adk"

    def __init__(
        self,
        agent: BaseAgent,
        *,
        card: AgentCard | None = None,
        conversations: ConversationStore | None = None,
        run_config: RunConfig | None = None,
    ) -> None:
        self.agent = agent
        # SSE: the model's partial responses arrive as partial events (the enum sits in a private module).
        self.run_config = run_config or RunConfig.model_validate({"streaming_mode": "sse"})
        super().__init__(agent, card=card, conversations=conversations)

    def derive_card(self) -> AgentCard:
        agent = self.agent
        description = first_paragraph(agent.description) or first_paragraph(getattr(agent, "instruction", ""))
        tools: list[tuple[str, str]] = []
        for tool in getattr(agent, "tools", None) or []:
            name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
            if isinstance(name, str):
                about = getattr(tool, "description", None) or getattr(tool, "__doc__", None) or ""
                tools.append((name, first_paragraph(about)))
        return derive_card(agent.name, description, tools)

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = await self.begin(context, queue)
        app, user, session_id = self.agent.name, context.call.user, context.context_id
        async with self.turn(context) as key:
            stored = await self.conversations.load(key)
            state = json.loads(stored) if stored is not None else {"events": [], "pending": []}
            sessions = InMemorySessionService()
            session = await sessions.create_session(app_name=app, user_id=user, session_id=session_id)
            for raw in state["events"]:
                await sessions.append_event(session, Event.model_validate_json(raw))
            runner = Runner(app_name=app, agent=self.agent, session_service=sessions)
            message = _message(context, state["pending"])
            text = TextStream(updater)
            pending = await self._run(runner, user, session_id, message, updater, text)
            done = await sessions.get_session(app_name=app, user_id=user, session_id=session_id)
            events = [event.model_dump_json(exclude_none=True) for event in (done.events if done else [])]
            # Stored before the outcome is published: the next turn finds it.
            await self.conversations.save(key, json.dumps({"events": events, "pending": pending}).encode())
        await text.close()
        if pending:
            questions = "\n".join(
                f"Approve the call to {p['toolName']}? Answer yes or no."
                if p["kind"] == "confirmation"
                else f"Provide the result of {p['toolName']}."
                for p in pending
            )
            await updater.requires_input(self.question(updater, questions, {"toolConfirmations": pending}))
            return
        await updater.complete()

    async def _run(
        self,
        runner: Runner,
        user: str,
        session_id: str,
        message: types.Content,
        updater: TaskUpdater,
        text: TextStream,
    ) -> list[dict[str, Any]]:
        pending: list[dict[str, Any]] = []
        streamed = False  # partial text arrived since the last complete event (which repeats it)
        events = runner.run_async(user_id=user, session_id=session_id, new_message=message, run_config=self.run_config)
        async with contextlib.aclosing(events):
            async for event in events:
                parts = (event.content.parts if event.content is not None else None) or []
                # Thoughts are the model's reasoning, not its answer.
                content_text = "".join(p.text or "" for p in parts if not p.thought)
                if event.partial:
                    if content_text:
                        streamed = True
                        await text.add(content_text)
                    continue
                if content_text and not streamed:
                    await text.add(content_text)
                streamed = False
                waiting = event.long_running_tool_ids or set()
                for call in event.get_function_calls():
                    if call.name == CONFIRMATION and call.id in waiting:
                        original = (call.args or {}).get("originalFunctionCall") or {}
                        pending.append(
                            {
                                "id": call.id,
                                "kind": "confirmation",
                                "toolName": original.get("name", ""),
                                "args": original.get("args", {}),
                                "hint": ((call.args or {}).get("toolConfirmation") or {}).get("hint", ""),
                            }
                        )
                    elif call.id in waiting:
                        pending.append(
                            {"id": call.id, "kind": "external", "toolName": call.name, "args": call.args or {}}
                        )
                    elif call.name != CONFIRMATION:
                        await self.tool_called(updater, call.name or "tool")
        return pending


def _message(context: RequestContext, pending: list[dict[str, Any]]) -> types.Content:
    """The user content of this turn: the answers to waiting calls on a continuation, else the text."""
    text, data = user_answer(context)
    parts: list[types.Part] = []
    if pending:
        answering = context.task is not None
        yes = answering and approved(text, data)
        for call in pending:
            if call["kind"] == "confirmation":
                response: dict[str, Any] = {"confirmed": yes}
            elif answering:
                response = data if isinstance(data, dict) else {"result": text}
            else:
                response = {"result": _MOVED_ON}
            parts.append(
                types.Part(function_response=types.FunctionResponse(id=call["id"], name=_name(call), response=response))
            )
        if answering:
            return types.Content(role="user", parts=parts)
    parts.append(types.Part(text=text))
    return types.Content(role="user", parts=parts)


def _name(call: dict[str, Any]) -> str:
    return CONFIRMATION if call["kind"] == "confirmation" else str(call["toolName"])


def adapt(agent: BaseAgent, **options: Any) -> ADKExecutor:
    """The executor for a Google ADK agent (``relaykit.adapters.as_executor`` calls this)."""
    return ADKExecutor(agent, **options)


async def adk_tool(
    target: str | Client,
    *,
    name: str | None = None,
    description: str | None = None,
    client_options: dict[str, Any] | None = None,
) -> FunctionTool:
    """An ADK ``FunctionTool`` that asks the remote A2A agent at ``target`` (a base URL or a ``Client``).

    Name and description come from the remote card unless given. Each ADK session has its own remote conversation;
    a remote question comes back as the tool's answer, and the next call continues that remote task.

    >>> # tool = await adk_tool("http://localhost:8001"); agent = LlmAgent(name="a", model=..., tools=[tool])
    """
    remote = RemoteAgent(target, client_options=client_options)
    if name is None or description is None:
        card_name, card_description = await remote.describe()
        name = name or card_name
        description = description or card_description

    async def ask(message: str, tool_context: ToolContext) -> str:
        session = getattr(tool_context, "session", None)
        return await remote.ask(message, conversation=str(getattr(session, "id", "") or ""))

    # ADK declares a function tool from the function's own name and docstring.
    ask.__name__ = name
    ask.__doc__ = f"{description}\n\nArgs:\n  message: what to send to the agent."
    return FunctionTool(ask)
