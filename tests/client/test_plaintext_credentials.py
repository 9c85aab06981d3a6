"""Credentials never go without TLS to a host that is not loopback unless the caller opts in: one rule for JSON-RPC,
HTTP+JSON, gRPC and the card request.

Remote hosts here are TEST-NET addresses (192.0.2.0/24, RFC 5737) and ``agent.example``: an httpx request hook
records what the client tried to send, so a refusal is seen to happen before any request is made; the one test that
lets a request go bounds it with a short connect timeout. The headers an ``on_auth_required`` handler returns in
``Credentials`` are tried against ``AuthAgent``, a scripted agent behind an httpx mock transport (an AUTH_REQUIRED
task needs a remote agent that answers, and nothing may leave the machine).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from relaykit.client import APIKeyAuth, BearerAuth, Client, Credentials, ResumePolicy, RetryPolicy
from relaykit.client._card import grpc_available
from relaykit.client._plaintext import CredentialGuard
from relaykit.errors import A2AError, A2AInsecureCredentialsError
from relaykit.types import AgentCard, AgentInterface, SecurityScheme
from relaykit.types import APIKeySecurityScheme as APIKey

T = 10.0
REMOTE = "http://192.0.2.10:8000"
AGENT_KEY = APIKey(location="header", name="X-Agent-Key")  # a card's API-key scheme: this header is a credential


def _card(binding: str, url: str, **extra: object) -> AgentCard:
    interface = AgentInterface(protocol_binding=binding, url=url, protocol_version="1.0")
    return AgentCard(name="remote", description="d", version="1", supported_interfaces=[interface], **extra)


class Recorder:
    """An httpx client whose request hook keeps every request it was about to send."""

    def __init__(self) -> None:
        self.sent: list[httpx.Request] = []
        self.http = httpx.AsyncClient(event_hooks={"request": [self.record]}, timeout=httpx.Timeout(T, connect=0.5))

    async def record(self, request: httpx.Request) -> None:
        self.sent.append(request)


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_bearer_token_is_refused_over_plain_http_to_a_remote_host(binding: str) -> None:
    recorder = Recorder()
    client = Client(card=_card(binding, REMOTE + "/"), http=recorder.http, interceptors=[BearerAuth("s3cret")])
    async with asyncio.timeout(T), client:
        with pytest.raises(A2AInsecureCredentialsError) as refused:
            await client.get_task("t-1")
        with pytest.raises(A2AInsecureCredentialsError):
            async for _ in client.subscribe("t-1"):
                pass
    await recorder.http.aclose()
    assert recorder.sent == []
    assert "Authorization" in refused.value.message
    assert "s3cret" not in refused.value.message
    assert "allow_insecure_credentials" in refused.value.message


async def _first_call(client: Client) -> None:
    async with client:  # fixed headers are refused here
        await client.get_task("t-1")  # an interceptor's at its first call


@pytest.mark.parametrize(
    ("headers", "interceptors", "schemes"),
    [
        ({"X-API-Key": "k"}, [], {}),
        ({"Cookie": "session=k"}, [], {}),
        ({}, [APIKeyAuth("k", header="X-Secret")], {}),
        ({"X-Agent-Key": "k"}, [], {"key": SecurityScheme(api_key_security_scheme=AGENT_KEY)}),
    ],
    ids=["x-api-key", "cookie", "api-key-interceptor", "card-api-key-scheme"],
)
async def test_every_kind_of_credential_is_refused(
    headers: Mapping[str, str], interceptors: list[APIKeyAuth], schemes: dict[str, SecurityScheme]
) -> None:
    recorder = Recorder()
    card = _card("JSONRPC", "http://agent.example/a2a", security_schemes=schemes)
    client = Client(card=card, http=recorder.http, headers=headers, interceptors=interceptors)
    async with asyncio.timeout(T):
        with pytest.raises(A2AInsecureCredentialsError):
            await _first_call(client)
    await recorder.http.aclose()
    assert recorder.sent == []


async def test_userinfo_and_the_card_request_follow_the_same_rule() -> None:
    recorder = Recorder()
    async with asyncio.timeout(T):
        with pytest.raises(A2AInsecureCredentialsError, match="userinfo"):
            await Client(card=_card("JSONRPC", "http://user:s3cret@192.0.2.10/"), http=recorder.http).connect()
        with pytest.raises(A2AInsecureCredentialsError, match="Authorization"):
            await Client(REMOTE, http=recorder.http, headers={"Authorization": "Bearer s3cret"}).connect()
        with pytest.raises(A2AInsecureCredentialsError, match="userinfo") as refused:
            await Client("http://user:s3cret@192.0.2.10:8000", http=recorder.http).connect()
    await recorder.http.aclose()
    assert recorder.sent == []
    assert "s3cret" not in refused.value.message


@pytest.mark.skipif(not grpc_available(), reason="grpcio is an optional extra")
@pytest.mark.parametrize("url", ["192.0.2.10:50051", "grpc://agent.example:50051", "http://192.0.2.10:50051"])
async def test_plaintext_grpc_to_a_remote_host_refuses_credentials(url: str) -> None:
    client = Client(card=_card("GRPC", url), transports=["GRPC"], interceptors=[BearerAuth("s3cret")])
    async with asyncio.timeout(T), client:
        with pytest.raises(A2AInsecureCredentialsError):
            await client.send("hello")


async def test_loopback_tls_and_the_opt_in_are_not_refused() -> None:
    recorder = Recorder()
    bearer = [BearerAuth("s3cret")]
    once = RetryPolicy(attempts=1)
    async with asyncio.timeout(T):
        # Loopback and TLS: the request is made (and fails to connect: nothing listens there).
        for url in ("http://127.0.0.1:1/", "http://localhost:1/", "http://[::1]:1/", "https://192.0.2.10:8000/"):
            client = Client(card=_card("JSONRPC", url), http=recorder.http, interceptors=bearer, retry=once)
            async with client:
                with pytest.raises(A2AError) as failed:
                    await client.get_task("t-1")
                assert not isinstance(failed.value, A2AInsecureCredentialsError), url
        # The explicit opt-in: the token goes to the remote plaintext host.
        client = Client(
            card=_card("JSONRPC", REMOTE + "/"),
            http=recorder.http,
            interceptors=bearer,
            retry=once,
            allow_insecure_credentials=True,
        )
        async with client:
            with pytest.raises(A2AError) as failed:
                await client.get_task("t-1")
            assert not isinstance(failed.value, A2AInsecureCredentialsError)
    await recorder.http.aclose()
    assert [str(r.url.host) for r in recorder.sent] == ["127.0.0.1", "localhost", "::1", "192.0.2.10", "192.0.2.10"]
    assert all(r.headers["authorization"] == "Bearer s3cret" for r in recorder.sent)


# --- headers of the caller's own naming ------------------------------------------------------------------------

# Credentials in headers the caller names: the usual ones, and names holding a credential's words in any case.
CUSTOM = ["X-Auth-Token", "x-access-token", "X-ApiKey", "Api_Key", "X-Client-Secret", "X-Password", "Session-Id",
          "X-Credentials", "Cookie", "Proxy-Authorization"]  # fmt: skip
# Headers that carry no credential, relaykit's own among them: never refused.
BENIGN = ["X-Request-Id", "A2A-Version", "A2A-Extensions", "traceparent", "tracestate", "baggage", "Accept",
          "Content-Type", "Last-Event-ID", "User-Agent", "X-Correlation-Id"]  # fmt: skip


class Header:
    """An interceptor adding one header: checked per request, not at connect as fixed headers are."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def headers(self, operation: str) -> Mapping[str, str]:
        return {self.name: "s3cret"}


def test_which_header_names_count_as_credentials() -> None:
    guard = CredentialGuard(REMOTE, ["x-agent-key"])
    assert [name for name in [*CUSTOM, "X-AGENT-KEY"] if not guard.refuses(name)] == []
    assert [name for name in BENIGN if guard.refuses(name)] == []


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
@pytest.mark.parametrize("name", CUSTOM)
async def test_a_custom_credential_header_is_refused_over_http(binding: str, name: str) -> None:
    recorder = Recorder()
    async with asyncio.timeout(T):
        fixed = Client(card=_card(binding, REMOTE + "/"), http=recorder.http, headers={name: "s3cret"})
        with pytest.raises(A2AInsecureCredentialsError) as refused:
            await _first_call(fixed)
        added = Client(card=_card(binding, REMOTE + "/"), http=recorder.http, interceptors=[Header(name)])
        with pytest.raises(A2AInsecureCredentialsError):
            await _first_call(added)
    await recorder.http.aclose()
    assert recorder.sent == []
    assert name in refused.value.message
    assert "s3cret" not in refused.value.message


@pytest.mark.skipif(not grpc_available(), reason="grpcio is an optional extra")
@pytest.mark.parametrize("name", CUSTOM)
async def test_a_custom_credential_header_is_refused_as_grpc_metadata(name: str) -> None:
    async with asyncio.timeout(T):
        fixed = Client(card=_card("GRPC", "192.0.2.10:50051"), transports=["GRPC"], headers={name: "s3cret"})
        with pytest.raises(A2AInsecureCredentialsError):
            await _first_call(fixed)
        added = Client(card=_card("GRPC", "192.0.2.10:50051"), transports=["GRPC"], interceptors=[Header(name)])
        async with added:
            with pytest.raises(A2AInsecureCredentialsError):
                await added.send("hello")


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_benign_custom_header_goes_over_plain_http(binding: str) -> None:
    recorder = Recorder()
    once = RetryPolicy(attempts=1)
    headers = {"X-Request-Id": "r-1", "X-Correlation-Id": "c-1"}
    async with asyncio.timeout(T):
        async with Client(card=_card(binding, REMOTE + "/"), http=recorder.http, headers=headers, retry=once) as client:
            with pytest.raises(A2AError) as failed:  # nothing listens at TEST-NET: the request was made
                await client.get_task("t-1")
    await recorder.http.aclose()
    assert not isinstance(failed.value, A2AInsecureCredentialsError)
    assert [r.headers["x-request-id"] for r in recorder.sent] == ["r-1"]


@pytest.mark.skipif(not grpc_available(), reason="grpcio is an optional extra")
async def test_a_benign_custom_header_goes_as_plaintext_grpc_metadata() -> None:
    options: dict[str, Any] = {"transports": ["GRPC"], "timeout": 1.0, "retry": RetryPolicy(attempts=1)}
    async with asyncio.timeout(T):
        async with Client(card=_card("GRPC", "192.0.2.10:50051"), headers={"X-Request-Id": "r-1"}, **options) as client:
            with pytest.raises(A2AError) as failed:  # nothing answers at TEST-NET: the call was made, and failed
                await client.get_task("t-1")
    assert not isinstance(failed.value, A2AInsecureCredentialsError)


# --- headers an on_auth_required handler gives (in-task authorization) -----------------------------------------

# Credentials by definition, with names the word list does not catch.
GIVEN = ["X-Calendar-Key", "X-Jwt", "X-Signature"]


class AuthAgent:
    """A JSON-RPC agent at ``REMOTE`` (an httpx mock transport: nothing leaves the machine) whose task waits in
    AUTH_REQUIRED until a request carries the header ``needed``; ``requests`` keeps every request it received."""

    def __init__(self, needed: str) -> None:
        self.needed = needed.lower()
        self.requests: list[httpx.Request] = []
        self.http = httpx.AsyncClient(transport=httpx.MockTransport(self.answer))

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        call = json.loads(request.content)
        signed_in = self.needed in request.headers
        state = "TASK_STATE_COMPLETED" if signed_in else "TASK_STATE_AUTH_REQUIRED"
        status: dict[str, Any] = {"state": state}
        if not signed_in:
            status["message"] = {"messageId": "m-auth", "role": "ROLE_AGENT", "parts": [{"text": "sign in"}]}
        task: dict[str, Any] = {"id": "t-1", "contextId": "c-1", "status": status}
        if signed_in:
            task["artifacts"] = [{"artifactId": "a", "parts": [{"text": "3 meetings"}]}]
        result = {"task": task} if call["method"] == "SendMessage" else task
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": call["id"], "result": result})

    def carried(self) -> list[bool]:
        """Whether each request carried the credential header."""
        return [self.needed in request.headers for request in self.requests]


@pytest.mark.parametrize("message", ["signed in", None], ids=["follow-up", "out-of-band"])
@pytest.mark.parametrize("name", GIVEN)
async def test_headers_given_in_credentials_are_refused_over_plain_http(name: str, message: str | None) -> None:
    """Every header of ``Credentials`` is a credential, whatever its name: the follow-up (or the wait) that would
    carry it in clear to a remote host is refused before it is sent, and the client's headers stay as they were."""
    agent = AuthAgent(name)
    client = Client(
        card=_card("JSONRPC", REMOTE + "/"),
        http=agent.http,
        on_auth_required=lambda task: Credentials({name: "s3cret"}, message=message),
    )
    async with asyncio.timeout(T), client:
        with pytest.raises(A2AInsecureCredentialsError) as refused:
            await client.ask("what is on my calendar?")
        assert name not in client.headers
        with pytest.raises(A2AInsecureCredentialsError):  # and stays refused
            await client.ask("what is on my calendar?")
    await agent.http.aclose()
    assert agent.carried() == [False, False]  # each ask's first message (no credential in it), nothing after
    assert name in refused.value.message
    assert "s3cret" not in refused.value.message


@pytest.mark.parametrize("message", ["signed in", None], ids=["follow-up", "out-of-band"])
async def test_headers_given_in_credentials_go_with_the_opt_in(message: str | None) -> None:
    agent = AuthAgent("X-Calendar-Key")
    client = Client(
        card=_card("JSONRPC", REMOTE + "/"),
        http=agent.http,
        resume=ResumePolicy(attempts=1, backoff=0.001, max_backoff=0.001),
        on_auth_required=lambda task: Credentials({"X-Calendar-Key": "s3cret"}, message=message),
        allow_insecure_credentials=True,
    )
    async with asyncio.timeout(T), client:
        assert await client.ask("what is on my calendar?") == "3 meetings"
    await agent.http.aclose()
    assert agent.carried() == [False, True]
    assert agent.requests[1].headers["x-calendar-key"] == "s3cret"
