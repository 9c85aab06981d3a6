"""A raw A2A HTTP+JSON client for the scale-out tests: SSE parsed by hand, so every event id and every repeat is
visible (``relaykit.client`` de-duplicates resumed streams; these tests must see what the servers actually send).

* ``Sse`` / ``SseParser``: the events of a ``text/event-stream`` (``id:`` and ``data:``), as the server framed them.
* ``ArtifactView``: a client's picture of a task's artifacts, built by applying events in order (A2A rules: a Task
  snapshot replaces everything, ``append`` false replaces an artifact, ``append`` true extends it).
* ``send`` / ``get_task`` / ``list_tasks`` / ``cancel`` / ``open_stream`` / ``open_subscribe``: the REST calls.
* ``ResumingReader``: one streaming call that, whenever its connection breaks, reconnects (through whatever URL it is
  given, e.g. a proxy) with ``SubscribeToTask`` + ``Last-Event-ID``, until the task's terminal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

A2A_HEADERS = {"A2A-Version": "1.0"}
TERMINAL = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"})
INTERRUPTED = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})
CALL_TIMEOUT = 15.0  # seconds: any single non-streaming call
RETRY_PAUSE = 0.1  # seconds between reconnection attempts of a resuming client


def new_message_id() -> str:
    return f"m-{uuid.uuid4()}"


def message(
    text: str,
    *,
    message_id: str | None = None,
    task_id: str | None = None,
    context_id: str | None = None,
    return_immediately: bool = False,
) -> dict[str, Any]:
    """A SendMessageRequest body (REST)."""
    msg: dict[str, Any] = {"messageId": message_id or new_message_id(), "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        msg["taskId"] = task_id
    if context_id:
        msg["contextId"] = context_id
    body: dict[str, Any] = {"message": msg}
    if return_immediately:
        body["configuration"] = {"returnImmediately": True}
    return body


def text_of(parts: Iterable[dict[str, Any]]) -> str:
    return "".join(part.get("text", "") for part in parts)


# --- SSE ---------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Sse:
    """One SSE event: its ``id:`` and its StreamResponse."""

    id: int | None
    data: dict[str, Any]

    @property
    def kind(self) -> str:
        return next(iter(self.data))

    @property
    def body(self) -> dict[str, Any]:
        return self.data[self.kind]  # type: ignore[no-any-return]

    @property
    def state(self) -> str | None:
        """The task state a Task or a status update carries."""
        if self.kind in ("task", "statusUpdate"):
            return self.body["status"]["state"]  # type: ignore[no-any-return]
        return None

    @property
    def chunk(self) -> str | None:
        """The text of an artifact update."""
        if self.kind == "artifactUpdate":
            return text_of(self.body["artifact"]["parts"])
        return None

    @property
    def task_id(self) -> str | None:
        if self.kind == "task":
            return self.body["id"]  # type: ignore[no-any-return]
        return self.body.get("taskId")

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def status_text(self) -> str:
        message = self.body.get("status", {}).get("message")
        return text_of(message["parts"]) if message else ""


class SseParser:
    """Feeds lines of an event stream, returns complete events (comments and keep-alives are ignored)."""

    def __init__(self) -> None:
        self._id: int | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> Sse | None:
        if line == "":
            if not self._data:
                self._id = None
                return None
            event = Sse(self._id, json.loads("\n".join(self._data)))
            self._id, self._data = None, []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self._id = int(value)
        elif name == "data":
            self._data.append(value)
        return None


async def events(response: httpx.Response) -> AsyncIterator[Sse]:
    """The SSE events of a streaming response."""
    parser = SseParser()
    async for line in response.aiter_lines():
        event = parser.feed(line)
        if event is not None:
            yield event


class ArtifactView:
    """A client's picture of one task's artifacts, from the events it applied in order."""

    def __init__(self) -> None:
        self.artifacts: dict[str, list[str]] = {}

    def apply(self, event: Sse) -> None:
        if event.kind == "task":
            self.artifacts = {a["artifactId"]: [text_of(a["parts"])] for a in event.body.get("artifacts", [])}
        elif event.kind == "artifactUpdate":
            artifact = event.body["artifact"]
            text = text_of(artifact["parts"])
            if event.body.get("append"):
                self.artifacts.setdefault(artifact["artifactId"], []).append(text)
            else:
                self.artifacts[artifact["artifactId"]] = [text]

    def texts(self) -> list[str]:
        """Every artifact's text, in artifact order."""
        return ["".join(chunks) for chunks in self.artifacts.values()]


def chunks(count: int) -> list[str]:
    """What the test agents stream for ``count``: ``chunk 0`` … ``chunk count-1``."""
    return [f"chunk {i}" for i in range(count)]


def artifact_texts(task: dict[str, Any]) -> list[str]:
    """The text of each artifact of a stored Task."""
    return [text_of(a["parts"]) for a in task.get("artifacts", [])]


# --- calls -------------------------------------------------------------------------------------------------------


def _check(response: httpx.Response) -> dict[str, Any]:
    if response.status_code != 200:
        request = response.request
        raise AssertionError(f"{request.method} {request.url}: {response.status_code} {response.text}")
    return response.json()  # type: ignore[no-any-return]


async def send(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> dict[str, Any]:
    """SendMessage; the SendMessageResponse (``{"task": …}`` or ``{"message": …}``)."""
    return _check(await http.post(f"{base}/message:send", json=body, headers=A2A_HEADERS, timeout=CALL_TIMEOUT))


async def get_task(http: httpx.AsyncClient, base: str, task_id: str) -> dict[str, Any]:
    return _check(await http.get(f"{base}/tasks/{task_id}", headers=A2A_HEADERS, timeout=CALL_TIMEOUT))


async def list_tasks(http: httpx.AsyncClient, base: str, **params: Any) -> dict[str, Any]:
    return _check(await http.get(f"{base}/tasks", params=params, headers=A2A_HEADERS, timeout=CALL_TIMEOUT))


async def cancel(http: httpx.AsyncClient, base: str, task_id: str) -> dict[str, Any]:
    return _check(await http.post(f"{base}/tasks/{task_id}:cancel", headers=A2A_HEADERS, timeout=CALL_TIMEOUT))


class Reader:
    """The events of one streaming response, read as far as the test needs (``seen``: all read so far)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.seen: list[Sse] = []
        self._events = events(response)

    async def next(self) -> Sse:
        event = await self._events.__anext__()
        self.seen.append(event)
        return event

    async def until(self, predicate: Callable[[Sse], bool], within: float = CALL_TIMEOUT) -> Sse:
        """Read until an event satisfies ``predicate`` (bounded); that event. The stream ending first fails."""

        async def read() -> Sse:
            while True:
                try:
                    event = await self.next()
                except StopAsyncIteration:
                    raise AssertionError(f"the stream ended first: {summary(self.seen)}") from None
                if predicate(event):
                    return event

        return await asyncio.wait_for(read(), within)

    async def until_chunk(self, n: int, within: float = CALL_TIMEOUT) -> Sse:
        return await self.until(lambda event: event.chunk == f"chunk {n}", within)

    async def rest(self, within: float = CALL_TIMEOUT) -> list[Sse]:
        """Every further event up to the terminal one (or the end of the stream); the events read by this call."""
        start = len(self.seen)

        async def read() -> None:
            async for event in self._events:
                self.seen.append(event)
                if event.terminal:
                    return

        await asyncio.wait_for(read(), within)
        return self.seen[start:]

    async def aclose(self) -> None:
        await self._events.aclose()


def summary(seen: Iterable[Sse]) -> list[tuple[int | None, str, str | None]]:
    """A readable digest of events for assertion messages."""
    return [(e.id, e.kind, e.chunk or e.state) for e in seen]


@contextlib.asynccontextmanager
async def _reading(request: Any) -> AsyncIterator[Reader]:
    async with request as response:
        if response.status_code != 200:
            body = (await response.aread()).decode(errors="replace")
            raise AssertionError(f"{response.request.method} {response.request.url}: {response.status_code} {body}")
        reader = Reader(response)
        try:
            yield reader
        finally:
            await reader.aclose()


def stream_request(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> Any:
    return http.stream("POST", f"{base}/message:stream", json=body, headers=A2A_HEADERS, timeout=CALL_TIMEOUT)


def subscribe_request(
    http: httpx.AsyncClient, base: str, task_id: str, *, last_event_id: int | None = None, query: bool = False
) -> Any:
    headers = dict(A2A_HEADERS)
    params: dict[str, str] = {}
    if last_event_id is not None:
        if query:
            params["lastEventId"] = str(last_event_id)
        else:
            headers["Last-Event-ID"] = str(last_event_id)
    url = f"{base}/tasks/{task_id}:subscribe"
    return http.stream("GET", url, params=params, headers=headers, timeout=CALL_TIMEOUT)


def open_stream(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> Any:
    """``async with open_stream(…) as reader``: SendStreamingMessage (a ``Reader``; a non-200 answer fails)."""
    return _reading(stream_request(http, base, body))


def open_subscribe(
    http: httpx.AsyncClient, base: str, task_id: str, *, last_event_id: int | None = None, query: bool = False
) -> Any:
    """``async with open_subscribe(…) as reader``: SubscribeToTask, resuming after ``last_event_id`` (the
    ``Last-Event-ID`` header, or with ``query`` the ``lastEventId`` query parameter)."""
    return _reading(subscribe_request(http, base, task_id, last_event_id=last_event_id, query=query))


async def wait_for_state(
    http: httpx.AsyncClient, base: str, task_id: str, states: Iterable[str], within: float
) -> dict[str, Any]:
    """Poll GetTask until the task is in one of ``states`` (bounded by ``within`` seconds); the task."""
    wanted = set(states)
    deadline = time.monotonic() + within
    while True:
        task = await get_task(http, base, task_id)
        if task["status"]["state"] in wanted:
            return task
        if time.monotonic() > deadline:
            raise AssertionError(f"task {task_id} is still {task['status']['state']} after {within:g} s: {task}")
        await asyncio.sleep(0.05)


# --- a client that resumes ---------------------------------------------------------------------------------------


@dataclass
class ResumingReader:
    """SendStreamingMessage to ``first_url``; on every break, SubscribeToTask with ``Last-Event-ID`` at ``resume_url``
    (which the test may change while the reader runs, e.g. to move the client to a given replica).

    ``events`` are all the events received, in order, from every connection; ``connections`` says where each
    connection went and how it ended; ``attached`` counts the connections that were answered 200. Reconnects are
    retried a few times a second while no replica answers, bounded by ``deadline`` seconds overall. The reader never
    drops or merges events: duplicates the servers send stay visible.
    """

    first_url: str
    resume_url: str
    body: dict[str, Any]
    deadline: float = 60.0
    events: list[Sse] = field(default_factory=list)
    connections: list[str] = field(default_factory=list)
    task_id: str | None = None
    attached: int = 0
    ended_by: str = ""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last_id(self) -> int | None:
        ids = [e.id for e in self.events if e.id is not None]
        return ids[-1] if ids else None

    def chunks(self) -> list[str]:
        return [e.chunk for e in self.events if e.chunk is not None]

    async def wait(self, predicate: Callable[[ResumingReader], bool], within: float = CALL_TIMEOUT) -> None:
        """Until ``predicate(self)`` holds (checked whenever the reader makes progress), bounded."""

        async def watch() -> None:
            while not predicate(self):
                if self.ended_by:
                    raise AssertionError(f"the reader ended ({self.ended_by}) first: {self.connections}")
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(watch(), within)

    def _progress(self) -> None:
        self._changed.set()

    async def run(self, http: httpx.AsyncClient) -> None:
        try:
            await asyncio.wait_for(self._run(http), self.deadline)
        except TimeoutError:
            self.ended_by = "deadline"
            raise AssertionError(
                f"no terminal event within {self.deadline:g} s; connections: {self.connections}; "
                f"events: {summary(self.events)}"
            ) from None
        finally:
            self.ended_by = self.ended_by or "error"
            self._progress()

    async def _run(self, http: httpx.AsyncClient) -> None:
        first = True
        while True:
            if first:
                url = self.first_url
                request = stream_request(http, url, self.body)
                label = f"stream {url}"
            else:
                assert self.task_id is not None
                url = self.resume_url
                request = subscribe_request(http, url, self.task_id, last_event_id=self.last_id)
                label = f"subscribe {url} after {self.last_id}"
            try:
                async with request as response:
                    if response.status_code != 200:
                        text = (await response.aread()).decode(errors="replace")
                        self.connections.append(f"{label}: HTTP {response.status_code} {text[:300]}")
                        if first:
                            raise AssertionError(f"SendStreamingMessage failed: {self.connections[-1]}")
                        if 400 <= response.status_code < 500:
                            self.ended_by = "refused"  # e.g. the task is terminal: subscribe answers an error
                            return
                    else:
                        first = False
                        self.attached += 1
                        self._progress()
                        async for event in events(response):
                            self.events.append(event)
                            if self.task_id is None:
                                self.task_id = event.task_id
                            if event.terminal:
                                self.connections.append(f"{label}: terminal {event.state}")
                                self.ended_by = "terminal"
                                return
                            self._progress()
                        self.connections.append(f"{label}: ended without a terminal event")
            except (httpx.TransportError, httpx.StreamError) as exc:
                self.connections.append(f"{label}: broke ({type(exc).__name__})")
                if self.task_id is None:
                    raise AssertionError(f"the stream broke before the task's first event: {self.connections}") from exc
            self._progress()
            # Reconnect; while no replica answers, a few attempts a second (bounded by the deadline).
            await asyncio.sleep(RETRY_PAUSE)


def assert_ids_increase(seen: list[Sse]) -> None:
    """SSE ids, across every connection of one client, strictly increase (no event was delivered twice)."""
    ids = [e.id for e in seen]
    assert all(i is not None for i in ids), ids
    assert all(a < b for a, b in itertools.pairwise(ids)), f"SSE ids do not strictly increase: {ids}"


def assert_no_event_repeated(seen: list[Sse], *, rerun_allowed: bool) -> None:
    """Nothing the client already had comes again: ids strictly increase; chunk texts follow on (``chunk 0``,
    ``chunk 1``, …) without a repeat or a hole, except that a re-run of an idempotent execution may start the artifact
    over (a first chunk with ``append`` false) and a Task snapshot may stand for the events before it."""
    assert_ids_increase(seen)
    runs: list[list[str]] = [[]]
    for event in seen:
        if event.kind == "task" and event.body.get("artifacts"):
            runs.append([])  # a snapshot: what follows continues from the snapshot's artifact
            held = text_of(event.body["artifacts"][0]["parts"])
            count = held.count("chunk ")
            assert held == "".join(chunks(count)), held
            runs[-1].extend(chunks(count))
        elif event.chunk is not None:
            if not event.body.get("append") and runs[-1]:
                assert rerun_allowed, f"the artifact started over: {summary(seen)}"
                runs.append([])
            runs[-1].append(event.chunk)
    for run in runs:
        assert run == chunks(len(run)), f"chunks repeated or missing: {run}\n{summary(seen)}"
