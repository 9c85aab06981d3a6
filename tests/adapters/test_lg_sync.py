"""LangGraph's synchronous API (``graph.invoke``, ``graph.get_state``) on relaykit's checkpointer.

A plain script with no event loop keeps its thread across invocations; a worker thread next to a served graph reads
and writes the same conversation the A2A turns do (on the server's loop, where the store's connection lives); called
from inside a running loop, the synchronous API refuses with a clear error instead of blocking that loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from adapters.conftest import CALL_TIMEOUT
from relaykit import Task
from relaykit.adapters import MemoryConversationStore, as_executor
from relaykit.adapters._lg_checkpoint import ConversationSaver, scope_config
from relaykit.client import Client
from relaykit.testing import ServerThread


def _builder() -> StateGraph[Any]:
    def answer(state: MessagesState) -> dict[str, Any]:  # a sync node: the graph runs under invoke and ainvoke
        heard = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
        return {"messages": [AIMessage(content=f"heard: {heard[-1]} ({len(heard)})")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder


def _said(result: Any) -> str:
    return str(result["messages"][-1].content)


def test_invoke_without_a_loop_keeps_the_thread() -> None:
    store = MemoryConversationStore()
    saver = ConversationSaver(lambda: store)
    graph = _builder().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t-1"}}

    assert _said(graph.invoke({"messages": [HumanMessage("hello")]}, config)) == "heard: hello (1)"
    assert _said(graph.invoke({"messages": [HumanMessage("again")]}, config)) == "heard: again (2)"
    state = graph.get_state(config)
    assert [m.content for m in state.values["messages"]] == ["hello", "heard: hello (1)", "again", "heard: again (2)"]
    listed = list(saver.list(config))
    assert [t.checkpoint["id"] for t in listed] == [state.config["configurable"]["checkpoint_id"]]
    other: Any = {"configurable": {"thread_id": "t-2"}}
    assert _said(graph.invoke({"messages": [HumanMessage("elsewhere")]}, other)) == "heard: elsewhere (1)"

    saver.delete_thread("t-1")
    assert saver.get_tuple(config) is None
    assert _said(graph.invoke({"messages": [HumanMessage("anew")]}, config)) == "heard: anew (1)"


async def test_invoke_inside_the_loop_refuses() -> None:
    graph = _builder().compile(checkpointer=ConversationSaver(MemoryConversationStore))
    with pytest.raises(asyncio.InvalidStateError, match="to_thread"):
        graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}})


async def test_worker_thread_next_to_the_served_graph(tmp_path: Path) -> None:
    executor: Any = as_executor(_builder().compile(name="sync"))
    store = f"sqlite:///{tmp_path / 'relaykit.db'}"
    with ServerThread(executor, app_options={"store": store}) as url:
        async with Client(url) as client:
            first = await asyncio.wait_for(client.send("over A2A"), CALL_TIMEOUT)
            assert isinstance(first, Task)
            # The served graph, invoked synchronously from a worker thread: the same conversation (thread id =
            # context id, scoped like the A2A caller's tasks), run on the server's loop and stored in its SQLite file.
            config: Any = {"configurable": {"thread_id": first.context_id, **scope_config("", "anonymous")}}
            by_hand = await asyncio.wait_for(
                asyncio.to_thread(executor.graph.invoke, {"messages": [HumanMessage("by hand")]}, config), CALL_TIMEOUT
            )
            third = await asyncio.wait_for(client.send("over A2A again", context_id=first.context_id), CALL_TIMEOUT)
    assert _said(by_hand) == "heard: by hand (2)"
    assert isinstance(third, Task)
    assert third.artifacts[0].text_content == "heard: over A2A again (3)"
