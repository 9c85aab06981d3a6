"""Credentials in a URL (userinfo, query values) never reach an error message, a repr or httpx's log line, while the
request still carries them as it did (the userinfo as Basic auth).

Every URL here is a real address on 127.0.0.1: a closed port (connection refused), or a ``MiniHTTP`` that answers
502 and records what it received.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
from collections.abc import AsyncIterator

import pytest

from client._net import MiniHTTP, Request, Response
from relaykit.client import Client, ResumePolicy, RetryPolicy, choose_interface
from relaykit.client._card import grpc_available
from relaykit.errors import A2AError, A2AInvalidCardError
from relaykit.types import AgentCard, AgentInterface

T = 10.0
SECRET = "s3cr3t-pw"
KEY = "k3y-value"
ONCE = RetryPolicy(attempts=1)
NO_RESUME = ResumePolicy(attempts=1, backoff=0.0)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _card(binding: str, url: str) -> AgentCard:
    interface = AgentInterface(protocol_binding=binding, url=url, protocol_version="1.0")
    return AgentCard(name="creds", description="d", version="1", supported_interfaces=[interface])


def _clean(text: str) -> None:
    assert SECRET not in text, text
    assert KEY not in text, text


@pytest.fixture
async def gateway() -> AsyncIterator[MiniHTTP]:
    """Answers every request with a proxy's 502 page."""

    async def handle(request: Request) -> Response:
        return Response(502, [("content-type", "text/html")], b"<html>bad gateway</html>")

    server = await MiniHTTP(handle).start()
    try:
        yield server
    finally:
        await server.aclose()


async def test_the_card_url_is_redacted_in_errors() -> None:
    url = f"http://user:{SECRET}@127.0.0.1:{_closed_port()}/?api_key={KEY}"
    async with asyncio.timeout(T):
        with pytest.raises(A2AError) as failed:
            async with Client(url):
                pass
    _clean(failed.value.message)
    assert "***@127.0.0.1" in failed.value.message
    _clean(repr(Client(url)))


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_interface_urls_are_redacted_and_the_userinfo_still_sent(
    gateway: MiniHTTP, binding: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A query on the interface URL (a gateway's key) is sent with every call; REST's routes go before it.
    query = f"?api_key={KEY}"
    closed = f"http://user:{SECRET}@127.0.0.1:{_closed_port()}/a2a{query}"
    reached = f"http://user:{SECRET}@127.0.0.1:{gateway.port}/a2a{query}"
    caplog.set_level(logging.INFO, logger="httpx")
    async with asyncio.timeout(T):
        for url in (closed, reached):
            async with Client(card=_card(binding, url), retry=ONCE, resume=NO_RESUME) as client:
                _clean(repr(client.transport))
                with pytest.raises(A2AError) as failed:
                    await client.get_task("t-1")
                _clean(failed.value.message)
                with pytest.raises(A2AError) as failed:
                    async for _ in client.subscribe("t-1"):
                        pass
                _clean(failed.value.message)
    # httpx logs each request line; the query is part of it (as in any access log), the userinfo is not.
    assert SECRET not in caplog.text
    assert "HTTP Request" in caplog.text
    assert "answered HTTP 502" in failed.value.message
    # The wire is what the URL asked for: its userinfo as Basic auth, its query as sent.
    assert gateway.requests, "the gateway saw no request"
    for request in gateway.requests:
        expected = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
        assert request.headers["authorization"] == expected
        assert request.target.endswith(query)
        if binding == "HTTP+JSON":
            assert request.target.startswith("/a2a/tasks/t-1"), request.target


def test_a_card_listing_is_redacted() -> None:
    card = _card("JSONRPC", f"http://user:{SECRET}@127.0.0.1:1/?api_key={KEY}")
    with pytest.raises(A2AInvalidCardError) as refused:
        choose_interface(card, ["GRPC-ONLY"])
    _clean(refused.value.message)


@pytest.mark.skipif(not grpc_available(), reason="grpcio is an optional extra")
async def test_a_grpc_target_with_userinfo_is_redacted() -> None:
    """grpc quotes the target it cannot resolve ("errors resolving user:pw@host:port")."""
    target = f"grpc://user:{SECRET}@127.0.0.1:{_closed_port()}"
    async with asyncio.timeout(T):
        async with Client(card=_card("GRPC", target), transports=["GRPC"], retry=ONCE, timeout=5.0) as client:
            _clean(repr(client.transport))
            with pytest.raises(A2AError) as failed:
                await client.get_task("t-1")
    _clean(failed.value.message)
