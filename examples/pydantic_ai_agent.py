"""A pydantic-ai agent served as an A2A agent, as it is.

    relaykit serve examples/pydantic_ai_agent.py

Text T ⇒ the answer ``You said: T (turn N)`` streamed word by word as one artifact, N counting the turns of the
conversation (the A2A context: a later task with the same contextId continues it). ``delete NAME`` ⇒ the tool
``delete_note`` needs approval: INPUT_REQUIRED; answering ``yes`` on that task runs it (``Deleted note NAME.``),
anything else denies it.

No API key needed: the model is pydantic-ai's ``FunctionModel`` running ``offline_model`` below. With
``OPENAI_API_KEY`` set, it is ``PYDANTIC_AI_MODEL`` (default ``openai:gpt-4o-mini``; needs
``pip install 'pydantic-ai-slim[openai]'``).
"""

import os
from collections.abc import AsyncIterator

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel


async def offline_model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """A stand-in model: echoes the prompt word by word, and calls ``delete_note`` for ``delete NAME``."""
    last = messages[-1]
    returned = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returned:
        yield str(returned[0].content)
        return
    prompts = [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    ]
    prompt = prompts[-1] if prompts else ""
    if prompt.startswith("delete "):
        yield {0: DeltaToolCall(name="delete_note", json_args=f'{{"name": "{prompt[7:].strip()}"}}')}
        return
    words = f"You said: {prompt} (turn {len(prompts)})".split(" ")
    for i, word in enumerate(words):
        yield word if i == 0 else " " + word


model = (
    os.environ.get("PYDANTIC_AI_MODEL", "openai:gpt-4o-mini")
    if os.environ.get("OPENAI_API_KEY")
    else FunctionModel(stream_function=offline_model)
)

agent = Agent(
    model,
    name="notes",
    description="Chats about your notes and deletes one when you approve.",
    instructions="You help the user with their notes. Ask before deleting anything.",
    output_type=[str, DeferredToolRequests],
)


@agent.tool_plain(requires_approval=True)
def delete_note(name: str) -> str:
    """Delete the note called NAME."""
    return f"Deleted note {name}."
