"""Signed webhooks: ``PushSigner`` tokens, ``verify_request``, and ``WebhookReceiver``'s checks over real sockets."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from push_helpers import pem, serving

from relaykit import StreamResponse
from relaykit.push import SIGNATURE_HEADER, PushSigner, SignatureError, WebhookReceiver, verify_request

ISSUER = "https://agent.example.com"
BODY = (
    b'{"statusUpdate":{"taskId":"t-1","contextId":"c-1","status":{"state":"TASK_STATE_COMPLETED",'
    b'"timestamp":"2026-01-02T03:04:05.678Z"}}}'
)


def signed(signer: PushSigner, body: bytes = BODY, *, task_id: str = "t-1", event_id: str = "e-1") -> dict[str, str]:
    return {SIGNATURE_HEADER: signer.sign(body=body, task_id=task_id, event_id=event_id)}


@pytest.mark.parametrize(("key", "alg"), [("ec_pem", "ES256"), ("rsa_pem", "RS256")])
def test_token_claims_and_verification(key: str, alg: str, request: pytest.FixtureRequest) -> None:
    signer = PushSigner(request.getfixturevalue(key), key_ids="k1", issuer=ISSUER)
    headers = signed(signer)
    header = jwt.get_unverified_header(headers[SIGNATURE_HEADER])
    assert (header["alg"], header["kid"], header["typ"]) == (alg, "k1", "JWT")
    claims = verify_request(headers, BODY, signer.jwks(), issuer=ISSUER)
    assert claims["iss"] == ISSUER
    assert claims["taskId"] == "t-1"
    assert claims["eventId"] == "e-1"
    assert claims["body_sha256"] == hashlib.sha256(BODY).hexdigest()
    assert abs(claims["iat"] - time.time()) < 5
    assert claims["exp"] > claims["iat"]
    # The JWKS holds public parts only, with kid, alg and use.
    [jwk] = signer.jwks()["keys"]
    assert (jwk["kid"], jwk["alg"], jwk["use"]) == ("k1", alg, "sig")
    assert "d" not in jwk


def test_jti_is_unique_per_attempt_and_event_id_stable(ec_pem: bytes) -> None:
    signer = PushSigner(ec_pem, issuer=ISSUER)
    tokens = [signed(signer) for _ in range(3)]
    claims = [verify_request(t, BODY, signer.jwks()) for t in tokens]
    assert len({c["jti"] for c in claims}) == 3
    assert {c["eventId"] for c in claims} == {"e-1"}


def test_default_kid_is_the_rfc7638_thumbprint(ec_pem: bytes) -> None:
    signer = PushSigner(ec_pem, issuer=ISSUER)
    [jwk] = signer.jwks()["keys"]
    expected = jwt.PyJWK(jwk).key  # the same public key
    assert signer.kid == jwk["kid"]
    assert len(signer.kid) == 43  # base64url SHA-256, no padding
    assert expected is not None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"body": BODY + b" "}, "body_sha256 does not match"),
        ({"issuer": "https://someone-else.example.com"}, "Invalid issuer"),
        ({"max_age": -10.0, "leeway": 0.0}, "stale"),
        ({"header": "X-Other"}, "missing X-Other"),
    ],
)
def test_verification_failures(ec_pem: bytes, change: dict[str, Any], message: str) -> None:
    signer = PushSigner(ec_pem, issuer=ISSUER)
    headers = signed(signer)
    body = change.pop("body", BODY)
    with pytest.raises(SignatureError, match=message):
        verify_request(headers, body, signer.jwks(), **{"issuer": ISSUER, **change})


def test_a_token_from_another_key_does_not_verify(ec_pem: bytes) -> None:
    signer = PushSigner(ec_pem, key_ids="k1", issuer=ISSUER)
    stranger = PushSigner(pem(ec.generate_private_key(ec.SECP256R1())), key_ids="k1", issuer=ISSUER)
    with pytest.raises(SignatureError, match="does not verify"):
        verify_request(signed(stranger), BODY, signer.jwks())
    unknown = PushSigner(pem(ec.generate_private_key(ec.SECP256R1())), key_ids="k9", issuer=ISSUER)
    with pytest.raises(SignatureError, match="no key with kid 'k9'"):
        verify_request(signed(unknown), BODY, signer.jwks())


def test_unsigned_and_hmac_tokens_are_refused(ec_pem: bytes) -> None:
    signer = PushSigner(ec_pem, issuer=ISSUER)
    claims = {"iat": int(time.time()), "jti": "x", "body_sha256": hashlib.sha256(BODY).hexdigest()}
    for token in (jwt.encode(claims, None, algorithm="none"), jwt.encode(claims, "secret-secret-secret-32bytes!!!!")):
        with pytest.raises(SignatureError, match="not accepted"):
            verify_request({SIGNATURE_HEADER: token}, BODY, signer.jwks())


def test_key_rotation_publishes_every_key_and_the_newest_signs(ec_pem: bytes, rsa_pem: bytes) -> None:
    old = PushSigner(ec_pem, key_ids="2026-01", issuer=ISSUER)
    rotated = PushSigner([ec_pem, rsa_pem], key_ids=["2026-01", "2026-06"], issuer=ISSUER)
    assert rotated.kid == "2026-06"
    assert [k["kid"] for k in rotated.jwks()["keys"]] == ["2026-06", "2026-01"]
    # A notification signed before the rotation still verifies against the new JWKS, and so does a new one.
    verify_request(signed(old), BODY, rotated.jwks())
    assert jwt.get_unverified_header(signed(rotated)[SIGNATURE_HEADER])["kid"] == "2026-06"
    verify_request(signed(rotated), BODY, rotated.jwks())
    # A retired key may be given as its public key only; the newest must be able to sign.
    public_only = jwt.PyJWK(old.jwks()["keys"][0]).key
    PushSigner([public_only, rsa_pem], issuer=ISSUER)
    with pytest.raises(ValueError, match="must be a private key"):
        PushSigner([rsa_pem, public_only], issuer=ISSUER)
    with pytest.raises(ValueError, match="2 push signing keys but 1 key ids"):
        PushSigner([ec_pem, rsa_pem], key_ids=["a"], issuer=ISSUER)


def test_verify_accepts_keys_in_several_forms(ec_pem: bytes) -> None:
    signer = PushSigner(ec_pem, issuer=ISSUER)
    headers = signed(signer)
    for keys in (signer.jwks(), json.dumps(signer.jwks()), signer.jwks()["keys"], [ec_pem], signer):
        verify_request(headers, BODY, keys)
    # ASGI-style header pairs work too.
    verify_request([(SIGNATURE_HEADER.lower().encode(), headers[SIGNATURE_HEADER].encode())], BODY, signer)


# --- WebhookReceiver over a real socket -------------------------------------------------------------------------


async def test_receiver_verifies_dedupes_and_refuses_replays(ec_pem: bytes) -> None:
    signer = PushSigner(ec_pem, issuer=ISSUER)
    got: list[StreamResponse] = []
    failing = {"times": 1}

    async def callback(event: StreamResponse) -> None:
        if failing["times"]:
            failing["times"] -= 1
            raise RuntimeError("receiver hiccup")
        got.append(event)

    receiver = WebhookReceiver(callback, keys=signer.jwks(), issuer=ISSUER, token="tok")
    async with serving(receiver) as url, httpx.AsyncClient(timeout=10) as http:

        async def post(headers: dict[str, str], body: bytes = BODY, token: str = "tok") -> httpx.Response:
            return await http.post(url + "/hook", content=body, headers={**headers, "X-A2A-Notification-Token": token})

        first = signed(signer, event_id="e-1")
        assert (await post(first)).status_code == 500  # the callback failed: not marked seen
        assert got == []
        retry = signed(signer, event_id="e-1")
        assert (await post(retry)).status_code == 200
        assert len(got) == 1
        assert got[0].status_update is not None
        assert got[0].status_update.task_id == "t-1"
        # The same token again is a replay; a fresh token for the same event is a duplicate: 200, no callback.
        assert (await post(retry)).status_code == 401
        assert (await post(signed(signer, event_id="e-1"))).status_code == 200
        assert len(got) == 1
        assert receiver.duplicates == 1
        # Credentials, signature, binding to the body and to the task, body shape.
        assert (await post(signed(signer, event_id="e-2"), token="wrong")).status_code == 401
        assert (await post({}, token="tok")).status_code == 401
        assert (await post(signed(signer, event_id="e-3"), body=BODY.replace(b"t-1", b"t-2"))).status_code == 401
        other_task = signed(signer, BODY.replace(b"t-1", b"t-2"), task_id="t-1", event_id="e-4")
        assert (await post(other_task, body=BODY.replace(b"t-1", b"t-2"))).status_code == 401
        not_an_event = b'{"hello":"world"}'
        assert (await post(signed(signer, not_an_event, event_id="e-5"), body=not_an_event)).status_code == 400
        assert (await http.get(url + "/hook")).status_code == 405
        assert len(got) == 1


async def test_receiver_fetches_the_jwks_and_refetches_for_a_new_kid(ec_pem: bytes, rsa_pem: bytes) -> None:
    keys = {"current": PushSigner(ec_pem, key_ids="a", issuer=ISSUER)}
    fetches = []

    async def jwks_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        fetches.append(scope["path"])
        body = json.dumps(keys["current"].jwks()).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    got: list[StreamResponse] = []
    async with serving(jwks_app) as keys_url:
        receiver = WebhookReceiver(got.append, jwks_url=keys_url + "/.well-known/jwks.json")
        async with serving(receiver) as url, httpx.AsyncClient(timeout=10) as http:
            reply = await http.post(url, content=BODY, headers=signed(keys["current"], event_id="e-1"))
            assert reply.status_code == 200
            assert len(fetches) == 1
            # Rotation on the sender's side: a new kid makes the receiver fetch the keys again.
            keys["current"] = PushSigner([ec_pem, rsa_pem], key_ids=["a", "b"], issuer=ISSUER)
            reply = await http.post(url, content=BODY, headers=signed(keys["current"], event_id="e-2"))
            assert reply.status_code == 200, reply.text
            assert len(fetches) == 2
            await asyncio.gather(
                *(http.post(url, content=BODY, headers=signed(keys["current"], event_id=f"e-{i}")) for i in range(3, 6))
            )
            assert len(fetches) == 2  # cached
    assert len(got) == 5
