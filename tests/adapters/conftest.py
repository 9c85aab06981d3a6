"""Fixtures for the adapter tests: a server per test (a real uvicorn on 127.0.0.1, ``relaykit.testing.ServerThread``)
and two drivers that speak to it over HTTP: relaykit's ``Client`` and the official a2a-sdk 1.3.0 client.

Both drivers reduce what their client returns to the same small records (``Outcome``, ``Ev``), so one test body
checks both. Every call is bounded (``CALL_TIMEOUT``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from relaykit.testing import ServerThread

CALL_TIMEOUT = 20.0
FRAMEWORKS = ["pydantic-ai", "langgraph", "openai-agents", "adk"]


@dataclass
class Outcome:
    """A task as a test needs it: ids, state name (``COMPLETED``…), artifact texts, status message text and data."""

    id: str
    context_id: str
    state: str
    texts: list[str]
    message: str
    data: Any
    history: list[str]


@dataclass
class Ev:
    """One stream event: ``task``, ``artifact`` (id, text, append, last) or ``status`` (state, message text)."""

    kind: str
    state: str = ""
    text: str = ""
    artifact_id: str = ""
    append: bool = False
    last: bool = False
    task_id: str = ""


def _state(name: str) -> str:
    return name.removeprefix("TASK_STATE_")


class RelaykitDriver:
    name = "relaykit"

    def __init__(self, url: str) -> None:
        from relaykit.client import Client

        self.client = Client(url)

    async def __aenter__(self) -> RelaykitDriver:
        await asyncio.wait_for(self.client.connect(), CALL_TIMEOUT)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    @staticmethod
    def _outcome(task: Any) -> Outcome:
        message = task.status.message
        data = next((p.data for p in message.parts if p.data is not None), None) if message else None
        return Outcome(
            task.id,
            task.context_id,
            _state(task.status.state.value),
            [a.text_content for a in task.artifacts],
            message.text if message else "",
            data,
            [m.text for m in task.history],
        )

    async def send(self, text: str, *, task_id: str | None = None, context_id: str | None = None) -> Outcome:
        task = await asyncio.wait_for(self.client.send(text, task_id=task_id, context_id=context_id), CALL_TIMEOUT)
        return self._outcome(task)

    async def stream(self, text: str, *, context_id: str | None = None) -> AsyncIterator[Ev]:
        from relaykit import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

        async for event in self.client.stream(text, context_id=context_id):
            if isinstance(event, Task):
                yield Ev("task", _state(event.status.state.value), task_id=event.id)
            elif isinstance(event, TaskArtifactUpdateEvent):
                art = event.artifact
                yield Ev("artifact", text=art.text_content, artifact_id=art.artifact_id, append=event.append,
                         last=event.last_chunk, task_id=event.task_id)  # fmt: skip
            elif isinstance(event, TaskStatusUpdateEvent):
                msg = event.status.message
                yield Ev(
                    "status", _state(event.status.state.value), text=msg.text if msg else "", task_id=event.task_id
                )

    async def cancel(self, task_id: str) -> str:
        task = await asyncio.wait_for(self.client.cancel(task_id), CALL_TIMEOUT)
        return _state(task.status.state.value)

    async def get(self, task_id: str) -> Outcome:
        return self._outcome(await asyncio.wait_for(self.client.get_task(task_id), CALL_TIMEOUT))


class SdkDriver:
    """The a2a-sdk 1.3.0 client (JSON-RPC), one unary and one streaming client."""

    name = "a2a-sdk"

    def __init__(self, url: str) -> None:
        self.url = url
        self.opened: list[tuple[Any, Any]] = []

    async def _client(self, streaming: bool) -> Any:
        import httpx
        from a2a.client import ClientConfig, ClientFactory

        http = httpx.AsyncClient(timeout=30.0)
        config = ClientConfig(streaming=streaming, supported_protocol_bindings=["JSONRPC"], httpx_client=http)
        client = await asyncio.wait_for(ClientFactory(config).create_from_url(self.url), CALL_TIMEOUT)
        self.opened.append((client, http))
        return client

    async def __aenter__(self) -> SdkDriver:
        self.unary = await self._client(False)
        self.streaming = await self._client(True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for client, http in self.opened:
            await client.close()
            await http.aclose()

    @staticmethod
    def _message(text: str, task_id: str | None, context_id: str | None) -> Any:
        import uuid

        from a2a.types import Message, Part, Role, SendMessageRequest

        message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
        if task_id:
            message.task_id = task_id
        if context_id:
            message.context_id = context_id
        return SendMessageRequest(message=message)

    @staticmethod
    def _outcome(task: Any) -> Outcome:
        from a2a.types import TaskState
        from google.protobuf.json_format import MessageToDict

        message = task.status.message if task.status.HasField("message") else None
        data = None
        if message is not None:
            for part in message.parts:
                if part.WhichOneof("content") == "data":
                    data = MessageToDict(part.data)
                    break
        return Outcome(
            task.id,
            task.context_id,
            _state(TaskState.Name(task.status.state)),
            ["".join(p.text for p in a.parts) for a in task.artifacts],
            "".join(p.text for p in message.parts) if message is not None else "",
            data,
            ["".join(p.text for p in m.parts) for m in task.history],
        )

    async def send(self, text: str, *, task_id: str | None = None, context_id: str | None = None) -> Outcome:
        async with asyncio.timeout(CALL_TIMEOUT):
            responses = [r async for r in self.unary.send_message(self._message(text, task_id, context_id))]
        assert len(responses) == 1, responses
        assert responses[0].WhichOneof("payload") == "task", responses
        return self._outcome(responses[0].task)

    async def stream(self, text: str, *, context_id: str | None = None) -> AsyncIterator[Ev]:
        from a2a.types import TaskState

        async for response in self.streaming.send_message(self._message(text, None, context_id)):
            kind = response.WhichOneof("payload")
            if kind == "task":
                yield Ev("task", _state(TaskState.Name(response.task.status.state)), task_id=response.task.id)
            elif kind == "artifact_update":
                u = response.artifact_update
                yield Ev("artifact", text="".join(p.text for p in u.artifact.parts), artifact_id=u.artifact.artifact_id,
                         append=u.append, last=u.last_chunk, task_id=u.task_id)  # fmt: skip
            elif kind == "status_update":
                u = response.status_update
                msg = "".join(p.text for p in u.status.message.parts) if u.status.HasField("message") else ""
                yield Ev("status", _state(TaskState.Name(u.status.state)), text=msg, task_id=u.task_id)

    async def cancel(self, task_id: str) -> str:
        from a2a.types import CancelTaskRequest, TaskState

        task = await asyncio.wait_for(self.unary.cancel_task(CancelTaskRequest(id=task_id)), CALL_TIMEOUT)
        return _state(TaskState.Name(task.status.state))

    async def get(self, task_id: str) -> Outcome:
        from a2a.types import GetTaskRequest

        return self._outcome(await asyncio.wait_for(self.unary.get_task(GetTaskRequest(id=task_id)), CALL_TIMEOUT))


DRIVERS: dict[str, Callable[[str], Any]] = {"relaykit": RelaykitDriver, "a2a-sdk": SdkDriver}


@pytest.fixture(params=list(DRIVERS))
def driver_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextmanager
def serving(target: Any, *, store: str = "memory", **options: Any) -> Iterator[str]:
    """A real server for ``target`` (framework object or executor) on 127.0.0.1; yields its base URL."""
    with ServerThread(target, app_options={"store": store, **options}) as url:
        yield url


async def collect(events: AsyncIterator[Ev], seconds: float = CALL_TIMEOUT) -> list[Ev]:
    async with asyncio.timeout(seconds):
        return [e async for e in events]


def dump(value: Any) -> str:
    return json.dumps(value, default=str)
