"""A task's streams across an interrupt, on the JSON-RPC and HTTP+JSON bindings of a real ``relaykit serve``
(``examples/ask.py``: the first message asks for a name, the answer on the same task completes it).

* A SubscribeToTask stream is one Task, then status and artifact updates only (spec §3.1.6). The message that
  resumes an interrupted task starts its own stream with the Task (§5.5), but a subscriber, live or resuming from a
  Last-Event-ID, must not get that snapshot too: a client that folds a stream (as a2a-java's ClientTaskManager does)
  fails on a second Task ("Task is already set").
* ``configuration.historyLength`` bounds the history of every Task a SendStreamingMessage stream carries, as it
  bounds the blocking answer's (§5.6; the proto: "The server MUST NOT return more messages than the provided value"),
  on 1.0 and through the 0.3 codec (``message/stream``, where 0 still means "no limit").

Every wait is bounded (``WAIT``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

ASK = "examples/ask.py"
A2A = {"A2A-Version": "1.0"}
WAIT = 20.0  # seconds: the bound on each call, and on reading each stream to its end
Event = tuple[int | None, dict[str, Any]]  # (SSE id, the StreamResponse)


def _body(text: str, *, task_id: str = "", history_length: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": f"m-{uuid.uuid4()}", "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        message["taskId"] = task_id
    body: dict[str, Any] = {"message": message}
    if history_length is not None:
        body["configuration"] = {"historyLength": history_length}
    return body


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


class Binding:
    """The three calls these tests make, on one binding; each stream's events as ``(id, StreamResponse)``."""

    def __init__(self, name: str, base: str, http: httpx.AsyncClient) -> None:
        self.name = name
        self.base = base
        self.http = http

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.name == "rest":
            reply = await self.http.post(f"{self.base}/message:send", json=body, headers=A2A)
            assert reply.status_code == 200, reply.text
            return reply.json()["task"]  # type: ignore[no-any-return]
        reply = await self.http.post(f"{self.base}/", json=_rpc("SendMessage", body), headers=A2A)
        assert "result" in reply.json(), reply.text
        return reply.json()["result"]["task"]  # type: ignore[no-any-return]

    def stream(self, body: dict[str, Any]) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Event]]:
        if self.name == "rest":
            return _sse(self.http.stream("POST", f"{self.base}/message:stream", json=body, headers=A2A), rpc=False)
        request = self.http.stream("POST", f"{self.base}/", json=_rpc("SendStreamingMessage", body), headers=A2A)
        return _sse(request, rpc=True)

    def subscribe(
        self, task_id: str, last_event_id: int | None = None
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Event]]:
        headers = dict(A2A)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        if self.name == "rest":
            return _sse(self.http.stream("POST", f"{self.base}/tasks/{task_id}:subscribe", headers=headers), rpc=False)
        request = self.http.stream(
            "POST", f"{self.base}/", json=_rpc("SubscribeToTask", {"id": task_id}), headers=headers
        )
        return _sse(request, rpc=True)


@contextlib.asynccontextmanager
async def _sse(request: Any, *, rpc: bool) -> AsyncIterator[AsyncIterator[Event]]:
    """The events of a streaming response (``rpc``: JSON-RPC frames, whose ``result`` is the StreamResponse)."""
    async with request as response:
        if response.status_code != 200:
            raise AssertionError(f"{response.status_code}: {(await response.aread()).decode(errors='replace')}")

        async def events() -> AsyncIterator[Event]:
            event_id: int | None = None
            data: list[str] = []
            async for line in response.aiter_lines():
                if line.startswith("id:"):
                    event_id = int(line[3:].strip())
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif line == "" and data:
                    frame = json.loads("\n".join(data))
                    assert "error" not in frame, frame
                    yield event_id, frame["result"] if rpc else frame
                    event_id, data = None, []

        yield events()


def _kind(event: Event) -> str:
    return next(iter(event[1]))


def _state(event: Event) -> str | None:
    body = event[1][_kind(event)]
    return body["status"]["state"] if "status" in body else None


async def _next(events: AsyncIterator[Event]) -> Event:
    return await asyncio.wait_for(anext(events), WAIT)


async def _rest(events: AsyncIterator[Event]) -> list[Event]:
    """Every further event up to the task's terminal one."""

    async def read() -> list[Event]:
        seen = []
        async for event in events:
            seen.append(event)
            if _state(event) == "TASK_STATE_COMPLETED":
                break
        return seen

    return await asyncio.wait_for(read(), WAIT)


@pytest.fixture
async def binding(request: pytest.FixtureRequest, relaykit_server: Callable[..., str]) -> AsyncIterator[Binding]:
    base = relaykit_server(ASK)
    async with httpx.AsyncClient(timeout=WAIT) as http:
        yield Binding(request.param, base, http)


@pytest.mark.parametrize("binding", ["rest", "jsonrpc"], indirect=True)
async def test_subscribers_of_a_resumed_task_get_updates_not_the_follow_ups_task(binding: Binding) -> None:
    asked = await binding.send(_body("hello"))
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
    task_id = asked["id"]
    async with contextlib.AsyncExitStack() as stack:
        live = await stack.enter_async_context(binding.subscribe(task_id))
        snapshot = await _next(live)
        assert _kind(snapshot) == "task"
        assert snapshot[0] is not None
        # Resuming from just before the snapshot's id: the interrupt's status again, then what follows (no Task).
        resumed = await stack.enter_async_context(binding.subscribe(task_id, last_event_id=snapshot[0] - 1))
        interrupt = await _next(resumed)
        assert (interrupt[0], _kind(interrupt)) == (snapshot[0], "statusUpdate")

        async with binding.stream(_body("Ada", task_id=task_id)) as streaming:
            own = await _rest(streaming)
        # The follow-up's own stream starts with the task as it resumes: its message is the newest in the history.
        assert _kind(own[0]) == "task", own
        assert own[0][1]["task"]["history"][-1]["parts"] == [{"text": "Ada"}]
        updates = own[1:]
        assert updates
        assert {_kind(event) for event in updates} <= {"statusUpdate", "artifactUpdate"}, own
        assert _state(updates[-1]) == "TASK_STATE_COMPLETED"

        for stream in (live, resumed):
            rest = await _rest(stream)
            assert [_kind(event) for event in rest if _kind(event) == "task"] == [], rest
            assert rest == updates


@pytest.mark.parametrize("binding", ["rest", "jsonrpc"], indirect=True)
async def test_history_length_bounds_a_streams_tasks(binding: Binding) -> None:
    # A new task's stream, historyLength 0: its Task has no history at all (the blocking answer has none either).
    async with binding.stream(_body("hello", history_length=0)) as streaming:
        first = await _next(streaming)
    task = first[1]["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED")
    assert "history" not in task, task
    assert "history" not in await binding.send(_body("hello", history_length=0))

    # A follow-up's stream, historyLength 1: the newest message alone (the follow-up), not the whole conversation.
    async with binding.stream(_body("Ada", task_id=task["id"], history_length=1)) as streaming:
        events = await _rest(streaming)
    history = events[0][1]["task"]["history"]
    assert [m["parts"] for m in history] == [[{"text": "Ada"}]], history
    assert _state(events[-1]) == "TASK_STATE_COMPLETED"


async def test_history_length_bounds_a_0_3_streams_task(relaykit_server: Callable[..., str]) -> None:
    base = relaykit_server(ASK)

    def message03(text: str, task_id: str = "") -> dict[str, Any]:
        message: dict[str, Any] = {
            "kind": "message",
            "messageId": f"m-{uuid.uuid4()}",
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
        if task_id:
            message["taskId"] = task_id
        return message

    async with httpx.AsyncClient(timeout=WAIT) as http:
        asked = (await http.post(f"{base}/", json=_rpc("message/send", {"message": message03("hello")}))).json()
        task_id = asked["result"]["id"]
        assert asked["result"]["status"]["state"] == "input-required", asked
        params = {"message": message03("Ada", task_id), "configuration": {"historyLength": 1}}
        async with (
            _sse(http.stream("POST", f"{base}/", json=_rpc("message/stream", params)), rpc=True) as events,
            asyncio.timeout(WAIT),
        ):
            first, *rest = [event async for event in events]
    task = first[1]
    assert task["kind"] == "task", task
    assert [m["parts"] for m in task["history"]] == [[{"kind": "text", "text": "Ada"}]], task["history"]
    assert rest[-1][1]["status"]["state"] == "completed", rest
