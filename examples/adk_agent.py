"""A Google ADK agent served as an A2A agent, as it is.

    relaykit serve examples/adk_agent.py

Text T ⇒ the answer ``You said: T (turn N)`` streamed word by word as one artifact, N counting the turns of the
conversation (the ADK session = the A2A context, kept by relaykit). ``delete NAME`` ⇒ the tool ``delete_note``
requires confirmation: INPUT_REQUIRED; answering ``yes`` on that task runs it (``Deleted note NAME.``), anything
else rejects it.

No API key needed: the model is ``OfflineLlm`` below, a custom ADK ``BaseLlm``. With ``GOOGLE_API_KEY`` set, it is
``ADK_MODEL`` (default ``gemini-2.5-flash``).
"""

import os
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools import FunctionTool
from google.genai import types


class OfflineLlm(BaseLlm):
    """A stand-in model: echoes the last user text word by word, and calls ``delete_note`` for ``delete NAME``."""

    model: str = "offline"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = llm_request.contents
        returned = [p.function_response for p in contents[-1].parts or [] if p.function_response]
        if returned:
            response = returned[0].response or {}
            text = str(response.get("result", response.get("error", response)))
        else:
            prompts = [p.text for c in contents if c.role == "user" for p in c.parts or [] if p.text]
            prompt = prompts[-1] if prompts else ""
            if prompt.startswith("delete "):
                call = types.FunctionCall(name="delete_note", args={"name": prompt[7:].strip()})
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
                return
            text = f"You said: {prompt} (turn {len(prompts)})"
        if stream:
            for i, word in enumerate(text.split(" ")):
                chunk = types.Part(text=word if i == 0 else " " + word)
                yield LlmResponse(content=types.Content(role="model", parts=[chunk]), partial=True)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]), turn_complete=True)


def delete_note(name: str) -> str:
    """Delete the note called NAME."""
    return f"Deleted note {name}."


model: Any = os.environ.get("ADK_MODEL", "gemini-2.5-flash") if os.environ.get("GOOGLE_API_KEY") else OfflineLlm()

agent = LlmAgent(
    name="notes",
    description="Chats about your notes and deletes one when you confirm.",
    instruction="You help the user with their notes. Ask before deleting anything.",
    model=model,
    tools=[FunctionTool(delete_note, require_confirmation=True)],
)
