"""``OAuth2ClientCredentials``: the client secret only over TLS or to loopback, and every failure to get a token a
clear ``AuthenticationRequiredError`` that names the endpoint without its secrets (a real token endpoint on
127.0.0.1)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from client._net import MiniHTTP, Request, Response
from relaykit.client import OAuth2ClientCredentials
from relaykit.errors import A2AInsecureCredentialsError, AuthenticationRequiredError

T = 10.0
SECRET = "pw-not-in-messages"
KEY = "query-key-not-in-messages"


async def _fails(answer: Callable[[Request], Awaitable[Response]]) -> str:
    """The message of the error a token fetch from an endpoint answering ``answer`` raises (URL with secrets)."""
    endpoint = await MiniHTTP(answer).start()
    host = endpoint.url.split("://", 1)[1]
    try:
        auth = OAuth2ClientCredentials(f"http://user:{SECRET}@{host}/token?key={KEY}", "client-id", "client-secret")
        async with asyncio.timeout(T):
            with pytest.raises(AuthenticationRequiredError) as failed:
                await auth.token()
    finally:
        await endpoint.aclose()
    message = failed.value.message
    for secret in (SECRET, KEY, "client-secret"):
        assert secret not in message, message
    assert "token endpoint http://***@127.0.0.1" in message, message
    return message


async def test_a_refusal_names_the_endpoint_masked() -> None:
    async def refuse(request: Request) -> Response:
        return Response(401, [("content-type", "application/json")], b'{"error":"invalid_client"}')

    assert "HTTP 401" in await _fails(refuse)


@pytest.mark.parametrize(
    "body",
    [b"<html>not json</html>", b'{"token_type":"Bearer"}', b'["access_token"]', b'{"access_token":42}'],
)
async def test_an_answer_without_a_token_is_an_authentication_error(body: bytes) -> None:
    async def answer(request: Request) -> Response:
        return Response(200, [("content-type", "application/json")], body)

    assert "no usable access token" in await _fails(answer)


async def test_an_endless_answer_is_cut_short() -> None:
    async def flood(request: Request) -> Response:
        return Response(200, [("content-type", "application/json")], b'{"access_token":"' + b"a" * 1_000_000 + b'"}')

    assert "more than" in await _fails(flood)


async def test_an_unreachable_endpoint_is_an_authentication_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    auth = OAuth2ClientCredentials(f"http://127.0.0.1:{port}/token", "client-id", "client-secret")
    async with asyncio.timeout(T):
        with pytest.raises(AuthenticationRequiredError, match="unreachable"):
            await auth.token()


def test_the_secret_never_goes_in_clear_to_another_host() -> None:
    with pytest.raises(A2AInsecureCredentialsError) as refused:
        OAuth2ClientCredentials(f"http://user:{SECRET}@idp.example/token", "client-id", "client-secret")
    assert SECRET not in refused.value.message
    # TLS, loopback, or the explicit opt-in.
    OAuth2ClientCredentials("https://idp.example/token", "client-id", "client-secret")
    OAuth2ClientCredentials("http://localhost:8080/token", "client-id", "client-secret")
    OAuth2ClientCredentials("http://idp.example/token", "client-id", "client-secret", allow_insecure=True)
