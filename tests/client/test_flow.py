"""How the client follows a task: ``ask()`` through turns, in-task authorization (AUTH_REQUIRED resolved by a
follow-up carrying a credential, or out of band) and unfinished replies, the status events a stream must deliver, and
the bound on resubscribing to a task that never moves.

Against real relaykit servers (``kitchen_server``, ``timeout_server``: a blocking SendMessage answered after 0.1 s with
the task as it is) and ``Stub``, a scripted JSON-RPC agent on 127.0.0.1 for what relaykit itself never does (a Message
after a task, a snapshot-only subscription).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest
from support.servers import ServerProcess

from client._agents import CALENDAR_TOKEN
from client._net import MiniHTTP, Request, Response
from relaykit import Message, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent
from relaykit.client import Client, Credentials, ResumePolicy
from relaykit.client._client import Event
from relaykit.errors import A2AReconnectError, A2ATaskAuthRequiredError, A2ATaskInputRequiredError
from relaykit.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    Artifact,
    Part,
    Role,
    SendMessageResponse,
    StreamResponse,
    TaskStatus,
)

T = 20.0
FAST = ResumePolicy(attempts=3, backoff=0.001, max_backoff=0.002)
TASK = "task-1"
CONTEXT = "ctx-1"

Answer = SendMessageResponse | Task | Sequence[Event] | Response


class Stub:
    """A JSON-RPC agent on 127.0.0.1 that answers each method from a script: ``script[method]`` lists the answers of
    its calls in order, the last one repeated (a model: the JSON-RPC result; a list of events: an SSE stream of them,
    closed after the last; a ``Response``: that HTTP answer). ``calls`` lists the methods called."""

    def __init__(self, script: dict[str, list[Answer]], *, streaming: bool) -> None:
        self.script = script
        self.streaming = streaming
        self.calls: list[str] = []
        self.http = MiniHTTP(self._handle)

    async def __aenter__(self) -> Stub:
        await self.http.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    @property
    def url(self) -> str:
        return self.http.url

    def card(self) -> AgentCard:
        return AgentCard(
            name="stub",
            description="a scripted agent",
            version="1.0.0",
            supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url=self.url + "/")],
            capabilities=AgentCapabilities(streaming=self.streaming),
        )

    async def _handle(self, request: Request) -> Response:
        if request.path.endswith("/agent-card.json"):
            return Response(200, [("content-type", "application/json")], self.card().to_json())
        envelope = json.loads(request.body)
        method = envelope["method"]
        self.calls.append(method)
        answers = self.script[method]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Response):
            return answer
        if isinstance(answer, SendMessageResponse | Task):
            result = {"jsonrpc": "2.0", "id": envelope["id"], "result": answer.to_dict()}
            return Response(200, [("content-type", "application/json")], json.dumps(result).encode())
        frames = [
            b"data: %b\n\n"
            % json.dumps({"jsonrpc": "2.0", "id": envelope["id"], "result": StreamResponse.of(e).to_dict()}).encode()
            for e in answer
        ]

        async def body() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame

        return Response(200, [("content-type", "text/event-stream")], body())


def _task(state: TaskState, *, text: str = "", artifact: str = "", history: Sequence[Message] = ()) -> Task:
    message = Message(role=Role.AGENT, message_id=f"m-{state.name}", parts=[Part(text=text)]) if text else None
    artifacts = [Artifact(artifact_id="a", parts=[Part(text=artifact)])] if artifact else []
    return Task(
        id=TASK,
        context_id=CONTEXT,
        status=TaskStatus(state=state, message=message),
        artifacts=artifacts,
        history=list(history),
    )


def _sent(task: Task) -> SendMessageResponse:
    return SendMessageResponse(task=task)


def _status(state: TaskState, message: Message | None = None) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=TASK, context_id=CONTEXT, status=TaskStatus(state=state, message=message))


# --- ask(): turns --------------------------------------------------------------------------------------------


async def test_max_turns_counts_answers(kitchen_server: ServerProcess, binding: str) -> None:
    """One question, one answer: ``max_turns=1`` is enough, and the reply to that answer is the result."""
    questions: list[Task] = []

    def answer(task: Task) -> str:
        questions.append(task)
        return "Ada"

    async with asyncio.timeout(T):
        async with Client(kitchen_server.url, transports=[binding], max_turns=1, on_input_required=answer) as client:
            assert await client.ask("ask me") == "got: Ada"
    assert [t.status.state for t in questions] == [TaskState.INPUT_REQUIRED]


async def test_reply_to_the_last_answer_may_be_a_message() -> None:
    script: dict[str, list[Answer]] = {
        "SendMessage": [
            _sent(_task(TaskState.INPUT_REQUIRED, text="Your name?")),
            SendMessageResponse(message=Message(role=Role.AGENT, message_id="m-2", parts=[Part(text="Hi Ada")])),
        ]
    }
    async with (
        asyncio.timeout(T),
        Stub(script, streaming=False) as stub,
        Client(stub.url, max_turns=1, on_input_required=lambda task: "Ada") as client,
    ):
        assert await client.ask("hello") == "Hi Ada"
    assert stub.calls == ["SendMessage", "SendMessage"]


async def test_more_questions_than_max_turns_raise_input_required() -> None:
    script: dict[str, list[Answer]] = {"SendMessage": [_sent(_task(TaskState.INPUT_REQUIRED, text="And then?"))]}
    answered: list[Task] = []

    def answer(task: Task) -> str:
        answered.append(task)
        return "more"

    async with (
        asyncio.timeout(T),
        Stub(script, streaming=False) as stub,
        Client(stub.url, max_turns=2, on_input_required=answer) as client,
    ):
        with pytest.raises(A2ATaskInputRequiredError) as info:
            await client.ask("hello")
    assert len(answered) == 2
    assert stub.calls == ["SendMessage"] * 3  # the question, then two answers, the last one's reply looked at
    assert info.value.task.status.state is TaskState.INPUT_REQUIRED
    assert "after 2 turns" in str(info.value)


# --- ask(): in-task authorization ------------------------------------------------------------------------------

NEEDED = "Calendar access needed: send a token in X-Calendar-Token"


async def test_auth_required_is_resolved_by_a_follow_up_carrying_the_credential(
    kitchen_server: ServerProcess, binding: str
) -> None:
    """``on_auth_required`` sees what the agent needs (the task's status message). A reply without the credential
    leaves the task AUTH_REQUIRED; ``Credentials`` sends the header with the follow-up, and the agent, finding it on
    that request, completes the task."""
    seen: list[str] = []

    async def sign_in(task: Task) -> str | Credentials:
        assert task.status.state is TaskState.AUTH_REQUIRED
        assert task.status.message is not None
        seen.append(task.status.message.text)
        if len(seen) == 1:
            return "I have no token"
        return Credentials({"X-Calendar-Token": CALENDAR_TOKEN}, message="here it is")

    async with asyncio.timeout(T):
        async with Client(kitchen_server.url, transports=[binding], on_auth_required=sign_in) as client:
            assert await client.ask("calendar") == "calendar: 3 meetings"
            assert client.headers["X-Calendar-Token"] == CALENDAR_TOKEN  # sent from then on
    assert seen == [NEEDED, "that is no calendar token"]


async def test_auth_required_unresolved_after_max_turns_raises(kitchen_server: ServerProcess, binding: str) -> None:
    asked: list[Task] = []

    def no_token(task: Task) -> str:
        asked.append(task)
        return "no token"

    async with asyncio.timeout(T):
        async with Client(kitchen_server.url, transports=[binding], max_turns=2, on_auth_required=no_token) as client:
            with pytest.raises(A2ATaskAuthRequiredError) as info:
                await client.ask("calendar")
    assert len(asked) == 2
    assert "after 2 turns" in str(info.value)
    assert info.value.task.status.state is TaskState.AUTH_REQUIRED


@pytest.mark.parametrize("follow", ["subscribe", "poll"])
async def test_auth_required_resolved_out_of_band(kitchen_server: ServerProcess, binding: str, follow: str) -> None:
    """The handler returns ``None``: the credential reaches the agent another way (the kitchen's grant route, as an
    OAuth callback would), and ``ask()`` waits for the task to move on by itself, then returns its outcome. When
    the card says the agent streams, the grant waits until the client follows the task: the client is seen
    waiting before the task resumes. Otherwise the client polls GetTask."""
    grants: list[asyncio.Task[httpx.Response]] = []
    async with asyncio.timeout(T), httpx.AsyncClient(timeout=T) as http:

        def granted_elsewhere(task: Task) -> None:
            assert task.status.message is not None
            assert task.status.message.text == NEEDED
            url = f"{kitchen_server.url}/test/grant/{task.id}"
            params = {"after_subscribe": "1"} if follow == "subscribe" else {}
            grants.append(asyncio.create_task(http.post(url, params=params)))

        async with Client(kitchen_server.url, transports=[binding]) as resolver:
            card = resolver.card
        assert card is not None
        assert card.capabilities.streaming
        if follow == "poll":
            card = card.model_copy(update={"capabilities": AgentCapabilities(streaming=False)})
        async with Client(card=card, transports=[binding], resume=FAST, on_auth_required=granted_elsewhere) as client:
            assert await client.ask("calendar") == "calendar: 3 meetings"
        assert len(grants) == 1
        assert (await grants[0]).status_code == 202


async def test_waiting_out_of_band_stops_at_a_new_interruption() -> None:
    """A task that moved on and was interrupted anew before the client subscribed shows another status than the one
    waited out: that is the next stop (the handler is asked again), not a snapshot to wait past."""
    asked_again = Message(role=Role.AGENT, message_id="m-again", parts=[Part(text="Sign in again")])
    again = Task(id=TASK, context_id=CONTEXT, status=TaskStatus(state=TaskState.AUTH_REQUIRED, message=asked_again))
    script: dict[str, list[Answer]] = {
        "SendMessage": [
            _sent(_task(TaskState.AUTH_REQUIRED, text="Sign in")),
            _sent(_task(TaskState.COMPLETED, artifact="done")),
        ],
        "SubscribeToTask": [[again]],
    }
    seen: list[str] = []
    replies: list[str | None] = [None, "I decline"]

    def handler(task: Task) -> str | None:
        assert task.status.message is not None
        seen.append(task.status.message.text)
        return replies[len(seen) - 1]

    async with (
        asyncio.timeout(T),
        Stub(script, streaming=True) as stub,
        Client(stub.url, resume=FAST, on_auth_required=handler) as client,
    ):
        assert await client.ask("hello") == "done"
    assert seen == ["Sign in", "Sign in again"]
    assert stub.calls == ["SendMessage", "SubscribeToTask", "SendMessage"]


def _out_of_band(task: Task) -> None:
    """An ``on_auth_required`` handler for a credential that goes out of band: nothing to send, wait."""


async def test_waiting_out_of_band_polls_once_the_server_closes_the_subscription() -> None:
    """Servers may close a subscription at an interrupted state (many 0.3 servers do): the subscription answers the
    task as it is, still AUTH_REQUIRED, and ends. Resubscribing would only replay that status until the attempts ran
    out (``A2AReconnectError``); the client polls GetTask instead, and returns the outcome when the task completes."""
    auth = _task(TaskState.AUTH_REQUIRED, text="Sign in")
    script: dict[str, list[Answer]] = {
        "SendMessage": [_sent(auth)],
        "SubscribeToTask": [[auth]],  # the snapshot, then the end of the stream
        "GetTask": [auth, auth, _task(TaskState.COMPLETED, artifact="done")],
    }
    async with (
        asyncio.timeout(T),
        Stub(script, streaming=True) as stub,
        Client(stub.url, resume=FAST, on_auth_required=_out_of_band) as client,
    ):
        assert await client.ask("hello") == "done"
    assert stub.calls == ["SendMessage", "SubscribeToTask", "GetTask", "GetTask", "GetTask"]


async def test_waiting_out_of_band_polls_when_the_subscription_cannot_be_resumed() -> None:
    """A subscription refused time after time (503) ends in ``A2AReconnectError``; waiting out of band, the client
    polls GetTask instead of giving up on a task that is still waiting for its credential."""
    auth = _task(TaskState.AUTH_REQUIRED, text="Sign in")
    unavailable = Response(503, [("content-type", "text/plain")], b"busy")
    script: dict[str, list[Answer]] = {
        "SendMessage": [_sent(auth)],
        "SubscribeToTask": [unavailable],
        "GetTask": [auth, auth, _task(TaskState.COMPLETED, artifact="done")],
    }
    async with (
        asyncio.timeout(T),
        Stub(script, streaming=True) as stub,
        Client(stub.url, resume=FAST, on_auth_required=_out_of_band) as client,
    ):
        assert await client.ask("hello") == "done"
    assert stub.calls.count("SubscribeToTask") == FAST.attempts + 1
    assert stub.calls[-1] == "GetTask"


@pytest.mark.parametrize("streaming", [True, False], ids=["subscribe", "poll"])
async def test_input_timeout_bounds_the_out_of_band_wait(streaming: bool) -> None:
    """A credential that never arrives: ``ask()`` waits ``input_timeout`` for the task to move on, then raises the
    task's ``A2ATaskAuthRequiredError`` (it used to poll for ever)."""
    auth = _task(TaskState.AUTH_REQUIRED, text="Sign in")
    script: dict[str, list[Answer]] = {"SendMessage": [_sent(auth)], "SubscribeToTask": [[auth]], "GetTask": [auth]}
    async with (
        asyncio.timeout(5.0),
        Stub(script, streaming=streaming) as stub,
        Client(stub.url, resume=FAST, input_timeout=0.2, on_auth_required=_out_of_band) as client,
    ):
        with pytest.raises(A2ATaskAuthRequiredError, match=r"input_timeout \(0\.2 s\)") as info:
            await client.ask("hello")
    assert info.value.task.status.state is TaskState.AUTH_REQUIRED
    assert info.value.task.id == TASK
    assert "GetTask" in stub.calls


async def test_an_auth_handler_returning_bare_headers_is_told_what_to_return() -> None:
    script: dict[str, list[Answer]] = {"SendMessage": [_sent(_task(TaskState.AUTH_REQUIRED, text="Sign in"))]}

    def headers_only(task: Task) -> object:
        return {"X-Calendar-Token": "t"}

    async with (
        asyncio.timeout(T),
        Stub(script, streaming=False) as stub,
        Client(stub.url, on_auth_required=headers_only) as client,  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match=r"Credentials\(headers"):
            await client.ask("hello")
        assert "X-Calendar-Token" not in client.headers
    assert stub.calls == ["SendMessage"]  # nothing sent for it


# --- ask(): a reply that is not the end ----------------------------------------------------------------------


@pytest.mark.parametrize("follow", ["subscribe", "poll"])
async def test_ask_follows_a_task_the_send_timeout_left_working(
    timeout_server: ServerProcess, binding: str, follow: str
) -> None:
    """relaykit with a send timeout answers SendMessage with the WORKING task: ``ask`` waits for the real answer, by
    SubscribeToTask when the card says the agent streams, else by polling GetTask."""
    async with asyncio.timeout(T):
        async with Client(timeout_server.url, transports=[binding]) as resolver:
            card = resolver.card
            early = await resolver.send("slow 2")  # 0.4 s of work against a 0.1 s send timeout
        assert card is not None
        assert isinstance(early, Task)
        assert early.status.state in (TaskState.SUBMITTED, TaskState.WORKING)
        if follow == "poll":
            card = card.model_copy(update={"capabilities": AgentCapabilities(streaming=False)})
        async with Client(card=card, transports=[binding], resume=FAST) as client:
            assert await client.ask("slow 2") == "slow 0slow 1"


async def test_ask_polls_through_a_question_to_the_end() -> None:
    """Polling (no streaming) stops at INPUT_REQUIRED too: the question is answered and the next reply followed."""
    script: dict[str, list[Answer]] = {
        "SendMessage": [_sent(_task(TaskState.WORKING)), _sent(_task(TaskState.SUBMITTED))],
        "GetTask": [
            _task(TaskState.WORKING),
            _task(TaskState.INPUT_REQUIRED, text="Your name?"),
            _task(TaskState.WORKING),
            _task(TaskState.COMPLETED, artifact="Hello, Ada"),
        ],
    }
    questions: list[str] = []

    def answer(task: Task) -> str:
        assert task.status.message is not None
        questions.append(task.status.message.text)
        return "Ada"

    async with (
        asyncio.timeout(T),
        Stub(script, streaming=False) as stub,
        Client(stub.url, resume=FAST, on_input_required=answer) as client,
    ):
        assert await client.ask("hello") == "Hello, Ada"
    assert questions == ["Your name?"]
    assert stub.calls == ["SendMessage", "GetTask", "GetTask", "SendMessage", "GetTask", "GetTask"]


# --- streams ---------------------------------------------------------------------------------------------------


async def test_resubscribing_to_a_task_that_never_moves_is_bounded() -> None:
    """A server may answer SubscribeToTask at an interrupted state with the snapshot alone and close: the snapshot
    is no progress, so ``ResumePolicy.attempts`` bounds the resubscriptions."""
    snapshot = _task(TaskState.INPUT_REQUIRED, text="Your name?")
    script: dict[str, list[Answer]] = {"SubscribeToTask": [[snapshot]], "GetTask": [snapshot]}
    events: list[Event] = []

    async def follow(client: Client) -> None:
        async for event in client.subscribe(TASK):
            events.append(event)

    async with asyncio.timeout(T), Stub(script, streaming=True) as stub, Client(stub.url, resume=FAST) as client:
        with pytest.raises(A2AReconnectError) as info:
            await follow(client)
    assert info.value.attempts == FAST.attempts
    assert events == [snapshot]  # shown once
    assert stub.calls.count("SubscribeToTask") == 1 + FAST.attempts


def _said(message_id: str, text: str) -> Message:
    return Message(role=Role.AGENT, message_id=message_id, parts=[Part(text=text)], task_id=TASK, context_id=CONTEXT)


@pytest.mark.parametrize("opening", ["stream", "subscribe"])
async def test_a_new_state_with_a_known_message_is_delivered(opening: str) -> None:
    """An agent that reuses one message for WORKING then COMPLETED (or whose message the snapshot's history holds):
    the COMPLETED status still reaches the application; only the status replayed as it was is dropped."""
    progress = _said("m-progress", "on it")
    if opening == "stream":
        first = _task(TaskState.SUBMITTED)
        events: list[Event] = [first, _status(TaskState.WORKING, progress), _status(TaskState.WORKING, progress)]
    else:
        first = _task(TaskState.WORKING, history=[progress])
        events = [first]
    events.append(_status(TaskState.COMPLETED, progress))
    method = "SendStreamingMessage" if opening == "stream" else "SubscribeToTask"
    async with (
        asyncio.timeout(T),
        Stub({method: [events]}, streaming=True) as stub,
        Client(stub.url, resume=FAST) as client,
    ):
        stream = client.stream("go") if opening == "stream" else client.subscribe(TASK)
        got = [e async for e in stream]
    states = [e.status.state for e in got if isinstance(e, TaskStatusUpdateEvent)]
    expected = [TaskState.WORKING, TaskState.COMPLETED] if opening == "stream" else [TaskState.COMPLETED]
    assert states == expected
    assert got[0] == first
    assert not any(isinstance(e, TaskArtifactUpdateEvent) for e in got)
