"""An OpenAI Agents SDK agent served as an A2A agent, as it is.

    relaykit serve examples/openai_agents_agent.py

Text T ⇒ the answer ``You said: T (turn N)`` streamed word by word as one artifact, N counting the turns of the
conversation (the A2A context: the SDK session is kept by relaykit). ``delete NAME`` ⇒ the tool ``delete_note``
needs approval: INPUT_REQUIRED; answering ``yes`` on that task runs it (``Deleted note NAME.``), anything else
rejects it.

No API key needed: the model is ``OfflineModel`` below, a custom SDK ``Model``. With ``OPENAI_API_KEY`` set, it is
``OPENAI_AGENTS_MODEL`` (default ``gpt-4o-mini``).
"""

import os
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model
from agents.testing import ModelStep, ScriptedModel, function_call
from openai.types.responses import ResponseOutputMessage, ResponseOutputText


def reply_for(items: Any) -> ModelStep:
    """What the offline model answers to this input: an echo (one output text part per word), or a tool call."""
    items = items if isinstance(items, list) else [{"role": "user", "content": items}]
    last = items[-1]
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        text = str(last.get("output"))
    else:
        users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
        prompt = str(users[-1]["content"]) if users else ""
        if prompt.startswith("delete "):
            return ModelStep(output=[function_call("delete_note", {"name": prompt[7:].strip()}, call_id="call-1")])
        text = f"You said: {prompt} (turn {len(users)})"
    words = text.split(" ")
    parts = [
        ResponseOutputText(text=w if i == 0 else " " + w, type="output_text", annotations=[], logprobs=[])
        for i, w in enumerate(words)
    ]
    return ModelStep(
        output=[ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=parts)]
    )


class OfflineModel(Model):
    """A stand-in model: each call scripts one ``ScriptedModel`` step from its input (the text streams per word)."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        return await ScriptedModel([reply_for(input)]).get_response(system_instructions, input, *args, **kwargs)

    def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        return ScriptedModel([reply_for(input)]).stream_response(system_instructions, input, *args, **kwargs)


@function_tool(needs_approval=True)
def delete_note(name: str) -> str:
    """Delete the note called NAME."""
    return f"Deleted note {name}."


if os.environ.get("OPENAI_API_KEY"):
    model: Any = os.environ.get("OPENAI_AGENTS_MODEL", "gpt-4o-mini")
else:
    model = OfflineModel()
    set_tracing_disabled(True)  # nothing to export traces to without a key

agent = Agent(
    name="notes",
    handoff_description="Chats about your notes and deletes one when you approve.",
    instructions="You help the user with their notes. Ask before deleting anything.",
    model=model,
    tools=[delete_note],
)
