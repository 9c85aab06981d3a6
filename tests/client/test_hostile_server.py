"""The client against a broken or hostile agent: it holds bounded memory (``max_response_bytes`` for a body, a card,
a stream line and a stream event; the connection is closed when one is exceeded), it stops paging when the server
repeats a page token, it keeps an unknown JSON-RPC error's code and message, and no credential it sends ever
appears in an error it raises.

The agent is a ``MiniHTTP`` on 127.0.0.1 whose answers each test chooses; its card lists both HTTP bindings at its URL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from client._net import Handler, MiniHTTP, Request, Response
from relaykit.client import BearerAuth, Client, ResumePolicy, RetryPolicy
from relaykit.errors import (
    A2AConnectionError,
    A2AResponseTooLargeError,
    AuthenticationRequiredError,
    InternalError,
)
from relaykit.types import AgentCard, AgentInterface, AgentSkill

T = 10.0
LIMIT = 64 * 1024
NO_RETRY = RetryPolicy(attempts=1)
NO_RESUME = ResumePolicy(attempts=0)
JSON = [("content-type", "application/json")]
TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}


def _card(url: str) -> AgentCard:
    return AgentCard(
        name="hostile",
        description="an agent that answers what the test says",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url + "/", protocol_version="1.0"),
            AgentInterface(protocol_binding="HTTP+JSON", url=url, protocol_version="1.0"),
        ],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )


def _jsonrpc(request: Request) -> bool:
    return request.method == "POST" and request.path == "/"


def _result(request: Request, result: Any) -> Response:
    """``result`` as the binding of ``request`` carries it (JSON-RPC: in the envelope; REST: the body)."""
    body = {"jsonrpc": "2.0", "id": json.loads(request.body)["id"], "result": result} if _jsonrpc(request) else result
    return Response(200, JSON, json.dumps(body).encode())


def _streaming(request: Request) -> bool:
    if _jsonrpc(request):
        return bool(json.loads(request.body)["method"] == "SendStreamingMessage")
    return request.path == "/message:stream"


class Endless:
    """A body that never ends (``head``, then ``chunk`` for ever); ``stopped`` is set once the server stops sending
    it, i.e. once the client has closed the connection."""

    def __init__(self, chunk: bytes, head: bytes = b"") -> None:
        self.chunk = chunk
        self.head = head
        self.stopped = asyncio.Event()

    async def body(self) -> AsyncIterator[bytes]:
        try:
            if self.head:
                yield self.head
            while True:
                yield self.chunk
        finally:
            self.stopped.set()


Agent = Callable[[Handler], Awaitable[MiniHTTP]]


@pytest.fixture
async def agent() -> AsyncIterator[Agent]:
    """Starts a ``MiniHTTP`` agent with the given handler (stopped at teardown)."""
    started: list[MiniHTTP] = []

    async def start(handler: Handler) -> MiniHTTP:
        server = await MiniHTTP(handler).start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.aclose()


def _client(server: MiniHTTP, binding: str, **options: Any) -> Client:
    return Client(card=_card(server.url), transports=[binding], retry=NO_RETRY, resume=NO_RESUME, **options)


# --- memory bounds ----------------------------------------------------------------------------------------------


async def test_unary_body_over_the_limit(agent: Agent, binding: str) -> None:
    """A body just under ``max_response_bytes`` is read; an endless one stops at the limit and closes the connection
    (it used to be read whole: a hostile server could exhaust the client's memory)."""
    endless = Endless(b"x" * 4096, head=b'{"id": "')
    filler = "y" * (LIMIT - 1024)

    async def handle(request: Request) -> Response:
        if "t-big" in request.body.decode() or request.path.endswith("/t-big"):
            return Response(200, JSON, endless.body())
        return _result(request, {**TASK, "metadata": {"filler": filler}})

    server = await agent(handle)
    async with asyncio.timeout(T), _client(server, binding, max_response_bytes=LIMIT) as client:
        task = await client.get_task("t-1")
        assert task.metadata == {"filler": filler}
        with pytest.raises(A2AResponseTooLargeError) as info:
            await client.get_task("t-big")
        assert str(LIMIT) in str(info.value)
        await endless.stopped.wait()  # the client closed the connection instead of draining it


async def test_card_over_the_limit(agent: Agent) -> None:
    endless = Endless(b" " * 4096, head=b"{")

    async def handle(request: Request) -> Response:
        return Response(200, JSON, endless.body())

    server = await agent(handle)
    async with asyncio.timeout(T):
        with pytest.raises(A2AResponseTooLargeError):
            await Client(server.url, max_response_bytes=LIMIT).connect()
        await endless.stopped.wait()


@pytest.mark.parametrize(
    ("shape", "head", "chunk"),
    [
        ("line", b"data: ", b"x" * 4096),  # one line that never ends
        ("event", b"", b"data: " + b"x" * 4090 + b"\n"),  # data lines, never the blank line ending the event
    ],
)
async def test_stream_event_over_the_limit(agent: Agent, binding: str, shape: str, head: bytes, chunk: bytes) -> None:
    """httpx's line reader buffers a line without end for ever, and the parser kept every data line of an unended
    event: both grew without bound."""
    endless = Endless(chunk, head=head)

    async def handle(request: Request) -> Response:
        assert _streaming(request)
        return Response(200, [("content-type", "text/event-stream")], endless.body())

    server = await agent(handle)
    async with asyncio.timeout(T), _client(server, binding, max_response_bytes=LIMIT) as client:
        with pytest.raises(A2AResponseTooLargeError, match=f"stream {shape}"):
            [e async for e in client.stream("hello")]
        await endless.stopped.wait()


# --- paging -----------------------------------------------------------------------------------------------------


async def test_repeated_page_token_ends_the_listing(agent: Agent, binding: str) -> None:
    """A server that hands out a token it already gave (here ``a``, ``b``, ``a``, …) used to keep ``list_push_configs``
    and ``list_tasks`` paging for ever."""
    tokens: list[str] = []

    async def handle(request: Request) -> Response:
        if _jsonrpc(request):
            token = json.loads(request.body)["params"].get("pageToken", "")
        else:
            token = request.target.partition("pageToken=")[2].partition("&")[0]
        tokens.append(token)
        following = "b" if token == "a" else "a"
        if "PushNotificationConfigs" in request.body.decode() or "/pushNotificationConfigs" in request.path:
            config = {"taskId": "t-1", "id": f"cfg-{len(tokens)}", "url": "http://127.0.0.1:9/hook"}
            return _result(request, {"configs": [config], "nextPageToken": following})
        return _result(request, {"tasks": [TASK], "nextPageToken": following, "pageSize": 1, "totalSize": 1})

    server = await agent(handle)
    async with asyncio.timeout(T), _client(server, binding) as client:
        configs = await client.list_push_configs("t-1")
        assert [c.id for c in configs] == ["cfg-1", "cfg-2", "cfg-3"]
        assert tokens == ["", "a", "b"]
        tokens.clear()
        tasks = [t async for t in client.list_tasks()]
        assert len(tasks) == 3
        assert tokens == ["", "a", "b"]


# --- unknown error codes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"code": -32000, "message": "Server error"}, -32000),  # the JSON-RPC generic server error, no ErrorInfo
        (
            {
                "code": -32000,
                "message": "busy",
                "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "BUSY", "domain": "x"}],
            },
            -32000,
        ),
        ({"code": -32050, "message": "vendor trouble"}, -32050),
    ],
    ids=["server-error", "unknown-reason", "unknown-code"],
)
async def test_unknown_jsonrpc_error_keeps_its_code(agent: Agent, error: dict[str, Any], code: int) -> None:
    """-32000 without a known reason used to be AuthenticationRequiredError (an outage reported as bad credentials),
    and any other unknown code became -32603."""

    async def handle(request: Request) -> Response:
        body = {"jsonrpc": "2.0", "id": json.loads(request.body)["id"], "error": error}
        return Response(200, JSON, json.dumps(body).encode())

    server = await agent(handle)
    async with asyncio.timeout(T), _client(server, "JSONRPC") as client:
        with pytest.raises(InternalError) as info:
            await client.get_task("t-1")
    assert type(info.value) is InternalError
    assert info.value.code == code
    assert str(info.value) == error["message"]


async def test_known_reason_on_the_generic_code_is_still_its_class(agent: Agent) -> None:
    error = AuthenticationRequiredError("who are you?").to_jsonrpc()

    async def handle(request: Request) -> Response:
        body = {"jsonrpc": "2.0", "id": json.loads(request.body)["id"], "error": error}
        return Response(200, JSON, json.dumps(body).encode())

    server = await agent(handle)
    async with asyncio.timeout(T), _client(server, "JSONRPC") as client:
        with pytest.raises(AuthenticationRequiredError, match="who are you"):
            await client.get_task("t-1")


# --- credentials stay out of errors -----------------------------------------------------------------------------


def _everything_printed(exc: BaseException) -> str:
    """The exceptions a printed traceback of ``exc`` shows (it and those chained to it), without the source lines."""
    shown: list[str] = []
    current: BaseException | None = exc
    while current is not None:
        shown.append(f"{current!r} {current}")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n".join(shown)


@pytest.mark.parametrize("where", ["card", "call"])
async def test_a_malformed_credential_is_not_quoted_in_the_error(agent: Agent, binding: str, where: str) -> None:
    """h11 refuses a header value with a control character and quotes it (``Illegal header value b'Bearer …\\n'``);
    that text used to become the error's message, which the CLI prints."""

    async def handle(request: Request) -> Response:
        raise AssertionError("nothing is sent: the request is refused before it leaves")

    server = await agent(handle)

    async def attempt() -> None:
        if where == "card":
            await Client(server.url, headers={"Authorization": "Bearer s3cret\n"}).connect()
            return
        async with _client(server, binding, interceptors=[BearerAuth("s3cret\n")]) as client:
            await client.get_task("t-1")

    async with asyncio.timeout(T):
        with pytest.raises(A2AConnectionError) as info:
            await attempt()
    assert "s3cret" not in _everything_printed(info.value)
    assert "not valid HTTP" in str(info.value)
    assert server.requests == []
