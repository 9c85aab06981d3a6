"""``relaykit serve`` with the security options (CONTRACT, second round), as a process on real sockets:
``--api-keys`` (plain and ``sha256:`` entries), ``--auth-jwks``/``--auth-issuer``/``--auth-audience``,
``--extended-card``, ``--card-key``/``--card-kid``, on JSON-RPC, HTTP+JSON and gRPC."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from auth.conftest import AUDIENCE, BINDINGS, IdentityProvider, T, pem, public_pem
from cryptography.hazmat.primitives.asymmetric import ec
from support.servers import ServerProcess, start_serve, stop_process

from relaykit import Task
from relaykit.client import APIKeyAuth, BearerAuth, Client, card_keys, parse_card, verify_card
from relaykit.errors import A2AInvalidCardError, AuthenticationRequiredError

AGENT = "tests/auth/whoami_agent.py:whoami"


@pytest.fixture(scope="module")
def card_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, card_key: ec.EllipticCurvePrivateKey) -> Iterator[ServerProcess]:
    files = tmp_path_factory.mktemp("keyed")
    keys = files / "api-keys"
    keys.write_text(
        "# who may call\n"
        "alice alice-key\n"
        f"bob sha256:{hashlib.sha256(b'bob-key').hexdigest()}  # hashed: the file holds no secret\n"
    )
    extended = files / "extended.json"
    extended.write_text(json.dumps({"name": "whoami (extended)", "description": "more", "version": "1.0.0"}))
    key_file = files / "card-key.pem"
    key_file.write_bytes(pem(card_key))
    args = ["--api-keys", str(keys), "--extended-card", str(extended), "--card-key", str(key_file)]
    server = start_serve(AGENT, files, args=[*args, "--card-kid", "card-2026"], grpc=True, name="keyed")
    try:
        yield server
    finally:
        stop_process(server.proc)


async def _client(server: ServerProcess, binding: str, *interceptors: object) -> Client:
    client = Client(server.url, transports=[binding], interceptors=list(interceptors), timeout=T)  # type: ignore[arg-type]
    await client.connect()
    return client


@pytest.mark.parametrize("binding", BINDINGS)
async def test_api_keys_from_a_file(
    keyed: ServerProcess, binding: str, card_key: ec.EllipticCurvePrivateKey
) -> None:
    async with asyncio.timeout(T):
        for key, owner in (("alice-key", "alice"), ("bob-key", "bob")):
            client = await _client(keyed, binding, APIKeyAuth(key))
            try:
                task = await client.send("hi")
                assert isinstance(task, Task)
                assert task.artifacts[0].parts[0].text == f"api-key:{owner}|hi"
                extended = await client.extended_card()
                assert extended.name == "whoami (extended)"
                verify_card(extended, public_pem(card_key), algorithms=["ES256"])  # signed like the public card
            finally:
                await client.aclose()
        for interceptors in ((), (APIKeyAuth("sha256:" + hashlib.sha256(b"bob-key").hexdigest()),), (APIKeyAuth("x"),)):
            client = await _client(keyed, binding, *interceptors)
            try:
                with pytest.raises(AuthenticationRequiredError):
                    await client.send("hi")
                with pytest.raises(AuthenticationRequiredError):
                    await client.extended_card()
            finally:
                await client.aclose()


def test_the_served_card_is_signed_and_names_the_scheme(
    keyed: ServerProcess, card_key: ec.EllipticCurvePrivateKey
) -> None:
    card_json = httpx.get(keyed.url + "/.well-known/agent-card.json", timeout=T).content
    card = parse_card(card_json)
    assert card.to_dict()["securitySchemes"] == {
        "apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}
    }
    verify_card(card, public_pem(card_key), algorithms=["ES256"])
    header = json.loads(_b64url(card.signatures[0].protected))
    assert header["kid"] == "card-2026"
    assert header["jku"] == keyed.url + "/.well-known/jwks.json"
    jwks = httpx.get(header["jku"], timeout=T).json()
    assert "card-2026" in [k["kid"] for k in jwks["keys"]]


def test_openapi_describes_the_enforced_security(keyed: ServerProcess) -> None:
    from openapi_spec_validator import validate

    # The description is public, as the card is: it tells a caller how to authenticate.
    doc = httpx.get(keyed.url + "/openapi.json", timeout=T).json()
    validate(doc)
    assert doc["components"]["securitySchemes"] == {"apiKey": {"type": "apiKey", "name": "X-API-Key", "in": "header"}}
    assert doc["security"] == [{"apiKey": []}]
    assert doc["paths"]["/.well-known/agent-card.json"]["get"]["security"] == []
    assert "WWW-Authenticate" in doc["paths"]["/message:send"]["post"]["responses"]["401"]["headers"]
    # What the description says is what the server does: the declared key works, none is refused.
    send = {"message": {"messageId": "m-openapi", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    for headers, status in (({}, 401), ({"X-API-Key": "alice-key"}, 200)):
        answer = httpx.post(
            keyed.url + "/message:send", json=send, headers={"A2A-Version": "1.0", **headers}, timeout=T
        )
        assert answer.status_code == status


def _b64url(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.mark.interop
def test_the_served_card_verifies_in_a2a_sdk(keyed: ServerProcess, card_key: ec.EllipticCurvePrivateKey) -> None:
    from a2a.types import AgentCard as SDKAgentCard
    from a2a.utils.signing import create_signature_verifier
    from google.protobuf.json_format import Parse

    body = httpx.get(keyed.url + "/.well-known/agent-card.json", timeout=T).text
    sdk_card = Parse(body, SDKAgentCard(), ignore_unknown_fields=True)
    create_signature_verifier(lambda kid, jku: public_pem(card_key), ["ES256"])(sdk_card)


async def test_auth_jwks_from_the_command_line(tmp_path: Path) -> None:
    idp = IdentityProvider()
    args = ["--auth-jwks", idp.jwks_url, "--auth-issuer", idp.issuer, "--auth-audience", AUDIENCE]
    server = start_serve(AGENT, tmp_path, args=args, grpc=True, name="jwks")
    try:
        async with asyncio.timeout(T):
            for binding in BINDINGS:
                good = await _client(server, binding, BearerAuth(idp.token("dana")))
                bad = await _client(server, binding, BearerAuth(idp.token("dana", aud="elsewhere")))
                try:
                    task = await good.send("hi")
                    assert isinstance(task, Task)
                    assert task.artifacts[0].parts[0].text == f"jwt:{idp.issuer}#dana|hi"
                    with pytest.raises(AuthenticationRequiredError):
                        await bad.send("hi")
                finally:
                    await good.aclose()
                    await bad.aclose()
    finally:
        stop_process(server.proc)
        idp.close()


def test_a_card_that_declares_an_unverified_scheme_refuses_to_start() -> None:
    from relaykit.http import create_app
    from relaykit.types import AgentCard, SecurityRequirement, SecurityScheme, StringList

    card = AgentCard(
        name="liar",
        description="declares a scheme nobody checks",
        version="1.0.0",
        security_schemes={"oauth": SecurityScheme.bearer("JWT")},
        security_requirements=[SecurityRequirement(schemes={"oauth": StringList()})],
    )
    from auth.whoami_agent import whoami

    with pytest.raises(ValueError, match="oauth"):
        create_app(whoami, card=card)


async def test_keys_fetched_from_a_trusted_jku(keyed: ServerProcess) -> None:
    async with httpx.AsyncClient(timeout=T) as http:
        card = parse_card((await http.get(keyed.url + "/.well-known/agent-card.json")).content)
        keys = await card_keys(card, [keyed.url + "/"], http=http)
        assert list(keys) == ["card-2026"]
        verify_card(card, keys, algorithms=["ES256"])
        # A jku outside what the caller trusts is never fetched: no key, no verification.
        assert await card_keys(card, ["https://agent.example/"], http=http) == {}
    with pytest.raises(A2AInvalidCardError, match="no key"):
        verify_card(card, {}, algorithms=["ES256"])
