"""Agent Card signatures: RFC 8785's published test vectors, and signatures that verify both ways against a2a-sdk
1.3.0 on the cards that used to break (whole-number floats, ``1e-07``, keys above U+FFFF, non-ASCII text, a card with
auth on); the served card is signed as served, and a card passed in already signed is served unchanged. a2a-sdk
0.3's form, byte for byte, and what a signature over it may vouch for (against a2a-sdk 0.3.26 itself:
``tests/v03/test_card_signing_sdk03.py``)."""

from __future__ import annotations

import json
import struct
from typing import Any

import httpx
import pytest
from auth.conftest import pem, public_pem
from auth.whoami_agent import whoami
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from relaykit._jws import canonical_card, sdk03_canonical_card, sdk_canonical_card, verify_sdk03_signature
from relaykit._v03 import card_merged
from relaykit.auth import APIKeyAuthenticator, Auth
from relaykit.client import parse_card, sign_card, verify_card
from relaykit.errors import A2AInvalidCardError
from relaykit.http import create_app
from relaykit.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    MutualTlsSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

# --- RFC 8785 -----------------------------------------------------------------------------------------------

# Appendix B: IEEE 754 double (hex) -> its canonical JSON number.
NUMBERS = {
    "0000000000000000": "0",
    "8000000000000000": "0",
    "0000000000000001": "5e-324",
    "8000000000000001": "-5e-324",
    "7fefffffffffffff": "1.7976931348623157e+308",
    "ffefffffffffffff": "-1.7976931348623157e+308",
    "4340000000000000": "9007199254740992",
    "c340000000000000": "-9007199254740992",
    "4430000000000000": "295147905179352830000",
    "44b52d02c7e14af5": "9.999999999999997e+22",
    "44b52d02c7e14af6": "1e+23",
    "44b52d02c7e14af7": "1.0000000000000001e+23",
    "444b1ae4d6e2ef4e": "999999999999999700000",
    "444b1ae4d6e2ef4f": "999999999999999900000",
    "444b1ae4d6e2ef50": "1e+21",
    "3eb0c6f7a0b5ed8c": "9.999999999999997e-7",
    "3eb0c6f7a0b5ed8d": "0.000001",
    "41b3de4355555553": "333333333.3333332",
    "41b3de4355555554": "333333333.33333325",
    "41b3de4355555555": "333333333.3333333",
    "41b3de4355555556": "333333333.3333334",
    "41b3de4355555557": "333333333.33333343",
    "becbf647612f3696": "-0.0000033333333333333333",
    "43143ff3c1cb0959": "1424953923781206.2",
}


def _jcs(value: Any) -> str:
    import rfc8785

    return rfc8785.dumps(value).decode()


@pytest.mark.parametrize(("bits", "expected"), NUMBERS.items())
def test_rfc8785_numbers(bits: str, expected: str) -> None:
    assert _jcs(struct.unpack(">d", bytes.fromhex(bits))[0]) == expected


def test_rfc8785_example_and_key_order() -> None:
    # §3.2.4's example, and §3.2.3's sort: by UTF-16 code units, so U+1F600 (D83D DE00) sorts before U+FB33.
    example = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    assert _jcs(example) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    keys = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
    assert list(json.loads(_jcs(keys))) == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):  # noqa: PT011 - rfc8785's error classes derive from ValueError
            _jcs(bad)


# --- the cards that used to break ---------------------------------------------------------------------------


def _card(**extra: Any) -> AgentCard:
    base = AgentCard(
        name="signed",
        description="a card to sign",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        skills=[AgentSkill(id="s", name="s", description="d", tags=["t"])],
    )
    return base.model_copy(update=extra)


def _with_params(params: dict[str, Any]) -> AgentCard:
    ext = AgentExtension(uri="urn:test", description="params", params=params)
    return _card(capabilities=AgentCapabilities(streaming=True, push_notifications=False, extensions=[ext]))


CARDS = {
    "whole-number float": _with_params({"ratio": 1.0, "big": 1e21}),
    "1e-07": _with_params({"tiny": 1e-07, "third": 1 / 3}),
    "astral keys": _with_params({"\U0001f600": 1, "\ufb33": 2, "\u20ac": 3}),
    "non-ASCII text": _card(description="Grüße aus Köln — 日本語 ✓"),
    "auth on": _card(
        security_schemes={"bearer": SecurityScheme.bearer("JWT")},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
    ),
    # An mTLS scheme has no fields: {"mtlsSecurityScheme":{}} is empty, and the SDKs drop it from their payloads.
    "api key or mtls": _card(
        security_schemes={
            "apiKey": SecurityScheme.api_key("X-API-Key"),
            "mtls": SecurityScheme(mtls_security_scheme=MutualTlsSecurityScheme()),
        },
        security_requirements=[
            SecurityRequirement(schemes={"apiKey": StringList()}),
            SecurityRequirement(schemes={"mtls": StringList()}),
        ],
    ),
}


def test_whole_floats_and_astral_keys_are_canonical() -> None:
    payload = canonical_card(CARDS["whole-number float"]).decode()
    assert '"big":1e+21' in payload
    assert '"ratio":1' in payload
    assert '"tiny":1e-7' in canonical_card(CARDS["1e-07"]).decode()
    astral = canonical_card(CARDS["astral keys"]).decode()
    # UTF-16 order: U+20AC, then U+1F600 (D83D DE00), then U+FB33; code point order would put U+FB33 second.
    assert '{"\u20ac":3,"\U0001f600":1,"\ufb33":2}' in astral


def _keys() -> tuple[Any, bytes]:
    private = ec.generate_private_key(ec.SECP256R1())
    return private, public_pem(private)


def _to_sdk(card: AgentCard) -> Any:
    from a2a.types import AgentCard as SDKAgentCard
    from google.protobuf.json_format import Parse

    # Over the wire as a client gets it: our JSON, parsed by the SDK.
    return Parse(card.to_json().decode(), SDKAgentCard(), ignore_unknown_fields=True)


@pytest.mark.interop
@pytest.mark.parametrize("name", list(CARDS))
def test_relaykit_signs_a2a_sdk_verifies(name: str) -> None:
    from a2a.utils.signing import create_signature_verifier

    private, public = _keys()
    signed = sign_card(CARDS[name], private, kid="k1", sdk_form=True)
    verify_card(parse_card(signed.to_json()), public)  # a strict RFC 8785 verifier
    create_signature_verifier(lambda kid, jku: public, ["ES256"])(_to_sdk(signed))


@pytest.mark.interop
@pytest.mark.parametrize("name", list(CARDS))
def test_a2a_sdk_signs_relaykit_verifies(name: str) -> None:
    from a2a.utils.signing import create_agent_card_signer
    from google.protobuf.json_format import MessageToJson

    private, public = _keys()
    theirs = create_agent_card_signer(private, {"alg": "ES256", "kid": "k1", "typ": "JOSE"})(_to_sdk(CARDS[name]))
    card = parse_card(MessageToJson(theirs))
    strict_ok = canonical_card(card) == sdk_canonical_card(card)
    if strict_ok:
        verify_card(card, public)
    else:
        # The SDK signed its empties-dropped form (digest §9 #18), which a strict verifier rightly refuses.
        with pytest.raises(A2AInvalidCardError):
            verify_card(card, public)
    verify_card(card, public, sdk_form=True)
    tampered = card.model_copy(update={"name": "someone else"})
    with pytest.raises(A2AInvalidCardError):
        verify_card(tampered, public, sdk_form=True)


def test_the_auth_card_needs_both_forms() -> None:
    private, public = _keys()
    card = CARDS["auth on"]
    assert canonical_card(card) != sdk_canonical_card(card)
    assert len(sign_card(card, private, kid="k").signatures) == 1
    both = sign_card(card, private, kid="k", sdk_form=True)
    assert len(both.signatures) == 2
    verify_card(both, public)


def test_keys_by_kid_and_pinned_algorithms() -> None:
    ec_key, ec_public = _keys()
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    card = sign_card(sign_card(CARDS["non-ASCII text"], ec_key, kid="ec"), rsa_key, algorithm="RS256", kid="rsa")
    verify_card(card, {"rsa": public_pem(rsa_key)}, algorithms=["RS256"])
    verify_card(card, lambda kid, jku: ec_public if kid == "ec" else None, algorithms=["ES256"])
    with pytest.raises(A2AInvalidCardError, match="no key"):
        verify_card(card, {"other": ec_public})
    with pytest.raises(A2AInvalidCardError):
        verify_card(card, {"rsa": public_pem(rsa_key)}, algorithms=["ES256"])  # pinned: RS256 not allowed


# --- the served card ----------------------------------------------------------------------------------------


async def _served_card(app: Any, base: str = "http://agent.test") -> tuple[AgentCard, bytes]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=base) as http:
        body = (await http.get("/.well-known/agent-card.json")).content
    return parse_card(body), body


async def test_a_signed_card_is_served_unchanged() -> None:
    private, public = _keys()
    signed = sign_card(_card(), private, kid="mine")
    app = create_app(whoami, card=signed, public_url="https://agent.example")
    served, body = await _served_card(app)
    assert json.loads(body) == json.loads(signed.to_json())
    verify_card(served, public)
    with pytest.raises(ValueError, match="security schemes"):
        create_app(whoami, card=signed, auth=Auth(APIKeyAuthenticator({"a": "k"})))


@pytest.mark.parametrize("public_url", ["https://agent.example", None])
async def test_card_key_signs_the_card_as_served(public_url: str | None) -> None:
    private, public = _keys()
    app = create_app(
        whoami,
        public_url=public_url,
        auth=Auth(APIKeyAuthenticator({"a": "k"})),
        card_signing_key=pem(private),
        card_key_id="served-key",
    )
    # Without public_url the interfaces name the address the request came to: each such card is signed too.
    served, _ = await _served_card(app, "http://mounted.example:8080")
    assert served.supported_interfaces[0].url == (public_url or "http://mounted.example:8080") + "/"
    assert served.security_schemes
    verify_card(served, public)
    verify_card(served, {"served-key": public})
    from a2a.utils.signing import create_signature_verifier

    create_signature_verifier(lambda kid, jku: public, ["ES256"])(_to_sdk(served))


def _verifies_as_received(raw: dict[str, Any], public: bytes) -> bool:
    """A verifier that knows no card model: RFC 8785 over the JSON exactly as received, minus ``signatures``."""
    import base64

    import jwt

    payload = {k: v for k, v in raw.items() if k != "signatures"}
    encoded = base64.urlsafe_b64encode(_jcs(payload).encode()).rstrip(b"=").decode()
    for signature in raw["signatures"]:
        try:
            jwt.api_jws.PyJWS().decode_complete(
                f"{signature['protected']}.{encoded}.{signature['signature']}", key=public, algorithms=["ES256"]
            )
            return True
        except jwt.PyJWTError:
            continue
    return False


@pytest.mark.parametrize("public_url", ["https://agent.example", None])
@pytest.mark.parametrize("version", [None, "1.0"])
async def test_the_card_verifies_as_received_in_every_rendering(public_url: str | None, version: str | None) -> None:
    # The card endpoint needs no A2A-Version: without one it serves the 1.0 card with the 0.3 members merged in.
    # That JSON, as received, must carry a signature over itself (and the 1.0 model's signatures still verify).
    private, public = _keys()
    app = create_app(whoami, public_url=public_url, card_signing_key=pem(private), card_key_id="k")
    headers = {"A2A-Version": version} if version else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent.test") as http:
        response = await http.get("/.well-known/agent-card.json", headers=headers)
    raw = response.json()
    assert ("url" in raw) is (version is None)  # the 0.3 members are there exactly when no version is sent
    assert _verifies_as_received(raw, public)
    verify_card(parse_card(response.content), public)
    if version is None:
        # And one over a2a-sdk 0.3's form of it, per base URL too (made when that base's card is built).
        verify_sdk03_signature(parse_card(response.content), public, raw)


# --- a2a-sdk 0.3's form -------------------------------------------------------------------------------------------

DUAL = AgentCard(
    name="n",
    description="Grüße",
    version="1",
    supported_interfaces=[
        AgentInterface(url="http://a.test/", protocol_binding="JSONRPC"),
        AgentInterface(url="http://a.test/", protocol_binding="JSONRPC", protocol_version="0.3"),
    ],
    capabilities=AgentCapabilities(
        streaming=True,
        extensions=[AgentExtension(uri="urn:x", params={"tiny": 1e-07, "one": 1.0, "\U0001f600": 1, "\ufb33": 2})],
    ),
    security_schemes={"bearer": SecurityScheme.bearer("JWT")},
    security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
    skills=[AgentSkill(id="s", name="s", tags=["t"])],
)


def test_sdk03_form_is_a2a_sdk_0_3_s_bytes() -> None:
    # The served JSON (1.0 + 0.3 members) as a2a-sdk 0.3.26's canonicalize_agent_card makes it: 0.3 members only
    # (supportedInterfaces, securityRequirements gone), defaults gone (protocolVersion "0.3.0", preferredTransport
    # "JSONRPC", the scheme's type), empties gone (the scopes-less requirement, the skill's ""), json.dumps with
    # sorted keys: code point order (U+FB33 before U+1F600), \u escapes, Python's float repr (1.0, 1e-07).
    merged = card_merged(DUAL)
    assert merged is not None
    assert sdk03_canonical_card(merged) == (
        b'{"additionalInterfaces":[{"transport":"JSONRPC","url":"http://a.test/"}],'
        b'"capabilities":{"extensions":[{"params":{"one":1.0,"tiny":1e-07,"\\ufb33":2,"\\ud83d\\ude00":1},'
        b'"uri":"urn:x"}],"streaming":true},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],'
        b'"description":"Gr\\u00fc\\u00dfe","name":"n","securitySchemes":{"bearer":{"bearerFormat":"JWT",'
        b'"scheme":"Bearer"}},"skills":[{"id":"s","name":"s","tags":["t"]}],"url":"http://a.test/","version":"1"}'
    )
    assert sdk03_canonical_card(DUAL.to_dict()) is None  # the 1.0 rendering alone is no 0.3 card


def test_sign_card_adds_the_sdk03_form_only_for_a_card_that_speaks_0_3() -> None:
    private, public = _keys()
    dual = sign_card(DUAL, private, kid="k", sdk_form=True)
    assert len(dual.signatures) == 3  # strict, a2a-sdk 1.x's, a2a-sdk 0.3's
    assert len(sign_card(DUAL, private, kid="k").signatures) == 1
    only10 = DUAL.model_copy(update={"supported_interfaces": DUAL.supported_interfaces[:1]})
    assert len(sign_card(only10, private, kid="k", sdk_form=True).signatures) == 2
    verify_card(dual, public)


def _sdk03_signed(raw: dict[str, Any], private: Any) -> dict[str, Any]:
    """``raw`` with one signature over a2a-sdk 0.3's form of it (what the SDK's signer makes, as the interop tests
    show), and no other."""
    import jwt

    payload = sdk03_canonical_card(raw)
    assert payload is not None
    head, _, sig = jwt.api_jws.PyJWS().encode(payload, private, algorithm="ES256", headers={"kid": "k"}).split(".")
    return {**raw, "signatures": [{"protected": head, "signature": sig}]}


def test_an_sdk03_signature_vouches_only_for_a_card_its_0_3_members_make() -> None:
    private, public = _keys()
    merged = card_merged(DUAL)
    assert merged is not None
    # relaykit's own served JSON with only its 0.3-form signature: that signature is sound (a2a-sdk 0.3 checks it),
    # but relaykit reads the 1.0 members, which it does not cover, so verify_card does not take it.
    served = _sdk03_signed(merged, private)
    card = parse_card(json.dumps(served))
    verify_sdk03_signature(card, public, served)
    with pytest.raises(A2AInvalidCardError):
        verify_card(card, public, sdk_form=True, received=served)
    # A pure 0.3 card (what an a2a-sdk 0.3 agent serves): its 0.3 members make the whole card.
    pure = {k: v for k, v in merged.items() if k not in ("supportedInterfaces", "securityRequirements")}
    pure["securitySchemes"] = {"bearer": {"type": "http", "scheme": "Bearer", "bearerFormat": "JWT"}}
    signed = _sdk03_signed(pure, private)
    verify_card(parse_card(json.dumps(signed)), public, sdk_form=True, received=signed)
    with pytest.raises(A2AInvalidCardError):
        verify_card(parse_card(json.dumps(signed)), public, received=signed)  # opt-in only
    for extra in ({"supportedInterfaces": served["supportedInterfaces"]}, {"name": "m"}, {"iconUrl": "x"}):
        changed = {**signed, **extra}
        with pytest.raises(A2AInvalidCardError):
            verify_card(parse_card(json.dumps(changed)), public, sdk_form=True, received=changed)
    # What the opt-in costs, as for a2a-sdk 1.x's form: empty values are not covered, so a requirement without
    # scopes can be dropped unseen (why sdk_form is off by default).
    dropped = {k: v for k, v in signed.items() if k != "security"}
    verify_card(parse_card(json.dumps(dropped)), public, sdk_form=True, received=dropped)
