"""Each framework's agent served as it is, driven over HTTP by relaykit's client and by the a2a-sdk 1.3.0 client.

For every framework (pydantic-ai, LangGraph, OpenAI Agents SDK, Google ADK; offline models from ``_fakes``):
blocking send; a stream of several chunks of ONE artifact, in order, whose joined text is the answer; a second turn
in the same context that sees the first (also after a restart on SQLite); the human-in-the-loop round trip; a tool
call shown as a WORKING update that names the tool; cancel mid-stream, which stops the model; an exception, which
fails the task with the safe message only.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from adapters._fakes import FACTORIES, SECRET, Probe
from adapters.conftest import CALL_TIMEOUT, DRIVERS, FRAMEWORKS, Ev, collect, serving

pytestmark = [pytest.mark.interop, pytest.mark.parametrize("framework", FRAMEWORKS)]

PROBE_WAIT = 10.0  # seconds for the server's thread to record what a test waits for


def make(framework: str) -> tuple[Any, Probe]:
    probe = Probe()
    return FACTORIES[framework](probe), probe


async def wait_for(event: Any, seconds: float = PROBE_WAIT) -> bool:
    """Wait (bounded) for a ``threading.Event`` set by the server's thread."""
    return bool(await asyncio.to_thread(event.wait, seconds))


def chunks(events: list[Ev]) -> list[Ev]:
    return [e for e in events if e.kind == "artifact"]


async def test_blocking_send(framework: str, driver_kind: str) -> None:
    agent, _ = make(framework)
    with serving(agent) as url:
        async with DRIVERS[driver_kind](url) as client:
            task = await client.send("hello there")
    assert task.state == "COMPLETED", task
    assert task.texts == ["You said: hello there (turn 1)"]


async def test_stream_is_one_artifact_in_chunks(framework: str, driver_kind: str) -> None:
    agent, _ = make(framework)
    with serving(agent) as url:
        async with DRIVERS[driver_kind](url) as client:
            events = await collect(client.stream("one two three"))
    assert events[0].kind == "task"
    parts = chunks(events)
    assert len(parts) >= 3, events
    assert len({p.artifact_id for p in parts}) == 1, "one artifact"
    assert [p.append for p in parts] == [False] + [True] * (len(parts) - 1)
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    assert "".join(p.text for p in parts) == "You said: one two three (turn 1)"
    assert events[-1].kind == "status"
    assert events[-1].state == "COMPLETED"


async def test_second_turn_sees_the_first(framework: str, driver_kind: str) -> None:
    agent, _probe = make(framework)
    with serving(agent) as url:
        async with DRIVERS[driver_kind](url) as client:
            first = await client.send("first")
            second = await client.send("second", context_id=first.context_id)
            other = await client.send("elsewhere")
    assert second.texts == ["You said: second (turn 2)"]
    assert second.id != first.id
    assert other.texts == ["You said: elsewhere (turn 1)"], "another context is another conversation"


async def test_conversation_survives_a_restart_on_sqlite(framework: str, driver_kind: str, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'relaykit.db'}"
    agent, _ = make(framework)
    with serving(agent, store=store) as url:
        async with DRIVERS[driver_kind](url) as client:
            first = await client.send("before")
    agent, _ = make(framework)  # a new process would build its agent anew
    with serving(agent, store=store) as url:
        async with DRIVERS[driver_kind](url) as client:
            second = await client.send("after", context_id=first.context_id)
    assert second.texts == ["You said: after (turn 2)"]


async def test_human_in_the_loop(framework: str, driver_kind: str) -> None:
    agent, _ = make(framework)
    with serving(agent) as url:
        async with DRIVERS[driver_kind](url) as client:
            asked = await client.send("delete groceries")
            assert asked.state == "INPUT_REQUIRED", asked
            assert "groceries" in asked.message or "delete_note" in asked.message, asked.message
            done = await client.send("yes", task_id=asked.id, context_id=asked.context_id)
            assert done.state == "COMPLETED", done
            assert done.id == asked.id
            assert done.texts[-1] == "Deleted note groceries."
            # The conversation goes on after the pause, in the same context.
            later = await client.send("and then", context_id=asked.context_id)
    assert later.texts == ["You said: and then (turn 2)"]


async def test_denied(framework: str) -> None:
    agent, _ = make(framework)
    with serving(agent) as url:
        async with DRIVERS["relaykit"](url) as client:
            asked = await client.send("delete taxes")
            done = await client.send("no", task_id=asked.id)
    assert done.state == "COMPLETED", done
    assert "Deleted note" not in " ".join(done.texts)


async def test_tool_call_is_a_working_update(framework: str, driver_kind: str) -> None:
    agent, _ = make(framework)
    with serving(agent) as url:
        async with DRIVERS[driver_kind](url) as client:
            events = await collect(client.stream("lookup cats"))
    updates = [e for e in events if e.kind == "status" and e.state == "WORKING" and e.text]
    assert any(e.text == "Calling tool lookup" for e in updates), events
    assert "".join(p.text for p in chunks(events)) == "found cats"
    assert events[-1].state == "COMPLETED"


async def test_cancel_mid_stream_stops_the_model(framework: str, driver_kind: str) -> None:
    agent, probe = make(framework)
    with serving(agent) as url:
        async with DRIVERS[driver_kind](url) as client:
            seen: list[Ev] = []
            have_task = asyncio.Event()

            async def read() -> None:
                async for event in client.stream("slow"):
                    seen.append(event)
                    have_task.set()

            reader = asyncio.create_task(read())
            try:
                async with asyncio.timeout(CALL_TIMEOUT):
                    await have_task.wait()
                # The model streamed its first chunk and now waits: the run is mid-stream.
                assert await wait_for(probe.started)
                calls = probe.calls
                state = await client.cancel(seen[0].task_id)
                assert state == "CANCELED"
                assert await wait_for(probe.cancelled), "the model's run was not interrupted"
                async with asyncio.timeout(CALL_TIMEOUT):
                    await reader
            finally:
                reader.cancel()
            final = await client.get(seen[0].task_id)
    assert final.state == "CANCELED"
    assert probe.calls == calls, "no model call after the cancel"
    assert [e.text for e in chunks(seen)] == [], "the held-back first chunk is never sent once cancelled"


async def test_exception_fails_with_the_safe_message(framework: str, driver_kind: str) -> None:
    agent, _ = make(framework)
    with serving(agent) as url:
        async with DRIVERS[driver_kind](url) as client:
            task = await client.send("boom")
    assert task.state == "FAILED", task
    assert task.message == "The agent failed while handling this task."
    assert SECRET not in " ".join([task.message, *task.texts, *task.history])
