"""A LangGraph graph served as an A2A agent, as it is.

    relaykit serve examples/langgraph_agent.py

Text T ⇒ the answer ``You said: T (turn N)`` streamed token by token as one artifact, N counting the turns of the
conversation (thread_id = the A2A context id). ``delete NAME`` ⇒ the graph calls ``interrupt()``: INPUT_REQUIRED
with ``Delete note NAME?``; answering ``yes`` on that task resumes it (``Deleted note NAME.``), anything else keeps
the note.

No API key needed: the model is langchain-core's ``GenericFakeChatModel``. With ``OPENAI_API_KEY`` set and
``langchain-openai`` installed it is ``LANGGRAPH_MODEL`` (default ``gpt-4o-mini``).
"""

import os

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt


def chat_model(reply: str):
    """The model for one answer: a real one when configured, else a fake that streams ``reply`` token by token."""
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=os.environ.get("LANGGRAPH_MODEL", "gpt-4o-mini"))
    return GenericFakeChatModel(messages=iter([AIMessage(content=reply)]))


def confirm(state: MessagesState) -> dict:
    """``delete NAME``: ask the human first (the graph pauses here until the answer arrives)."""
    text = state["messages"][-1].content
    if not isinstance(text, str) or not text.startswith("delete "):
        return {}
    name = text[7:].strip()
    answer = interrupt(f"Delete note {name}?")
    done = f"Deleted note {name}." if str(answer).strip().lower() in ("y", "yes") else f"Kept note {name}."
    return {"messages": [AIMessage(content=done)]}


async def chat(state: MessagesState) -> dict:
    """Answer the latest message (skipped when ``confirm`` already answered it)."""
    last = state["messages"][-1]
    if isinstance(last, AIMessage):
        return {}
    turns = sum(isinstance(m, HumanMessage) for m in state["messages"])
    reply = f"You said: {last.content} (turn {turns})"
    return {"messages": [await chat_model(reply).ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("confirm", confirm)
builder.add_node("chat", chat)
builder.add_edge(START, "confirm")
builder.add_edge("confirm", "chat")
builder.add_edge("chat", END)
graph = builder.compile(name="notes-graph")
