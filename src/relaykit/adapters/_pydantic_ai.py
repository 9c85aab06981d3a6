"""pydantic-ai: serve an ``Agent`` as an A2A agent, and call a remote A2A agent as a pydantic-ai ``Tool``.

Mapping (``_base`` states what every adapter guarantees):

* a turn is one ``agent.iter`` run, driven in ``execute``'s coroutine; text parts and deltas of the model's responses
  stream as the turn's artifact, a function tool call is a WORKING update naming the tool;
* the conversation is pydantic-ai's own ``Conversation`` (messages, usage, conversation id = the A2A context id, the
  deferred tool calls a paused run waits on), stored whole with ``ConversationTypeAdapter`` after each turn;
* output ``str`` completes with the streamed text, any other output type completes with a data part (its JSON),
  ``DeferredToolRequests`` (tools with ``requires_approval`` / ``ApprovalRequired``, ``CallDeferred``, external
  tools: list it in ``output_type``) is INPUT_REQUIRED: a question per call (text) and the calls with their
  arguments (data part ``{"deferredToolCalls": [...]}``), so the human sees what they approve;
* the answer on the same task resumes the run: a yes-like text (``APPROVALS``) or ``{"approved": true}`` approves
  every waiting call, anything else denies them with the user's words; calls waiting for a result or an answer get
  the data part's value, else the text; a data part ``{"approvals": {id: bool}, "calls": {id: value}}`` answers per
  call. A new task in the same context while calls wait denies them (the user moved on) and runs the new prompt.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import (
    Agent,
    ConversationTypeAdapter,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolCallEvent,
    PartDeltaEvent,
    PartStartEvent,
    RunContext,
    TextPart,
    TextPartDelta,
    Tool,
    ToolDenied,
)
from pydantic_ai.conversation import Conversation
from pydantic_core import to_jsonable_python

from relaykit._card import AgentCard
from relaykit._types import Part
from relaykit.adapters._base import FrameworkExecutor, TextStream, approved, derive_card, first_paragraph, user_answer
from relaykit.adapters._conversations import ConversationStore
from relaykit.adapters._remote import RemoteAgent
from relaykit.client._client import Client
from relaykit.server._context import RequestContext
from relaykit.server._queue import EventQueue
from relaykit.server._updater import TaskUpdater

__all__ = ["PydanticAIExecutor", "adapt", "pydantic_ai_tool"]

_MOVED_ON = "The user sent a new request instead of answering."


class PydanticAIExecutor(FrameworkExecutor):
    """Serves a pydantic-ai ``Agent``; ``deps`` and ``model_settings`` are passed to every run."""

    kind = "pydantic-ai"

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        card: AgentCard | None = None,
        conversations: ConversationStore | None = None,
        deps: Any = None,
        model_settings: Any = None,
    ) -> None:
        self.agent = agent
        self.deps = deps
        self.model_settings = model_settings
        super().__init__(agent, card=card, conversations=conversations)

    def derive_card(self) -> AgentCard:
        agent = self.agent
        name = agent.name or "agent"
        description = agent.description if isinstance(agent.description, str) else ""
        if not description:
            # The first static instruction, when there is one (dynamic instructions need a run to be known).
            found = [getattr(i, "instruction", i) for i in getattr(agent, "_instructions", None) or []]
            texts = [i for i in found if isinstance(i, str)]
            description = first_paragraph(texts[0]) if texts else ""
        tools: list[tuple[str, str]] = []
        for toolset in agent.toolsets:
            for tool_name, tool in (getattr(toolset, "tools", None) or {}).items():
                tools.append((tool_name, first_paragraph(getattr(tool, "description", "") or "")))
        return derive_card(name, description, tools)

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = await self.begin(context, queue)
        async with self.turn(context) as key:
            stored = await self.conversations.load(key)
            conversation = ConversationTypeAdapter.validate_json(stored) if stored is not None else None
            prompt, results = _input(context, conversation)
            text = TextStream(updater)
            async with self.agent.iter(
                prompt,
                conversation=conversation,
                conversation_id=None if conversation is not None else context.context_id,
                deferred_tool_results=results,
                deps=self.deps,
                model_settings=self.model_settings,
            ) as run:
                async for node in run:
                    if Agent.is_model_request_node(node):
                        async with node.stream(run.ctx) as events:
                            async for event in events:
                                if isinstance(event, PartDeltaEvent):
                                    if isinstance(event.delta, TextPartDelta):
                                        await text.add(event.delta.content_delta)
                                elif isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                                    await text.add(event.part.content)
                    elif Agent.is_call_tools_node(node):
                        async with node.stream(run.ctx) as events:
                            async for event in events:
                                if isinstance(event, FunctionToolCallEvent):
                                    await self.tool_called(updater, event.part.tool_name)
                result = run.result
            if result is None:  # pragma: no cover - iter() always ends with a result unless it raised
                raise RuntimeError("the pydantic-ai run ended without a result")
            # Saved before the outcome is published: a client that sees it and sends the next turn finds it stored.
            await self.conversations.save(key, ConversationTypeAdapter.dump_json(result.conversation))
        await self._finish(updater, text, result.output)

    async def _finish(self, updater: TaskUpdater, text: TextStream, output: Any) -> None:
        if isinstance(output, DeferredToolRequests):
            await text.close()
            await updater.requires_input(self.question(updater, _questions(output), _deferred_data(output)))
            return
        if isinstance(output, str):
            if not text.started:
                await text.add(output)
            await text.close()
        else:
            await text.close()
            if output is not None:
                await updater.artifact(Part(data=to_jsonable_python(output, fallback=str)), name="output")
        await updater.complete()


def _input(context: RequestContext, conversation: Conversation | None) -> tuple[str | None, DeferredToolResults | None]:
    """The run's prompt and deferred tool results for this message."""
    text, data = user_answer(context)
    pending = conversation.deferred_tool_requests if conversation is not None else None
    if pending is None:
        return text, None
    if context.task is None:
        # A new task while calls wait: deny them, so the history has no unanswered call, and run the new prompt.
        denied = {c.tool_call_id: ToolDenied(_MOVED_ON) for c in pending.approvals}
        return text, pending.build_results(approvals=denied, calls={c.tool_call_id: _MOVED_ON for c in pending.calls})
    if isinstance(data, dict) and ("approvals" in data or "calls" in data):
        return None, pending.build_results(approvals=data.get("approvals") or {}, calls=data.get("calls") or {})
    yes = approved(text, data)
    approvals = {
        c.tool_call_id: True if yes else ToolDenied(f"The user denied this call: {text}" if text else "Denied.")
        for c in pending.approvals
    }
    calls = {c.tool_call_id: data if data is not None else text for c in pending.calls}
    return None, pending.build_results(approvals=approvals, calls=calls)


def _questions(requests: DeferredToolRequests) -> str:
    lines = [f"Approve the call to {c.tool_name}? Answer yes or no." for c in requests.approvals]
    for call in requests.calls:
        args = call.args_as_dict()
        if requests.kind(call.tool_call_id) == "question" and isinstance(args.get("question"), str):
            lines.append(args["question"])
        else:
            lines.append(f"Provide the result of {call.tool_name}.")
    return "\n".join(lines)


def _deferred_data(requests: DeferredToolRequests) -> dict[str, Any]:
    calls = [*requests.approvals, *requests.calls]
    return {
        "deferredToolCalls": [
            {
                "toolCallId": c.tool_call_id,
                "toolName": c.tool_name,
                "kind": requests.kind(c.tool_call_id),
                "args": to_jsonable_python(c.args_as_dict(), fallback=str),
            }
            for c in calls
        ]
    }


def adapt(agent: Agent[Any, Any], **options: Any) -> PydanticAIExecutor:
    """The executor for a pydantic-ai ``Agent`` (``relaykit.adapters.as_executor`` calls this)."""
    return PydanticAIExecutor(agent, **options)


async def pydantic_ai_tool(
    target: str | Client,
    *,
    name: str | None = None,
    description: str | None = None,
    client_options: dict[str, Any] | None = None,
) -> Tool[Any]:
    """A pydantic-ai ``Tool`` that asks the remote A2A agent at ``target`` (a base URL or a ``Client``).

    Name and description come from the remote card unless given. Each pydantic-ai conversation has its own remote
    conversation; a remote question comes back as the tool's answer, and the next call continues that remote task.

    >>> # tool = await pydantic_ai_tool("http://localhost:8001"); agent = Agent(model, tools=[tool])
    """
    remote = RemoteAgent(target, client_options=client_options)
    if name is None or description is None:
        card_name, card_description = await remote.describe()
        name = name or card_name
        description = description or card_description

    async def ask(ctx: RunContext[Any], message: str) -> str:
        return await remote.ask(message, conversation=ctx.conversation_id or "")

    return Tool(ask, takes_ctx=True, name=name, description=description)
