"""``Client(card_verifier=…)`` and ``CardSignatureVerifier``: a fetched card is checked before the client uses it,
its signature verified on the JSON exactly as received (members the model does not know included), with keys the
caller gives, a JWKS URL the caller names, or a ``jku`` under a URL the caller trusts.

The agent is a ``MiniHTTP`` on 127.0.0.1 serving a card (and a JWKS); the card's interface points at the same
server, which records every request, so a test can tell that a refused card led to no call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from client._net import MiniHTTP, Request, Response
from relaykit._jws import sign_served_json
from relaykit.client import CardResolver, CardSignatureVerifier, Client, parse_card, verify_card
from relaykit.errors import A2AInvalidCardError
from relaykit.types import AgentCard

T = 10.0
CARD_PATH = "/.well-known/agent-card.json"


def _private() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _jwks(private: ec.EllipticCurvePrivateKey, kid: str) -> bytes:
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
    return json.dumps({"keys": [{**jwk, "kid": kid}]}).encode()


class Agent:
    """Serves ``card`` (a JSON object, served as is) at the card path and ``jwks`` at ``/keys/jwks.json``."""

    def __init__(self) -> None:
        self.card: dict[str, Any] = {}
        self.jwks = b'{"keys": []}'
        self.server = MiniHTTP(self.handle)

    @property
    def url(self) -> str:
        return self.server.url

    def card_json(self) -> dict[str, Any]:
        """A 1.0 card naming this server, with a member relaykit does not model (a newer spec's, a vendor's)."""
        return {
            "name": "signed-agent",
            "description": "a card with a member the client does not model",
            "version": "1.0.0",
            "supportedInterfaces": [{"url": self.url + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "echo", "description": "echoes", "tags": ["echo"]}],
            "x-vendor-routing": {"region": "eu-west", "weight": 3},
        }

    async def handle(self, request: Request) -> Response:
        if request.path == CARD_PATH:
            return Response(200, [("content-type", "application/json")], json.dumps(self.card).encode())
        if request.path == "/keys/jwks.json":
            return Response(200, [("content-type", "application/json")], self.jwks)
        return Response(404, [("content-type", "text/plain")], b"nothing here")

    def calls(self) -> list[str]:
        """Paths of the requests other than the card's and the keys'."""
        return [r.path for r in self.server.requests if r.path not in (CARD_PATH, "/keys/jwks.json")]


async def _connect(client: Client) -> None:
    async with client:  # closes what it opened when connecting fails
        pass


@pytest.fixture
async def agent() -> AsyncIterator[Agent]:
    served = Agent()
    await served.server.start()
    try:
        yield served
    finally:
        await served.server.aclose()


async def test_a_card_signed_over_what_was_sent_verifies_with_its_unknown_members(agent: Agent) -> None:
    private = _private()
    agent.card = sign_served_json(agent.card_json(), private, kid="k1")
    # The parsed card drops the member it does not model: a check on a re-encoding of it cannot verify.
    with pytest.raises(A2AInvalidCardError, match="no signature verifies"):
        verify_card(parse_card(json.dumps(agent.card)), private.public_key(), algorithms=["ES256"])
    verifier = CardSignatureVerifier(private.public_key(), algorithms=["ES256"])
    async with asyncio.timeout(T), Client(agent.url, card_verifier=verifier) as client:
        assert client.card is not None
        assert client.card.name == "signed-agent"


@pytest.mark.parametrize("change", ["unknown member", "modelled member"])
async def test_a_card_changed_after_signing_is_refused_before_any_call(agent: Agent, change: str) -> None:
    private = _private()
    signed = sign_served_json(agent.card_json(), private, kid="k1")
    if change == "unknown member":
        signed["x-vendor-routing"] = {"region": "attacker", "weight": 3}
    else:
        signed["supportedInterfaces"][0]["url"] = agent.url + "/elsewhere/"
    agent.card = signed
    client = Client(agent.url, card_verifier=CardSignatureVerifier(private.public_key(), algorithms=["ES256"]))
    async with asyncio.timeout(T):
        with pytest.raises(A2AInvalidCardError, match="no signature verifies"):
            await _connect(client)
        with pytest.raises(RuntimeError, match="not connected"):
            await client.get_task("t-1")
    assert agent.calls() == []


async def test_keys_from_a_jwks_url_or_a_trusted_jku(agent: Agent) -> None:
    private, other = _private(), _private()
    agent.jwks = _jwks(private, "k1")
    jwks_url = agent.url + "/keys/jwks.json"
    agent.card = sign_served_json(agent.card_json(), private, kid="k1", jku=jwks_url)
    async with asyncio.timeout(T):
        for verifier in (
            CardSignatureVerifier(jwks_url=jwks_url, algorithms=["ES256"]),
            CardSignatureVerifier(trusted_jku=[agent.url + "/keys/"], algorithms=["ES256"]),
            CardSignatureVerifier(json.loads(agent.jwks), algorithms=["ES256"]),  # a JWKS document given as is
        ):
            async with Client(agent.url, card_verifier=verifier) as client:
                assert client.card is not None
        # The card's own jku is fetched only under a trusted URL: elsewhere it vouches for nothing.
        untrusted = CardSignatureVerifier(trusted_jku=[agent.url + "/other/"], algorithms=["ES256"])
        with pytest.raises(A2AInvalidCardError, match="no key"):
            await _connect(Client(agent.url, card_verifier=untrusted))
        agent.jwks = _jwks(other, "k1")  # the JWKS now holds another key under the same kid
        with pytest.raises(A2AInvalidCardError, match="no signature verifies"):
            await _connect(Client(agent.url, card_verifier=CardSignatureVerifier(jwks_url=jwks_url)))
    assert agent.calls() == []


async def test_any_callable_verifier_sees_the_card_and_the_json_as_received(agent: Agent) -> None:
    agent.card = agent.card_json()
    seen: list[tuple[AgentCard, dict[str, Any]]] = []

    async def record(card: AgentCard, received: dict[str, Any]) -> None:
        seen.append((card, received))

    refusals: list[Callable[[AgentCard, dict[str, Any]], Any]] = [
        lambda card, received: received.get("x-vendor-routing", {}).get("region") == "us-east",  # False: refused
        lambda card, received: int("not a number"),  # any exception: refused
    ]
    async with asyncio.timeout(T):
        async with Client(agent.url, card_verifier=record) as client:
            assert client.card is not None
        assert seen[0][1] == agent.card  # the JSON object as sent, the member the model drops included
        assert seen[0][0].name == "signed-agent"
        for refusal in refusals:
            with pytest.raises(A2AInvalidCardError, match="refused by the card verifier"):
                await _connect(Client(agent.url, card_verifier=refusal))
        async with httpx.AsyncClient(timeout=T) as http:
            resolver = CardResolver(http)
            await resolver.get(agent.url)
            assert resolver.received(agent.url) == agent.card
    assert agent.calls() == []
