"""Card resolution (ETag / Cache-Control), unusable cards, transport negotiation, tenants, the headers every request
carries (A2A-Version, A2A-Extensions, interceptors), and card signatures (JWS, EC P-256).

Header and tenant checks run the client against a real relaykit server through ``MiniHTTP`` + ``forward_to``, a
recording HTTP front that relays every request (streams included) and keeps what it saw.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from support.servers import ServerProcess

from client._net import MiniHTTP, Request, Response, forward_to
from relaykit import Task
from relaykit.client import (
    APIKeyAuth,
    BearerAuth,
    CardResolver,
    Client,
    JSONRPCTransport,
    OAuth2ClientCredentials,
    RESTTransport,
    TraceContext,
    card_keys,
    choose_interface,
    sign_card,
    verify_card,
)
from relaykit.errors import A2AInvalidCardError, TaskNotFoundError
from relaykit.types import AgentCard, AgentInterface, AgentSkill

T = 20.0
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _card(*interfaces: tuple[str, str] | tuple[str, str, str], name: str = "test-agent") -> AgentCard:
    built = []
    for item in interfaces:
        binding, url, *rest = item
        built.append(AgentInterface(protocol_binding=binding, url=url, protocol_version=rest[0] if rest else "1.0"))
    return AgentCard(
        name=name,
        description="a card for client tests",
        version="1.0.0",
        supported_interfaces=built,
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )


# --- card resolution ----------------------------------------------------------------------------------------


@pytest.fixture
async def card_server() -> AsyncIterator[MiniHTTP]:
    """Serves a card with an ETag; ``/fresh`` says ``max-age=60``, ``/short`` ``max-age=1``; a matching
    ``If-None-Match`` gets 304."""
    body = _card(("JSONRPC", "http://127.0.0.1:9/")).to_json()
    etag = '"card-v1"'

    async def handle(request: Request) -> Response:
        max_age = 60 if request.path.startswith("/fresh/") else 1
        headers = [
            ("etag", etag),
            ("cache-control", f"public, max-age={max_age}"),
            ("content-type", "application/json"),
        ]
        if request.headers.get("if-none-match") == etag:
            return Response(304, headers)
        return Response(200, headers, body)

    server = await MiniHTTP(handle).start()
    try:
        yield server
    finally:
        await server.aclose()


async def test_card_fresh_within_max_age(card_server: MiniHTTP) -> None:
    async with asyncio.timeout(T), httpx.AsyncClient() as http:
        resolver = CardResolver(http)
        first = await resolver.get(card_server.url + "/fresh")
        second = await resolver.get(card_server.url + "/fresh/")  # the same card URL
        third = await resolver.get(card_server.url + "/fresh/.well-known/agent-card.json")
    assert first == second == third
    assert len(card_server.requests) == 1  # fresh for max-age: no request


async def test_card_revalidated_after_max_age(card_server: MiniHTTP) -> None:
    async with asyncio.timeout(T), httpx.AsyncClient() as http:
        now = [1000.0]
        resolver = CardResolver(http, clock=lambda: now[0])
        first = await resolver.get(card_server.url + "/short")
        now[0] += 1.5  # step the resolver's clock past the 1 s max-age
        second = await resolver.get(card_server.url + "/short")
    assert second == first
    assert [r.path for r in card_server.requests] == ["/short/.well-known/agent-card.json"] * 2
    assert "if-none-match" not in card_server.requests[0].headers
    assert card_server.requests[1].headers["if-none-match"] == '"card-v1"'  # revalidated; the server said 304


async def test_relaykit_card_is_cached(kitchen_server: ServerProcess) -> None:
    seen: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        seen.append(request)

    async with asyncio.timeout(T), httpx.AsyncClient(event_hooks={"request": [record]}) as http:
        resolver = CardResolver(http)
        card = await resolver.get(kitchen_server.url)
        again = await resolver.get(kitchen_server.url)
        etag_answer = await http.get(
            kitchen_server.url + "/.well-known/agent-card.json", headers={"If-None-Match": '"nope"'}
        )
        etag = etag_answer.headers["etag"]
        not_modified = await http.get(
            kitchen_server.url + "/.well-known/agent-card.json", headers={"If-None-Match": etag}
        )
    assert card == again
    assert len([r for r in seen if r.url.path.endswith("agent-card.json")]) == 3  # 1 by the resolver + 2 direct
    assert "max-age" in etag_answer.headers["cache-control"]
    assert not_modified.status_code == 304


@pytest.fixture
async def bad_cards() -> AsyncIterator[MiniHTTP]:
    cards = {
        "/empty": _card(name="no-interfaces").to_json(),
        "/grpc": _card(("GRPC", "127.0.0.1:50051"), name="grpc-only").to_json(),
        # A version relaykit does not speak (0.3 cards are usable since issue 12: tests/v03).
        "/old": _card(("JSONRPC", "http://127.0.0.1:9/", "2.0"), name="old-one").to_json(),
        "/notjson": b"<html>hello</html>",
        "/list": b"[1, 2]",
        "/invalid": json.dumps({"description": "a card without a name"}).encode(),
    }

    async def handle(request: Request) -> Response:
        key = request.path.removesuffix("/.well-known/agent-card.json")
        if key not in cards:
            return Response(404, [("content-type", "text/plain")], b"no card here")
        return Response(200, [("content-type", "application/json")], cards[key])

    server = await MiniHTTP(handle).start()
    try:
        yield server
    finally:
        await server.aclose()


@pytest.mark.parametrize(
    ("path", "transports", "words"),
    [
        ("/empty", ["JSONRPC", "HTTP+JSON"], ["no-interfaces", "no interfaces at all"]),
        ("/grpc", ["JSONRPC", "HTTP+JSON"], ["grpc-only", "GRPC 1.0 at 127.0.0.1:50051", "JSONRPC, HTTP+JSON"]),
        ("/old", ["JSONRPC"], ["old-one", "1.0 or 0.3 interface", "JSONRPC 2.0"]),
        ("/notjson", ["JSONRPC"], ["not JSON"]),
        ("/list", ["JSONRPC"], ["not a JSON object"]),
        ("/invalid", ["JSONRPC"], ["not a valid agent card", "name"]),
        ("/missing", ["JSONRPC"], ["HTTP 404"]),
    ],
)
async def test_unusable_card_names_what_is_missing(
    bad_cards: MiniHTTP, path: str, transports: list[str], words: list[str]
) -> None:
    client = Client(bad_cards.url + path, transports=transports)
    try:
        async with asyncio.timeout(T):
            with pytest.raises(A2AInvalidCardError) as info:
                await client.connect()
    finally:
        await client.aclose()
    for word in words:
        assert word in str(info.value)


# --- negotiation --------------------------------------------------------------------------------------------


def test_negotiation_order() -> None:
    card = _card(
        ("GRPC", "127.0.0.1:50051"),
        ("HTTP+JSON", "http://rest-1"),
        ("JSONRPC", "http://rpc-1/"),
        ("JSONRPC", "http://rpc-2/"),
        ("HTTP+JSON", "http://rest-2"),
        ("JSONRPC", "http://rpc-old/", "0.3"),
    )
    # The client's preference first; among equals, the card's order.
    assert choose_interface(card, ("JSONRPC", "HTTP+JSON")).url == "http://rpc-1/"
    assert choose_interface(card, ("HTTP+JSON", "JSONRPC")).url == "http://rest-1"
    assert choose_interface(card, ("HTTP+JSON",)).url == "http://rest-1"
    assert choose_interface(card, ("GRPC", "JSONRPC")).url == "127.0.0.1:50051"
    # A 0.3 interface is never chosen, even when it is the only match for the preference.
    only_old = _card(("JSONRPC", "http://rpc-old/", "0.3"), ("HTTP+JSON", "http://rest-1"))
    assert choose_interface(only_old, ("JSONRPC", "HTTP+JSON")).url == "http://rest-1"


async def test_client_negotiates_from_the_card(kitchen_server: ServerProcess) -> None:
    async with asyncio.timeout(T):
        async with Client(kitchen_server.url) as default:
            assert isinstance(default.transport, JSONRPCTransport)  # JSON-RPC first: the card's order, too
        async with Client(kitchen_server.url, transports=["GRPC", "HTTP+JSON", "JSONRPC"]) as rest_first:
            assert isinstance(rest_first.transport, RESTTransport)  # no gRPC on this card
            assert rest_first.interface is not None
            assert rest_first.interface.url == kitchen_server.url
            task = await rest_first.send("negotiated")
    assert isinstance(task, Task)


def test_negotiation_by_protocol_version() -> None:
    card = _card(
        ("JSONRPC", "http://rpc-1/"),
        ("HTTP+JSON", "http://rest-1"),
        ("JSONRPC", "http://rpc-old/", "0.3"),
        ("HTTP+JSON", "http://rest-old", "0.3.0"),
    )
    # No version: 1.0 first. A version keeps only its interfaces (compared by major version), preference still first.
    assert choose_interface(card, ("JSONRPC", "HTTP+JSON")).url == "http://rpc-1/"
    assert choose_interface(card, ("JSONRPC", "HTTP+JSON"), "1.0").url == "http://rpc-1/"
    assert choose_interface(card, ("JSONRPC", "HTTP+JSON"), "0.3").url == "http://rpc-old/"
    assert choose_interface(card, ("HTTP+JSON", "JSONRPC"), "0.3").url == "http://rest-old"
    only_new = _card(("JSONRPC", "http://rpc-1/"))
    with pytest.raises(A2AInvalidCardError, match=r"no A2A 0\.3 interface"):
        choose_interface(only_new, ("JSONRPC",), "0.3")
    with pytest.raises(ValueError, match=r"speaks 1\.0 and 0\.3"):
        choose_interface(card, ("JSONRPC",), "2.0")


async def test_protocol_version_speaks_03_to_a_dual_stack_agent(recorder: Recorder) -> None:
    # relaykit serves 1.0 and 0.3 by default; protocol_version="0.3" makes the client a 0.3 client of it.
    card = await recorder.card()
    assert {i.protocol_version.split(".")[0] for i in card.supported_interfaces} == {"0", "1"}
    async with asyncio.timeout(T):
        for binding in ("JSONRPC", "HTTP+JSON"):
            async with Client(card=card, transports=[binding], protocol_version="0.3") as client:
                assert client.interface is not None
                assert client.interface.protocol_version.startswith("0.")
                assert getattr(client.transport, "v03", False) is True
                task = await client.send(f"as 0.3 over {binding}")
                assert isinstance(task, Task)
                assert [e async for e in client.stream("stream 2")]
        async with Client(card=card, protocol_version="1.0") as modern:
            assert modern.interface is not None
            assert modern.interface.protocol_version.startswith("1.")
            await modern.send("as 1.0")
    sent = [(r.path, r.headers.get("a2a-version"), json.loads(r.body or b"{}")) for r in recorder.a2a_requests()]
    rpc03 = [body for path, version, body in sent if path == "/" and version is None]
    assert {body["method"] for body in rpc03} == {"message/send", "message/stream"}  # the 0.3 method names
    rest03 = [path for path, version, _ in sent if version is None and path != "/"]
    assert rest03
    assert all(path.startswith("/v1/") for path in rest03)
    assert sum(1 for _, version, _ in sent if version == "1.0") == 1  # only the 1.0 client named 1.0


# --- what requests carry ------------------------------------------------------------------------------------


class Recorder:
    """A recording front for a real server; ``card()`` is the server's card with every URL moved onto the front."""

    def __init__(self, upstream: ServerProcess) -> None:
        self.upstream = upstream
        self.http = httpx.AsyncClient(timeout=10.0)
        self.server = MiniHTTP(forward_to(upstream.url, self.http))

    async def card(self, *, tenant: str = "") -> AgentCard:
        resolved = await CardResolver(self.http).get(self.upstream.url)
        interfaces = [
            i.model_copy(update={"url": i.url.replace(self.upstream.url, self.server.url), "tenant": tenant})
            for i in resolved.supported_interfaces
        ]
        return resolved.model_copy(update={"supported_interfaces": interfaces})

    def a2a_requests(self) -> list[Request]:
        return [r for r in self.server.requests if not r.path.endswith("agent-card.json")]


@pytest.fixture
async def recorder(kitchen_server: ServerProcess) -> AsyncIterator[Recorder]:
    rec = Recorder(kitchen_server)
    await rec.server.start()
    try:
        yield rec
    finally:
        await rec.server.aclose()
        await rec.http.aclose()


async def _every_operation(client: Client) -> None:
    task = await client.send("headers please")
    assert isinstance(task, Task)
    [e async for e in client.stream("stream 2")]
    await client.get_task(task.id)
    [t async for t in client.list_tasks(page_size=5)]
    slow = await client.send("slow 20", return_immediately=True)
    assert isinstance(slow, Task)
    await client.cancel(slow.id)
    await client.create_push_config(task.id, "http://127.0.0.1:9/hook", config_id="c1")
    await client.get_push_config(task.id, "c1")
    await client.list_push_configs(task.id)
    await client.delete_push_config(task.id, "c1")
    await client.extended_card()


async def test_headers_on_every_request(recorder: Recorder, binding: str) -> None:
    tokens = iter(["token-1", "token-2", "token-3"] * 20)

    async def bearer() -> str:
        return next(tokens)

    interceptors = [BearerAuth(bearer), APIKeyAuth("key-123", header="X-Api-Key"), TraceContext(TRACEPARENT)]
    async with asyncio.timeout(T):
        card = await recorder.card()
        async with Client(
            card=card, transports=[binding], interceptors=interceptors, extensions=["urn:a/v1", "urn:b/v2"]
        ) as client:
            await _every_operation(client)
    requests = recorder.a2a_requests()
    assert len(requests) >= 11
    for request in requests:
        assert request.headers["a2a-version"] == "1.0"
        assert request.headers["authorization"].startswith("Bearer token-")
        assert request.headers["x-api-key"] == "key-123"
        assert request.headers["traceparent"] == TRACEPARENT
        assert request.headers["a2a-extensions"] == "urn:a/v1, urn:b/v2"
    # The async token provider is asked once per request.
    assert len({r.headers["authorization"] for r in requests}) == 3
    streams = [r for r in requests if r.headers.get("accept") == "text/event-stream"]
    assert len(streams) == 1


async def test_no_extensions_header_unless_asked(recorder: Recorder, binding: str) -> None:
    async with asyncio.timeout(T):
        async with Client(card=await recorder.card(), transports=[binding]) as client:
            await client.send("plain")
    [request] = recorder.a2a_requests()
    assert request.headers["a2a-version"] == "1.0"
    assert "a2a-extensions" not in request.headers
    assert "authorization" not in request.headers


async def test_oauth2_client_credentials(recorder: Recorder, binding: str) -> None:
    issued: list[Request] = []

    async def token_endpoint(request: Request) -> Response:
        issued.append(request)
        body = json.dumps({"access_token": f"at-{len(issued)}", "token_type": "Bearer", "expires_in": 3600})
        return Response(200, [("content-type", "application/json")], body.encode())

    tokens = await MiniHTTP(token_endpoint).start()
    try:
        auth = OAuth2ClientCredentials(tokens.url + "/token", "client-id", "s3cret", scopes=("a2a",))
        async with (
            asyncio.timeout(T),
            Client(card=await recorder.card(), transports=[binding], interceptors=[auth]) as c,
        ):
            await c.send("one")
            await c.send("two")
    finally:
        await tokens.aclose()
    assert len(issued) == 1  # cached for its lifetime
    assert issued[0].body == b"grant_type=client_credentials&scope=a2a"
    assert issued[0].headers["authorization"].startswith("Basic ")
    assert [r.headers["authorization"] for r in recorder.a2a_requests()] == ["Bearer at-1", "Bearer at-1"]


async def test_tenant_copied_into_requests(recorder: Recorder, binding: str) -> None:
    async with asyncio.timeout(T):
        async with Client(card=await recorder.card(tenant="acme"), transports=[binding]) as tenant_client:
            task = await tenant_client.send("for acme")
            assert isinstance(task, Task)
            fetched = await tenant_client.get_task(task.id)
            listed = [t.id async for t in tenant_client.list_tasks()]
        async with Client(card=await recorder.card(), transports=[binding]) as plain:
            with pytest.raises(TaskNotFoundError):  # a task is visible only under its tenant
                await plain.get_task(task.id)
    assert fetched.id == task.id
    assert task.id in listed
    tenant_requests = recorder.a2a_requests()[:3]
    for request in tenant_requests:
        if binding == "JSONRPC":
            assert request.path == "/"
            assert json.loads(request.body)["params"]["tenant"] == "acme"
        else:
            assert request.path.startswith("/acme/")
    no_tenant = recorder.a2a_requests()[3]
    if binding == "JSONRPC":
        assert "tenant" not in json.loads(no_tenant.body)["params"]
    else:
        assert not no_tenant.path.startswith("/acme/")


# --- card signatures ----------------------------------------------------------------------------------------


def _keys() -> tuple[Any, Any]:
    private = ec.generate_private_key(ec.SECP256R1())
    return private, private.public_key()


def test_sign_and_verify_card() -> None:
    private, public = _keys()
    card = _card(("JSONRPC", "http://127.0.0.1:8000/"), ("HTTP+JSON", "http://127.0.0.1:8000"))
    signed = sign_card(card, private, kid="key-1", jku="https://example.com/jwks.json")
    assert len(signed.signatures) == 1
    verify_card(signed, public)
    # The signature survives the wire: serialise, parse, verify.
    verify_card(AgentCard.from_json(signed.to_json()), public)
    header = json.loads(_b64url(signed.signatures[0].protected))
    assert header["alg"] == "ES256"
    assert header["kid"] == "key-1"
    assert header["typ"] == "JOSE"
    assert header["jku"] == "https://example.com/jwks.json"


def test_tampered_or_unsigned_card_fails() -> None:
    private, public = _keys()
    card = _card(("JSONRPC", "http://127.0.0.1:8000/"))
    signed = sign_card(card, private, kid="key-1")
    tampered = signed.model_copy(update={"description": "something else"})
    with pytest.raises(A2AInvalidCardError, match="no signature verifies"):
        verify_card(tampered, public)
    moved = signed.model_copy(
        update={"supported_interfaces": [AgentInterface(protocol_binding="JSONRPC", url="http://evil.example/")]}
    )
    with pytest.raises(A2AInvalidCardError):
        verify_card(moved, public)
    _, other_public = _keys()
    with pytest.raises(A2AInvalidCardError):
        verify_card(signed, other_public)
    with pytest.raises(A2AInvalidCardError):
        verify_card(signed, public, algorithms=["RS256"])  # the algorithm is pinned
    with pytest.raises(A2AInvalidCardError, match="not signed"):
        verify_card(card, public)


def test_key_rotation_any_signature_verifies() -> None:
    old_private, old_public = _keys()
    new_private, new_public = _keys()
    card = _card(("JSONRPC", "http://127.0.0.1:8000/"))
    twice = sign_card(sign_card(card, old_private, kid="old"), new_private, kid="new")
    assert len(twice.signatures) == 2
    verify_card(twice, old_public)
    verify_card(twice, new_public)


def _b64url(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signed_card_fields() -> AgentCard:
    # Every REQUIRED field non-empty: a2a-sdk's canonical form drops empty values (digest §9 #18), relaykit's keeps
    # required ones, so the two agree exactly on cards like this (as every served card is).
    card = _card(("JSONRPC", "http://127.0.0.1:8000/"), ("HTTP+JSON", "http://127.0.0.1:8000"), name="signed")
    return card.model_copy(update={"capabilities": card.capabilities.model_copy(update={"streaming": True})})


@pytest.mark.interop
def test_signatures_interoperate_with_a2a_sdk() -> None:
    from a2a.types import AgentCard as SDKAgentCard
    from a2a.utils.signing import create_agent_card_signer, create_signature_verifier
    from google.protobuf.json_format import MessageToDict, ParseDict

    private, public = _keys()
    card = _signed_card_fields()
    sdk_verify = create_signature_verifier(lambda kid, jku: public, ["ES256"])
    # relaykit signs, a2a-sdk verifies.
    ours = sign_card(card, private, kid="k1")
    sdk_verify(ParseDict(ours.to_dict(), SDKAgentCard(), ignore_unknown_fields=True))
    # a2a-sdk signs, relaykit verifies.
    signer = create_agent_card_signer(private, {"alg": "ES256", "kid": "k1", "typ": "JOSE", "jku": None})
    theirs = signer(ParseDict(card.to_dict(), SDKAgentCard(), ignore_unknown_fields=True))
    verify_card(AgentCard.from_dict(MessageToDict(theirs)), public)
    tampered = AgentCard.from_dict(MessageToDict(theirs)).model_copy(update={"name": "someone else"})
    with pytest.raises(A2AInvalidCardError):
        verify_card(tampered, public)


def test_unencoded_payload_signatures_still_verify() -> None:
    """RFC 7797 (``"b64": false``) signatures, as earlier relaykit versions made them, are still accepted."""
    import jwt

    from relaykit.client import canonical_card
    from relaykit.types import AgentCardSignature

    private, public = _keys()
    card = _signed_card_fields()
    token = jwt.api_jws.PyJWS().encode(
        canonical_card(card), private, algorithm="ES256", headers={"kid": "k1"}, is_payload_detached=True
    )
    protected, _, signature = token.split(".")
    legacy = card.model_copy(update={"signatures": [AgentCardSignature(protected=protected, signature=signature)]})
    verify_card(legacy, public)
    with pytest.raises(A2AInvalidCardError):
        verify_card(legacy.model_copy(update={"version": "2.0.0"}), public)


async def test_card_keys_fetched_only_from_a_trusted_origin_and_path() -> None:
    """A ``jku`` is trusted by its scheme, host, port and path segments, never by a string prefix: a trusted
    ``http://127.0.0.1:4123`` is a prefix of ``http://127.0.0.1:41234/…`` (another port), ``http://127.0.0`` of
    ``http://127.0.0.1/…`` (another host), as ``https://agent.example`` is of ``https://agent.example.evil/…``."""
    import jwt

    private, public = _keys()
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(public))

    async def handle(request: Request) -> Response:
        body = json.dumps({"keys": [{**jwk, "kid": "k1"}]}).encode()
        return Response(200, [("content-type", "application/json")], body)

    server = await MiniHTTP(handle).start()
    try:
        origin = server.url  # http://127.0.0.1:PORT (an ephemeral port: at least 4 digits)
        card = sign_card(_card(("JSONRPC", origin + "/")), private, kid="k1", jku=origin + "/keys/jwks.json")
        async with asyncio.timeout(T), httpx.AsyncClient() as http:
            prefixes = (origin[:-1], "http://127.0.0", origin + "/ke", origin + "/keys/jwks", "https" + origin[4:])
            untrusted = {prefix: await card_keys(card, [prefix], http=http) for prefix in prefixes}
            assert server.requests == []
            for prefix in (origin, origin + "/keys", origin + "/keys/"):
                keys = await card_keys(card, [prefix], http=http)
                assert list(keys) == ["k1"], prefix
                verify_card(card, keys, algorithms=["ES256"])
    finally:
        await server.aclose()
    assert all(keys == {} for keys in untrusted.values()), untrusted
    assert [r.path for r in server.requests] == ["/keys/jwks.json"] * 3
