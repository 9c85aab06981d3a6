"""Bearer JWT authentication on JSON-RPC, HTTP+JSON and gRPC alike, against a JWKS served by the test.

Every token a client could forge or misuse (none, expired, not yet valid, wrong audience, wrong issuer, unknown key,
``alg: none``, HS256 "signed" with the public key, no subject, garbage) is refused with 401 / UNAUTHENTICATED on
every binding; a good one (RSA or EC key) is accepted and names the principal ``jwt:<iss>#<sub>``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import grpc
import httpx
import pytest
from auth.conftest import AUDIENCE, BINDINGS, IdentityProvider, Served, T, public_pem
from auth.whoami_agent import whoami
from cryptography.hazmat.primitives.asymmetric import rsa

from relaykit import Task
from relaykit.auth import APIKeyAuthenticator, Auth, JWTAuthenticator
from relaykit.client import BearerAuth, parse_card
from relaykit.errors import AuthenticationRequiredError


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(idp: IdentityProvider) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": idp.issuer, "aud": AUDIENCE, "sub": "mallory", "iat": now, "exp": now + 300}


def _alg_none(idp: IdentityProvider) -> str:
    head = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
    return f"{head}.{_b64(json.dumps(_claims(idp)).encode())}."


def _hs256_with_public_key(idp: IdentityProvider) -> str:
    # The classic algorithm-confusion forgery: HMAC with the RSA public key (which anyone can fetch) as the secret.
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    body = _b64(json.dumps(_claims(idp)).encode())
    mac = hmac.new(public_pem(idp.rsa), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


FORGED: dict[str, Callable[[IdentityProvider], str | None]] = {
    "no credential": lambda idp: None,
    "expired": lambda idp: idp.token(lifetime=-120),
    "not yet valid": lambda idp: idp.token(nbf=int(time.time()) + 600),
    "wrong audience": lambda idp: idp.token(aud="another-agent"),
    "wrong issuer": lambda idp: idp.token(iss="https://evil.example"),
    "no audience": lambda idp: idp.token(aud=None),
    "no expiry": lambda idp: idp.token(exp=None),
    "no subject": lambda idp: idp.token(sub=None),
    "unknown key": lambda idp: idp.token(
        kid="rogue", key=rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ),
    "known kid, other key": lambda idp: idp.token(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    "alg none": _alg_none,
    "HS256 with the public key": _hs256_with_public_key,
    "RS256 header on an EC key": lambda idp: idp.token(kid="ec-1", key=idp.rsa),
    "garbage": lambda idp: "not.a.jwt",
}


@pytest.fixture
async def served(agent: Callable[..., Any], idp: IdentityProvider) -> Served:
    auth = Auth(JWTAuthenticator(idp.jwks_url, issuer=idp.issuer, audience=AUDIENCE, min_refresh=0))
    return await agent(whoami, auth=auth)  # type: ignore[no-any-return]


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("case", list(FORGED))
async def test_bad_tokens_are_refused(served: Served, idp: IdentityProvider, binding: str, case: str) -> None:
    token = FORGED[case](idp)
    interceptors = [BearerAuth(token)] if token is not None else []
    async with asyncio.timeout(T):
        client = await served.client(binding, *interceptors)
        with pytest.raises(AuthenticationRequiredError):
            await client.send("hello")
        with pytest.raises(AuthenticationRequiredError):
            [e async for e in client.stream("hello")]
        with pytest.raises(AuthenticationRequiredError):
            await client.get_task("any-task")


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("kid", ["rsa-1", "ec-1"])
async def test_good_tokens_are_accepted(served: Served, idp: IdentityProvider, binding: str, kid: str) -> None:
    async with asyncio.timeout(T):
        client = await served.client(binding, BearerAuth(idp.token("alice", kid=kid)))
        task = await client.send("hello")
        assert isinstance(task, Task)
        assert task.artifacts[0].parts[0].text == f"jwt:{idp.issuer}#alice|hello"
        events = [e async for e in client.stream("streamed")]
        assert events


async def test_http_401_carries_challenge_and_error_bodies(served: Served, idp: IdentityProvider) -> None:
    send = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    async with httpx.AsyncClient(base_url=served.url, timeout=T) as http:
        rpc = await http.post(
            "/",
            json={"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": send},
            headers={"A2A-Version": "1.0"},
        )
        assert rpc.status_code == 401
        assert rpc.headers["www-authenticate"] == 'Bearer realm="a2a"'
        body = rpc.json()
        assert body["id"] == 7
        assert body["error"]["data"][0]["reason"] == "UNAUTHENTICATED"
        assert body["error"]["data"][0]["domain"] == "a2a-protocol.org"

        # Refused before the body is decoded: whatever an unauthenticated caller sends, the answer is 401.
        for content, headers in (
            (b"{not json", {"Content-Type": "application/json"}),
            (b'[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]', {"Content-Type": "application/json"}),
            (b'{"jsonrpc":"1.0","id":8,"method":"GetTask"}', {"Content-Type": "application/json"}),
            (b"hello", {"Content-Type": "text/plain"}),
            (b'{"jsonrpc":"2.0","id":9,"method":"x","params":{"t":"' + b"y" * 2_000_000 + b'"}}', {}),
        ):
            refused = await http.post("/", content=content, headers={**headers, "A2A-Version": "1.0"})
            assert refused.status_code == 401, content[:40]
            assert refused.headers["www-authenticate"] == 'Bearer realm="a2a"'
            assert refused.json()["error"]["data"][0]["reason"] == "UNAUTHENTICATED"
            # The id comes back from a small body (JSON-RPC 2.0 §5); a large one is not decoded to find it.
            assert refused.json()["id"] == (8 if b'"id":8' in content else None)

        rest = await http.post(
            "/message:send", json=send, headers={"A2A-Version": "1.0", "Authorization": "Bearer not.a.jwt"}
        )
        assert rest.status_code == 401
        assert rest.headers["www-authenticate"] == 'Bearer realm="a2a"'
        error = rest.json()["error"]
        assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
        assert error["details"][0]["reason"] == "UNAUTHENTICATED"

        status = await http.get("/relaykit/push/status/some-task", headers={"A2A-Version": "1.0"})
        assert status.status_code == 401

        # What stays public: the card, health and readiness.
        for path in ("/.well-known/agent-card.json", "/healthz", "/readyz"):
            assert (await http.get(path)).status_code == 200, path


async def _refusal(channel: grpc.aio.Channel, method: str, streaming: bool, metadata: Any) -> grpc.aio.AioRpcError:
    try:
        if streaming:
            [m async for m in channel.unary_stream(method)(b"", metadata=metadata)]
        else:
            await channel.unary_unary(method)(b"", metadata=metadata)
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError(f"{method} was served without a credential")


async def test_grpc_unauthenticated_carries_the_http_challenges(
    agent: Callable[..., Any], idp: IdentityProvider
) -> None:
    # Two schemes, so two challenges: gRPC's www-authenticate trailers are exactly HTTP's WWW-Authenticate headers.
    jwt_auth = JWTAuthenticator(idp.jwks_url, issuer=idp.issuer, audience=AUDIENCE, min_refresh=0)
    served = await agent(whoami, auth=Auth(jwt_auth, APIKeyAuthenticator({"ci-bot": "ci-key"})))
    async with httpx.AsyncClient(base_url=served.url, timeout=T) as http:
        refused = await http.get("/tasks/any-task", headers={"A2A-Version": "1.0"})
    assert refused.status_code == 401
    expected = refused.headers.get_list("www-authenticate")
    assert len(expected) == 2
    assert expected[0] == 'Bearer realm="a2a"'
    calls = [  # (method, streaming, metadata): unary and streaming, 1.0 and 0.3, no credential and a bad one
        ("/lf.a2a.v1.A2AService/GetTask", False, (("a2a-version", "1.0"),)),
        ("/lf.a2a.v1.A2AService/SendStreamingMessage", True, (("a2a-version", "1.0"),)),
        ("/lf.a2a.v1.A2AService/GetTask", False, (("a2a-version", "1.0"), ("authorization", "Bearer not.a.jwt"))),
        ("/a2a.v1.A2AService/GetTask", False, ()),
    ]
    async with grpc.aio.insecure_channel(served.grpc) as channel, asyncio.timeout(T):
        for method, streaming, metadata in calls:
            refused_call = await _refusal(channel, method, streaming, metadata)
            assert refused_call.code() == grpc.StatusCode.UNAUTHENTICATED, method
            trailers = [v for k, v in refused_call.trailing_metadata() or () if k == "www-authenticate"]
            assert trailers == expected, (method, metadata)


async def test_the_card_describes_what_is_enforced(served: Served) -> None:
    async with httpx.AsyncClient(timeout=T) as http:
        card = parse_card((await http.get(served.url + "/.well-known/agent-card.json")).content)
    # The 1.0 members (the served card also carries their 0.3 equivalents, for 0.3 clients).
    assert card.to_dict()["securitySchemes"] == {
        "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}
    }
    assert card.to_dict()["securityRequirements"] == [{"schemes": {"bearer": {}}}]


async def test_rotated_keys_are_fetched_and_forged_kids_are_rate_limited(
    agent: Callable[..., Any], idp: IdentityProvider
) -> None:
    rotating = JWTAuthenticator(idp.jwks_url, issuer=idp.issuer, audience=AUDIENCE, min_refresh=0)
    served = await agent(whoami, auth=Auth(rotating))
    new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    idp.keys["rsa-2"] = new_key
    async with asyncio.timeout(T):
        client = await served.client("JSONRPC", BearerAuth(idp.token("alice", kid="rsa-2")))
        assert isinstance(await client.send("after rotation"), Task)
    # A server that refetches at most every 60 s: a burst of tokens naming unknown kids costs no fetch at all.
    guarded = JWTAuthenticator(idp.jwks_url, issuer=idp.issuer, audience=AUDIENCE, min_refresh=60)
    other = await agent(whoami, auth=Auth(guarded))
    before = idp.jwks_fetches
    async with asyncio.timeout(T):
        for n in range(5):
            client = await other.client("JSONRPC", BearerAuth(idp.token("alice", kid=f"forged-{n}", key=new_key)))
            with pytest.raises(AuthenticationRequiredError):
                await client.send("forged")
    assert idp.jwks_fetches == before
    # A key server that is down does not lift the limit: one failed attempt, then none for min_refresh seconds.
    idp.down = True
    before = idp.jwks_fetches
    guarded._attempted = float("-inf")  # as if the last attempt were long ago
    async with asyncio.timeout(T):
        for n in range(5):
            client = await other.client("JSONRPC", BearerAuth(idp.token("alice", kid=f"forged-{n}", key=new_key)))
            with pytest.raises(AuthenticationRequiredError):
                await client.send("forged")
    assert idp.jwks_fetches == before + 1


async def test_oidc_discovery_must_name_its_own_issuer(idp: IdentityProvider) -> None:
    # OpenID Connect Discovery §4.3: a document naming another issuer is refused, not trusted as that issuer.
    idp.discovered_issuer = "https://idp.elsewhere.example"
    authenticator = JWTAuthenticator(oidc_url=idp.url, audience=AUDIENCE)
    with pytest.raises(ValueError, match="identical"):
        await asyncio.wait_for(authenticator.start(), T)
    await authenticator.close()
    idp.discovered_issuer = idp.url + "/"  # a trailing slash is the same issuer
    same = JWTAuthenticator(oidc_url=idp.url + "/.well-known/openid-configuration", audience=AUDIENCE)
    await asyncio.wait_for(same.start(), T)
    await same.close()


async def test_oidc_discovery_finds_keys_and_issuer(agent: Callable[..., Any], idp: IdentityProvider) -> None:
    served = await agent(whoami, auth=Auth(JWTAuthenticator(oidc_url=idp.url, audience=AUDIENCE)))
    async with asyncio.timeout(T):
        good = await served.client("HTTP+JSON", BearerAuth(idp.token("carol")))
        task = await good.send("via oidc")
        assert isinstance(task, Task)
        assert task.artifacts[0].parts[0].text.startswith(f"jwt:{idp.issuer}#carol|")
        bad = await served.client("HTTP+JSON", BearerAuth(idp.token("carol", iss="https://elsewhere.example")))
        with pytest.raises(AuthenticationRequiredError):
            await bad.send("wrong issuer")
    async with httpx.AsyncClient(timeout=T) as http:
        card = parse_card((await http.get(served.url + "/.well-known/agent-card.json")).content)
    assert card.to_dict()["securitySchemes"] == {
        "oidc": {"openIdConnectSecurityScheme": {"openIdConnectUrl": idp.url + "/.well-known/openid-configuration"}}
    }


def test_symmetric_and_none_algorithms_cannot_be_configured() -> None:
    for algorithms in (("HS256",), ("none",), ("RS256", "HS512"), ()):
        with pytest.raises(ValueError, match="refused"):
            JWTAuthenticator("http://127.0.0.1:9/jwks.json", algorithms=algorithms)
