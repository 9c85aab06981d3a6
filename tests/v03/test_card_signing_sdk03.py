"""Agent Card signatures between relaykit and the official a2a-sdk 0.3.26, both ways, with the SDK's own signer and
verifier (``a2a.utils.signing``) run in its own environment (``sdk03_signing.py``, ``sdk03_server.py``).

a2a-sdk 0.3 signs its model's reading of the card (0.3 members only, defaults and empties dropped) serialised by
``json.dumps(sort_keys=True)``, not RFC 8785; relaykit makes and checks that form (``relaykit._jws``).

* relaykit signs, the SDK verifies: ``relaykit serve --card-key`` (and with API keys: a security requirement without
  scopes is where the forms part) fetched by ``A2ACardResolver`` with its ``signature_verifier``, the key from the
  card's ``jku``; and cards of every shape that broke a form before (floats, astral keys, non-ASCII text, every
  security scheme, skills with security) signed by ``sign_card(..., sdk_form=True)`` and served as to 0.3 clients.
  The same cards signed without ``sdk_form`` are refused, so the extra signature is what makes the difference.
* the SDK signs, relaykit verifies: ``verify_card(..., sdk_form=True, received=...)`` accepts; the strict form, and
  the opt-in without the JSON as received, refuse; so does every change to what relaykit reads of the card, a 1.0
  member the 0.3 form does not cover included. An a2a-sdk 0.3 agent's own signed card goes through relaykit's
  client (``card_keys`` from its ``jku``) and the inspector.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from support.servers import ServerPool, ServerProcess, free_port, start_process, start_serve, stop_process

from relaykit._v03 import card_json
from relaykit.client import card_keys, parse_card, sign_card, verify_card
from relaykit.errors import A2AInvalidCardError
from relaykit.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    AuthorizationCodeOAuthFlow,
    MutualTlsSecurityScheme,
    OAuth2SecurityScheme,
    OAuthFlows,
    OpenIdConnectSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from v03.conftest import KITCHEN, run_driver

pytestmark = pytest.mark.interop

SIGNING = Path(__file__).with_name("sdk03_signing.py")
SDK_SERVER = Path(__file__).with_name("sdk03_server.py")
STEP = 20.0


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One EC P-256 key (``card.pem``, ``card.pub``) and an API key file (``keys.txt``) for the module."""
    where = tmp_path_factory.mktemp("card-keys")
    private = ec.generate_private_key(ec.SECP256R1())
    (where / "card.pem").write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (where / "card.pub").write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (where / "keys.txt").write_text("alice alice-key\n")
    return where


# --- relaykit signs, a2a-sdk 0.3 verifies -------------------------------------------------------------------


@pytest.mark.parametrize("auth", [False, True], ids=["open", "api-keys"])
def test_the_served_card_verifies_in_a2a_sdk_03(
    sdk03: Path, key_dir: Path, v03_servers: ServerPool, auth: bool
) -> None:
    args = ["--card-key", str(key_dir / "card.pem"), "--card-kid", "k1"]
    if auth:
        args += ["--api-keys", str(key_dir / "keys.txt")]
    server = v03_servers.get(("signed", auth), lambda d: start_serve(KITCHEN, d, args=args, name=f"signed-{auth}"))
    report = run_driver(sdk03, SIGNING, "served", server.url)
    assert "crash" not in report, report["crash"]
    assert report["ok"], report
    assert report["resolver_verified"], report
    assert report["tampered_refused"], report


def test_the_extended_card_verifies_in_a2a_sdk_03(sdk03: Path, key_dir: Path, tmp_path: Path) -> None:
    # The 0.3 SDK's client checks every card it receives with its signature_verifier, the extended one too.
    extended = tmp_path / "extended.json"
    extended.write_text(json.dumps({"name": "kitchen (extended)", "description": "more", "version": "1.0.0"}))
    args = ["--card-key", str(key_dir / "card.pem"), "--card-kid", "k1", "--api-keys", str(key_dir / "keys.txt")]
    server = start_serve(KITCHEN, tmp_path, args=[*args, "--extended-card", str(extended)], name="signed-extended")
    try:
        call = {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard", "params": {}}
        answer = httpx.post(server.url + "/", json=call, headers={"X-API-Key": "alice-key"}, timeout=STEP).json()
    finally:
        stop_process(server.proc)
    card = answer["result"]
    assert card["name"] == "kitchen (extended)"
    cards = tmp_path / "cards.json"
    cards.write_text(json.dumps([card]))
    [report] = run_driver(sdk03, SIGNING, "verify", str(cards), str(key_dir / "card.pub"))
    assert report["ok"], report
    assert report["tampered_refused"], report


def _dual(**extra: Any) -> AgentCard:
    """A card that speaks 1.0 and 0.3 (so it is served with the 0.3 members merged in), with ``extra`` fields."""
    base = AgentCard(
        name="signed",
        description="a card to sign",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url="http://agent.test/", protocol_binding="JSONRPC"),
            AgentInterface(url="http://agent.test/", protocol_binding="JSONRPC", protocol_version="0.3"),
            AgentInterface(url="http://agent.test", protocol_binding="HTTP+JSON", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        skills=[AgentSkill(id="s", name="s", description="d", tags=["t"])],
    )
    return base.model_copy(update=extra)


def _params(params: dict[str, Any]) -> AgentCapabilities:
    return AgentCapabilities(streaming=True, extensions=[AgentExtension(uri="urn:test", params=params)])


RELAYKIT_CARDS = {
    "plain": _dual(),
    "floats and astral keys": _dual(
        capabilities=_params({"ratio": 1.0, "tiny": 1e-07, "big": 1e21, "third": 1 / 3, "\U0001f600": 1, "\ufb33": 2})
    ),
    "non-ASCII text": _dual(description="Grüße aus Köln — 日本語 ✓"),
    "bearer": _dual(
        security_schemes={"bearer": SecurityScheme.bearer("JWT")},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
    ),
    "api key or mtls": _dual(
        security_schemes={
            "apiKey": SecurityScheme.api_key("X-API-Key"),
            "mtls": SecurityScheme(mtls_security_scheme=MutualTlsSecurityScheme()),
        },
        security_requirements=[
            SecurityRequirement(schemes={"apiKey": StringList()}),
            SecurityRequirement(schemes={"mtls": StringList()}),
        ],
    ),
    "oauth2 and openid": _dual(
        security_schemes={
            "oauth": SecurityScheme(
                oauth2_security_scheme=OAuth2SecurityScheme(
                    flows=OAuthFlows(
                        authorization_code=AuthorizationCodeOAuthFlow(
                            authorization_url="https://idp.test/authorize",
                            token_url="https://idp.test/token",
                            scopes={"read": "Read tasks"},
                            pkce_required=True,
                        )
                    ),
                    oauth2_metadata_url="https://idp.test/.well-known/oauth-authorization-server",
                )
            ),
            "oidc": SecurityScheme(
                open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                    open_id_connect_url="https://idp.test/.well-known/openid-configuration"
                )
            ),
        },
        security_requirements=[
            SecurityRequirement(schemes={"oauth": StringList(items=["read"])}),
            SecurityRequirement(schemes={"oidc": StringList()}),
        ],
    ),
    "everything else": _dual(
        provider=AgentProvider(organization="Example", url="https://example.test"),
        documentation_url="https://example.test/docs",
        icon_url="https://example.test/icon.png",
        capabilities=AgentCapabilities(streaming=False, push_notifications=True, extended_agent_card=True),
        security_schemes={"bearer": SecurityScheme.bearer()},
        skills=[
            AgentSkill(
                id="s",
                name="s",
                description="d",
                tags=["t", "u"],
                examples=["do it"],
                input_modes=["text/plain", "application/json"],
                output_modes=["application/json"],
                security_requirements=[SecurityRequirement(schemes={"bearer": StringList(items=["a", "b"])})],
            )
        ],
    ),
}


def test_relaykit_signs_a2a_sdk_03_verifies(sdk03: Path, key_dir: Path, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    private = load_pem_private_key((key_dir / "card.pem").read_bytes(), None)
    names = list(RELAYKIT_CARDS)
    # As served to a 0.3 client: the 1.0 card with the 0.3 members merged in. Without sdk_form, the control.
    both = [json.loads(card_json(sign_card(RELAYKIT_CARDS[n], private, kid="k1", sdk_form=True))) for n in names]
    strict = [json.loads(card_json(sign_card(RELAYKIT_CARDS[n], private, kid="k1"))) for n in names]
    (tmp_path / "cards.json").write_text(json.dumps(both + strict))
    results = run_driver(sdk03, SIGNING, "verify", str(tmp_path / "cards.json"), str(key_dir / "card.pub"))
    assert "crash" not in results, results
    for name, result in zip(names, results[: len(names)], strict=True):
        assert result["ok"], (name, result)
        assert result["tampered_refused"], (name, result)
    for name, result in zip(names, results[len(names) :], strict=True):
        assert not result["ok"], (name, result)  # the strict form alone is not what a 0.3 SDK checks
    for served in both:
        verify_card(parse_card(json.dumps(served)), (key_dir / "card.pub").read_bytes())  # and strict still verifies


# --- a2a-sdk 0.3 signs, relaykit verifies -------------------------------------------------------------------

BASE03 = {
    "name": "sdk03",
    "description": "an a2a-sdk 0.3 card",
    "url": "http://127.0.0.1:1/",
    "version": "1.0.0",
    "protocolVersion": "0.3.0",
    "preferredTransport": "JSONRPC",
    "additionalInterfaces": [
        {"url": "http://127.0.0.1:1/", "transport": "JSONRPC"},
        {"url": "http://127.0.0.1:1", "transport": "HTTP+JSON"},
    ],
    "capabilities": {"streaming": True, "pushNotifications": False, "stateTransitionHistory": True},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "s", "name": "s", "description": "d", "tags": ["t"]}],
}

SDK_CARDS: dict[str, dict[str, Any]] = {
    "kitchen": BASE03,
    "text and numbers": {
        **BASE03,
        "description": "Grüße aus Köln — 日本語 ✓ \U0001f600",
        "url": "http://127.0.0.1:1",
        "preferredTransport": "HTTP+JSON",
        "capabilities": {
            "streaming": True,
            "extensions": [
                {
                    "uri": "urn:test",
                    "required": False,
                    "params": {"ratio": 1.0, "tiny": 1e-07, "big": 1e21, "\U0001f600": 1, "\ufb33": 2, "\u20ac": 3},
                }
            ],
        },
    },
    "security": {
        **BASE03,
        "provider": {"organization": "Example", "url": "https://example.test"},
        "documentationUrl": "https://example.test/docs",
        "iconUrl": "https://example.test/icon.png",
        "supportsAuthenticatedExtendedCard": True,
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "a key"},
            "mtls": {"type": "mutualTLS"},
            "oauth": {
                "type": "oauth2",
                "flows": {
                    "clientCredentials": {"tokenUrl": "https://idp.test/token", "scopes": {"write": "Write"}},
                    "authorizationCode": {
                        "authorizationUrl": "https://idp.test/authorize",
                        "tokenUrl": "https://idp.test/token",
                        "scopes": {"read": "Read"},
                    },
                },
            },
            "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://idp.test/.well-known/openid-configuration"},
        },
        "security": [{"bearer": []}, {"oauth": ["write"]}, {"apiKey": [], "mtls": []}],
        "skills": [
            {
                "id": "s",
                "name": "s",
                "description": "d",
                "tags": ["t"],
                "examples": ["do it"],
                "inputModes": ["application/json"],
                "outputModes": ["application/json"],
                "security": [{"oauth": ["write"]}],
            }
        ],
    },
}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = raw
        for name in parents:
            target = target.setdefault(name, {})
        target[last] = value

    return change


# Changes to what relaykit reads of a card; the first three the 0.3 form covers, the others are 1.0 members it does
# not (relaykit reads a card with supportedInterfaces as 1.0), which verify_card must refuse all the same.
TAMPERING = {
    "name": _set("name", "someone else"),
    "url": _set("url", "http://elsewhere.test/"),
    "skill": lambda raw: raw["skills"].append({"id": "x", "name": "x", "description": "d", "tags": ["t"]}),
    "1.0 interfaces": _set(
        "supportedInterfaces",
        [{"url": "http://elsewhere.test/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
    ),
    "1.0 extended card": _set("capabilities.extendedAgentCard", True),
    "1.0 requirement": _set("securityRequirements", [{"schemes": {"admin": {"list": ["all"]}}}]),
}


@pytest.fixture(scope="module")
def sdk_signed(sdk03: Path, key_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``SDK_CARDS`` signed by ``create_agent_card_signer``, as an a2a-sdk 0.3 agent serves them."""
    where = tmp_path_factory.mktemp("sdk-signed") / "cards.json"
    where.write_text(json.dumps(list(SDK_CARDS.values())))
    signed = run_driver(sdk03, SIGNING, "sign", str(where), str(key_dir / "card.pem"), "sdk-k1")
    assert "crash" not in signed, signed
    return dict(zip(SDK_CARDS, signed, strict=True))


@pytest.mark.parametrize("name", list(SDK_CARDS))
def test_a2a_sdk_03_signs_relaykit_verifies(sdk_signed: dict[str, dict[str, Any]], key_dir: Path, name: str) -> None:
    public = (key_dir / "card.pub").read_bytes()
    raw = sdk_signed[name]
    card = parse_card(json.dumps(raw))
    verify_card(card, public, algorithms=["ES256"], sdk_form=True, received=raw)
    verify_card(card, {"sdk-k1": public}, algorithms=["ES256"], sdk_form=True, received=raw)
    with pytest.raises(A2AInvalidCardError):
        verify_card(card, public, algorithms=["ES256"], received=raw)  # not RFC 8785: the strict form refuses
    with pytest.raises(A2AInvalidCardError, match="received="):
        verify_card(card, public, algorithms=["ES256"], sdk_form=True)  # the 0.3 form is made of the JSON received
    with pytest.raises(A2AInvalidCardError):
        verify_card(card, public, algorithms=["RS256"], sdk_form=True, received=raw)  # the algorithm stays pinned
    refused = set()
    for change, tamper in TAMPERING.items():
        changed = copy.deepcopy(raw)
        tamper(changed)
        try:
            tampered = parse_card(json.dumps(changed))
        except A2AInvalidCardError:
            # Read as 1.0 (it has supportedInterfaces), its 0.3-shaped schemes are no card at all: nothing to trust.
            refused.add(change)
            continue
        if tampered == card:
            # Nothing relaykit reads changed (a 0.3 card's ``security`` is read over ``securityRequirements``, say):
            # the signature still holds.
            verify_card(tampered, public, algorithms=["ES256"], sdk_form=True, received=changed)
            continue
        with pytest.raises(A2AInvalidCardError):
            verify_card(tampered, public, algorithms=["ES256"], sdk_form=True, received=changed)
        refused.add(change)
    assert refused >= {"name", "url", "skill", "1.0 interfaces"}
    if "security" not in raw:
        assert refused == set(TAMPERING)


@pytest.fixture(scope="module")
def signed_sdk_agent(sdk03: Path, key_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The a2a-sdk 0.3.26 agent (``sdk03_server.py``) with its card signed by the SDK, keys at its jku."""
    grpc_port = free_port()

    def command(port: int) -> list[str]:
        return [
            str(sdk03),
            str(SDK_SERVER),
            "--port",
            str(port),
            "--grpc-port",
            str(grpc_port),
            "--card-key",
            str(key_dir / "card.pem"),
            "--card-kid",
            "sdk-agent",
        ]

    server = start_process(
        command, tmp_path_factory.mktemp("sdk03-signed"), name="sdk03-signed", ready_path="/.well-known/agent-card.json"
    )
    yield server
    stop_process(server.proc)


async def test_an_a2a_sdk_03_agent_s_signed_card_through_relaykit(signed_sdk_agent: ServerProcess) -> None:
    from relaykit.inspector._card_check import check_card
    from relaykit.inspector._session import Session, Target, new_http

    url = signed_sdk_agent.url
    async with asyncio.timeout(STEP), httpx.AsyncClient(timeout=STEP) as http:
        response = await http.get(url + "/.well-known/agent-card.json")
        raw = response.json()
        card = parse_card(response.content)
        keys = await card_keys(card, [url + "/"], http=http)
        assert list(keys) == ["sdk-agent"]
        verify_card(card, keys, algorithms=["ES256"], sdk_form=True, received=raw)
        with pytest.raises(A2AInvalidCardError):
            verify_card(card, keys, algorithms=["ES256"])
    session = Session.parse({"url": url}, Target(), url)
    async with asyncio.timeout(STEP), new_http() as http:
        report, parsed = await check_card(session, http)
    assert parsed is not None
    findings = [f for f in report["findings"] if f["field"].startswith("signatures[")]
    assert [f["level"] for f in findings] == ["ok"], findings
