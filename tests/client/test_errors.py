"""Error mapping: each error of the table, raised by a real relaykit server, arrives as its class (over JSON-RPC and
HTTP+JSON); transport failures arrive as ``A2AConnectionError`` / ``A2ATimeoutError``; 502/503/504 answers are
retried for idempotent operations and not for SendMessage (unless ``retry_send``).

Two ways to provoke a server error:

* naturally, where an operation does (an unknown task, a finished task, push off, a required extension, ...);
* through ``raising_app`` (``_agents.py``), whose request handler raises the named error class on a GetTask, before
  the first event of a SubscribeToTask, or after the first event of a SendStreamingMessage (an SSE error frame). An
  executor cannot do this: the engine turns executor exceptions into FAILED tasks.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from support.servers import ServerProcess, free_port

from client._net import MiniHTTP, Request, Response, forward_to
from relaykit import Task, TaskState
from relaykit._methods import Operation, Route
from relaykit.client import Client, ResumePolicy, RetryPolicy
from relaykit.errors import (
    A2AConnectionError,
    A2AError,
    A2AReconnectError,
    A2ATimeoutError,
    AuthenticationRequiredError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    PushNotificationNotSupportedError,
    ResourceExhaustedError,
    ServiceUnavailableError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from relaykit.types import AgentCard, GetTaskRequest, TaskPushNotificationConfig, TaskStatusUpdateEvent

T = 20.0
NO_RETRY = RetryPolicy(attempts=1)
ONE_RESUME = ResumePolicy(attempts=1, backoff=0.01, max_backoff=0.01)
REQUIRED_EXTENSION = "urn:relaykit-test:required/v1"  # as in _agents.py

TABLE: list[type[A2AError]] = [
    TaskNotFoundError,
    TaskNotCancelableError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
    ContentTypeNotSupportedError,
    InvalidAgentResponseError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    VersionNotSupportedError,
    JSONParseError,
    InvalidRequestError,
    PayloadTooLargeError,
    MethodNotFoundError,
    InvalidParamsError,
    InternalError,
    AuthenticationRequiredError,
    PermissionDeniedError,
    ResourceExhaustedError,
    ServiceUnavailableError,
]


def _client(server: ServerProcess, binding: str, **kwargs: Any) -> Client:
    options: dict[str, Any] = {"retry": NO_RETRY, "resume": ONE_RESUME, "timeout": 10.0, **kwargs}
    return Client(server.url, transports=[binding], **options)


# --- every class of the table, raised by the server's handler -------------------------------------------------


def _expected(cls: type[A2AError], binding: str, path: str) -> type[A2AError]:
    if cls is JSONParseError and binding == "HTTP+JSON":
        return InvalidRequestError  # REST has no parse-error code: 400 INVALID_REQUEST (digest §6.2)
    if cls is PayloadTooLargeError and binding == "JSONRPC" and path == "mid-stream":
        return InvalidRequestError  # in an SSE frame only the JSON-RPC code (-32600) is left, no HTTP 413
    return cls


@pytest.mark.parametrize("cls", TABLE, ids=lambda c: c.__name__)
@pytest.mark.parametrize("path", ["unary", "stream-start", "mid-stream"])
async def test_error_table(raising_server: ServerProcess, binding: str, cls: type[A2AError], path: str) -> None:
    expected = _expected(cls, binding, path)
    async with asyncio.timeout(T), _client(raising_server, binding) as client:
        first_events: list[object] = []

        async def provoke() -> None:
            if path == "unary":
                await client.get_task(f"raise-{cls.__name__}")
            elif path == "stream-start":
                [e async for e in client.subscribe(f"raise-{cls.__name__}")]
            else:
                async for event in client.stream(f"raise-mid-{cls.__name__}"):
                    first_events.append(event)

        if cls is ServiceUnavailableError and path == "mid-stream":
            # An UNAVAILABLE error event is a drop like any other: the stream is resumed (SubscribeToTask) and ends
            # with the task's end. It used to end the stream with the error on JSON-RPC and REST (gRPC resumed it).
            await provoke()
            states = [e.status.state for e in first_events if isinstance(e, Task | TaskStatusUpdateEvent)]
            assert states[-1] is TaskState.COMPLETED, first_events
            return
        with pytest.raises(A2AError) as info:
            await provoke()
    error = info.value
    if cls is ServiceUnavailableError and path == "stream-start":
        # UNAVAILABLE before a stream is retryable on every binding (it used to be on REST's 503 alone): the client
        # re-subscribes, then gives up with the server's error as the cause.
        assert type(error) is A2AReconnectError
        assert type(error.__cause__) is ServiceUnavailableError
        return
    assert type(error) is expected, f"{cls.__name__} arrived as {type(error).__name__}: {error}"
    assert ("raised mid-stream" if path == "mid-stream" else "raised on request") in str(error)
    if path == "mid-stream":
        assert len(first_events) == 1
        assert isinstance(first_events[0], Task)
    if expected is not InternalError:
        assert error.reason == expected.reason


async def test_handler_crash_is_internal_error(raising_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T), _client(raising_server, binding) as client:
        with pytest.raises(InternalError) as info:
            await client.get_task("raise-crash")
    assert type(info.value) is InternalError
    assert "a bug in the handler" not in str(info.value)  # details stay in the server log


# --- the same classes, provoked by ordinary operations ----------------------------------------------------------


async def test_task_not_found(kitchen_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T), _client(kitchen_server, binding) as client:
        missing = str(uuid.uuid4())
        with pytest.raises(TaskNotFoundError):
            await client.get_task(missing)
        with pytest.raises(TaskNotFoundError):
            await client.cancel(missing)
        with pytest.raises(TaskNotFoundError):
            await client.send("continue", task_id=missing)
        with pytest.raises(TaskNotFoundError):
            await client.create_push_config(missing, "http://127.0.0.1:9/hook")


async def test_finished_task_errors(kitchen_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T), _client(kitchen_server, binding) as client:
        done = await client.send("done")
        assert isinstance(done, Task)
        with pytest.raises(TaskNotCancelableError):
            await client.cancel(done.id)
        with pytest.raises(UnsupportedOperationError):
            [e async for e in client.subscribe(done.id)]
        with pytest.raises(UnsupportedOperationError):
            await client.send("more", task_id=done.id)


async def test_push_not_supported(nopush_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T), _client(nopush_server, binding) as client:
        assert client.card is not None
        assert not client.card.capabilities.push_notifications
        done = await client.send("no push here")
        assert isinstance(done, Task)
        with pytest.raises(PushNotificationNotSupportedError):
            await client.create_push_config(done.id, "http://127.0.0.1:9/hook")
        with pytest.raises(PushNotificationNotSupportedError):
            await client.list_push_configs(done.id)
        with pytest.raises(PushNotificationNotSupportedError):
            await client.send("inline", push=TaskPushNotificationConfig(url="http://127.0.0.1:9/hook"))


async def test_invalid_agent_response(kitchen_server: ServerProcess, binding: str) -> None:
    """The executor returns without publishing anything."""
    async with asyncio.timeout(T), _client(kitchen_server, binding) as client:
        with pytest.raises(InvalidAgentResponseError):
            await client.send("silent")


async def test_extension_required_then_extended_card_not_configured(strict_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T):
        async with _client(strict_server, binding) as client:
            with pytest.raises(ExtensionSupportRequiredError) as info:
                await client.send("hello")
            assert REQUIRED_EXTENSION in str(info.value)
        async with _client(strict_server, binding, extensions=[REQUIRED_EXTENSION]) as client:
            done = await client.send("hello")
            assert isinstance(done, Task)
            with pytest.raises(ExtendedAgentCardNotConfiguredError):
                await client.extended_card()


async def test_required_extension_on_a_later_header_line_counts(strict_server: ServerProcess, binding: str) -> None:
    """Several ``A2A-Extensions`` lines are one comma-separated list (RFC 9110 §5.3): the required extension on the
    second line activates it as on the first (sent raw: relaykit's client joins them into one line itself)."""
    headers = [("A2A-Version", "1.0"), ("A2A-Extensions", "urn:ext:opt"), ("A2A-Extensions", REQUIRED_EXTENSION)]
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hello"}]}
    async with httpx.AsyncClient(base_url=strict_server.url, timeout=T) as http:
        if binding == "JSONRPC":
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
            reply = await http.post("/", json=body, headers=headers)
            result = reply.json().get("result") or reply.json()
        else:
            reply = await http.post("/message:send", json={"message": message}, headers=headers)
            result = reply.json()
    assert reply.status_code == 200, reply.text
    assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED", result
    assert reply.headers["a2a-extensions"] == REQUIRED_EXTENSION


async def test_unsupported_extended_card(nopush_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T), _client(nopush_server, binding) as client:
        with pytest.raises(UnsupportedOperationError):
            await client.extended_card()


@pytest.mark.parametrize("version", ["2.0", "0.3"])
async def test_version_not_supported(kitchen_server: ServerProcess, binding: str, version: str) -> None:
    async with asyncio.timeout(T), _client(kitchen_server, binding, headers={"A2A-Version": version}) as client:
        with pytest.raises(VersionNotSupportedError):
            await client.get_task(str(uuid.uuid4()))
        with pytest.raises(VersionNotSupportedError):
            [e async for e in client.stream("hello")]


async def test_invalid_params(kitchen_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T), _client(kitchen_server, binding) as client:
        with pytest.raises(InvalidParamsError):
            [p async for p in client.list_task_pages(page_token="not-a-token-from-this-server")]


async def test_method_not_found(kitchen_server: ServerProcess, binding: str) -> None:
    """An operation this server does not have (the client's transport can call any operation of the table shape)."""
    unknown = Operation("FrobnicateTask", GetTaskRequest, Task, False, (Route("GET", "/frobnicate/{id}", False),), "x")
    async with asyncio.timeout(T), _client(kitchen_server, binding) as client:
        with pytest.raises(MethodNotFoundError):
            await client.transport.call(unknown, GetTaskRequest(id="t-1"), headers={})


async def test_payload_too_large(raising_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T), _client(raising_server, binding) as client:
        with pytest.raises(InvalidRequestError) as info:
            await client.send("x" * (300 * 1024))
    assert type(info.value) is PayloadTooLargeError


# --- transport failures -----------------------------------------------------------------------------------------


async def test_connection_refused(kitchen_server: ServerProcess, binding: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with asyncio.timeout(T):
        with pytest.raises(A2AConnectionError):
            await Client(dead, transports=[binding]).connect()
        async with _client(kitchen_server, binding) as live:
            assert live.card is not None
            card = _card_at(live, kitchen_server.url, dead)
        async with Client(card=card, transports=[binding], retry=RetryPolicy(attempts=2, backoff=0.01)) as client:
            with pytest.raises(A2AConnectionError) as info:
                await client.get_task("t-1")
            assert type(info.value) is A2AConnectionError
            with pytest.raises(A2AConnectionError):
                await client.send("hello")


def _card_at(client: Client, old: str, new: str) -> AgentCard:
    """The client's card with its interfaces moved from ``old`` to ``new`` (to route calls through a test server)."""
    assert client.card is not None
    interfaces = [i.model_copy(update={"url": i.url.replace(old, new)}) for i in client.card.supported_interfaces]
    return client.card.model_copy(update={"supported_interfaces": interfaces})


@pytest.fixture
async def stall() -> AsyncIterator[MiniHTTP]:
    """A server that accepts requests and never answers them."""

    async def never(request: Request) -> Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    server = await MiniHTTP(never).start()
    try:
        yield server
    finally:
        await server.aclose()


async def test_timeouts(kitchen_server: ServerProcess, binding: str, stall: MiniHTTP) -> None:
    async with asyncio.timeout(T):
        with pytest.raises(A2ATimeoutError):
            await Client(stall.url, transports=[binding], timeout=0.2).connect()  # the card fetch
        async with _client(kitchen_server, binding) as live:
            card = _card_at(live, kitchen_server.url, stall.url)
        before = len(stall.requests)
        retry = RetryPolicy(attempts=3, backoff=0.01)
        async with Client(card=card, transports=[binding], timeout=0.2, retry=retry) as client:
            with pytest.raises(A2ATimeoutError):
                await client.get_task("t-1")
            assert len(stall.requests) - before == 3  # an idempotent call is retried after a timeout
            with pytest.raises(A2ATimeoutError):
                await client.send("hello")
            assert len(stall.requests) - before == 4  # SendMessage is not
        # A real server that takes longer than the client waits (the card resolved beforehand, at normal speed).
        async with _client(kitchen_server, binding) as live:
            real = live.card
        async with Client(card=real, transports=[binding], timeout=0.3) as client:
            with pytest.raises(A2ATimeoutError):
                await client.send("slow 5")


# --- retries of 502/503/504 -------------------------------------------------------------------------------------


class Flaky:
    """A MiniHTTP front for a real server: the first ``failures`` requests get ``status`` (a proxy's text page) or
    what ``answer`` makes of them, the rest are forwarded."""

    def __init__(
        self, upstream: str, status: int, failures: int, answer: Callable[[Request], Response] | None = None
    ) -> None:
        self.status = status
        self.failures = failures
        self.answer = answer
        self.http = httpx.AsyncClient(timeout=10.0)
        self.forward = forward_to(upstream, self.http)
        self.server = MiniHTTP(self.handle)

    async def handle(self, request: Request) -> Response:
        if len(self.server.requests) <= self.failures:
            if self.answer is not None:
                return self.answer(request)
            return Response(self.status, [("content-type", "text/plain")], b"upstream unavailable")
        return await self.forward(request)

    async def aclose(self) -> None:
        await self.server.aclose()
        await self.http.aclose()


async def _flaky_client(
    kitchen: ServerProcess,
    binding: str,
    status: int,
    failures: int,
    retry: RetryPolicy,
    answer: Callable[[Request], Response] | None = None,
) -> tuple[Flaky, Client]:
    flaky = Flaky(kitchen.url, status, failures, answer)
    await flaky.server.start()
    async with _client(kitchen, binding) as live:
        card = _card_at(live, kitchen.url, flaky.server.url)
    client = Client(card=card, transports=[binding], retry=retry)
    await client.connect()
    return flaky, client


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_idempotent_calls_are_retried(kitchen_server: ServerProcess, binding: str, status: int) -> None:
    async with asyncio.timeout(T), _client(kitchen_server, binding) as direct:
        task = await direct.send("retry me")
        assert isinstance(task, Task)
        flaky, client = await _flaky_client(kitchen_server, binding, status, 2, RetryPolicy(attempts=3, backoff=0.01))
        try:
            got = await client.get_task(task.id)
            assert got.id == task.id
            assert len(flaky.server.requests) == 3  # two failures, then the forwarded answer
        finally:
            await client.aclose()
            await flaky.aclose()


def _a2a_error(binding: str, error: A2AError, status: int) -> Callable[[Request], Response]:
    """``error`` as a server sends it: JSON-RPC's envelope (with HTTP ``status``), REST's google.rpc.Status."""

    def answer(request: Request) -> Response:
        if binding == "JSONRPC":
            body = {"jsonrpc": "2.0", "id": json.loads(request.body)["id"], "error": error.to_jsonrpc()}
        else:
            body = error.to_status()
        return Response(status, [("content-type", "application/json")], json.dumps(body).encode())

    return answer


async def test_server_unavailable_is_retried(kitchen_server: ServerProcess, binding: str) -> None:
    """What relaykit answers while it drains or its store is down: JSON-RPC -32000 UNAVAILABLE with HTTP 200 (it used
    to be given up at once, though REST's 503 and gRPC's UNAVAILABLE were retried), REST 503 with its ErrorInfo."""
    status = 200 if binding == "JSONRPC" else 503
    unavailable = _a2a_error(binding, ServiceUnavailableError("the server is shutting down"), status)
    async with asyncio.timeout(T), _client(kitchen_server, binding) as direct:
        task = await direct.send("retry me")
        assert isinstance(task, Task)
        retry = RetryPolicy(attempts=3, backoff=0.01)
        flaky, client = await _flaky_client(kitchen_server, binding, 0, 2, retry, unavailable)
        try:
            got = await client.get_task(task.id)
            assert got.id == task.id
            assert len(flaky.server.requests) == 3
        finally:
            await client.aclose()
            await flaky.aclose()


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_typed_error_behind_a_gateway_status_is_kept(
    kitchen_server: ServerProcess, binding: str, status: int
) -> None:
    """Digest §9 #2: classify by ErrorInfo.reason, not by the HTTP code (v1.0.0 servers send InvalidAgentResponse
    as 502). The typed error used to be replaced by a retryable ServiceUnavailableError, and retried."""
    wrong = _a2a_error(binding, InvalidAgentResponseError("the agent's output broke the protocol"), status)
    async with asyncio.timeout(T):
        retry = RetryPolicy(attempts=3, backoff=0.01)
        flaky, client = await _flaky_client(kitchen_server, binding, status, 100, retry, wrong)
        try:
            with pytest.raises(InvalidAgentResponseError, match="broke the protocol"):
                await client.get_task("t-1")
            assert len(flaky.server.requests) == 1
        finally:
            await client.aclose()
            await flaky.aclose()


async def test_retries_give_up(kitchen_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T):
        flaky, client = await _flaky_client(kitchen_server, binding, 503, 100, RetryPolicy(attempts=3, backoff=0.01))
        try:
            with pytest.raises(ServiceUnavailableError):
                await client.get_task("t-1")
            assert len(flaky.server.requests) == 3
        finally:
            await client.aclose()
            await flaky.aclose()


def _message_id(request: Request) -> str:
    body = json.loads(request.body)
    params = body.get("params", body)
    return str(params["message"]["messageId"])


async def test_send_is_not_retried_by_default(kitchen_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T):
        flaky, client = await _flaky_client(kitchen_server, binding, 503, 1, RetryPolicy(attempts=3, backoff=0.01))
        try:
            with pytest.raises(ServiceUnavailableError):
                await client.send("only once")
            assert len(flaky.server.requests) == 1
        finally:
            await client.aclose()
            await flaky.aclose()


async def test_send_retried_when_asked(kitchen_server: ServerProcess, binding: str) -> None:
    async with asyncio.timeout(T):
        retry = RetryPolicy(attempts=3, backoff=0.01, retry_send=True)
        flaky, client = await _flaky_client(kitchen_server, binding, 502, 2, retry)
        try:
            task = await client.send("at least once")
            assert isinstance(task, Task)
            assert [a.text_content for a in task.artifacts] == ["at least once"]
            assert len(flaky.server.requests) == 3
            assert len({_message_id(r) for r in flaky.server.requests}) == 1  # the same message each time
        finally:
            await client.aclose()
            await flaky.aclose()


async def test_cancel_whose_answer_was_lost(kitchen_server: ServerProcess, binding: str) -> None:
    """The first CancelTask cancels the task but its answer is lost (the connection drops): the retry is refused
    with TaskNotCancelable (the task is CANCELED now), which used to reach the caller as an error for a cancel that
    worked. The client now returns the canceled task."""
    async with asyncio.timeout(T), _client(kitchen_server, binding) as direct:
        working = await direct.send("slow 50", return_immediately=True)
        assert isinstance(working, Task)
        http = httpx.AsyncClient(timeout=10.0)
        forward = forward_to(kitchen_server.url, http)
        lost: list[Request] = []

        async def handle(request: Request) -> Response:
            answer = await forward(request)
            is_cancel = request.path.endswith(":cancel") or b'"CancelTask"' in request.body
            if is_cancel and not lost:
                lost.append(request)
                assert not isinstance(answer.body, bytes)
                async for _ in answer.body:  # the server did cancel; its answer never reaches the client
                    pass
                raise ConnectionResetError("the answer is lost")
            return answer

        front = await MiniHTTP(handle).start()
        client = Client(card=_card_at(direct, kitchen_server.url, front.url), transports=[binding])
        try:
            await client.connect()
            canceled = await client.cancel(working.id)
            assert canceled.id == working.id
            assert canceled.status.state is TaskState.CANCELED
            assert len(lost) == 1
        finally:
            await client.aclose()
            await front.aclose()
            await http.aclose()
