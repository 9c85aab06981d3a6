"""Signed webhooks verified with PyJWT alone: nothing from relaykit runs on the receiving side.

``relaykit serve --push-signing-key key.pem`` posts to a plain recorder process; this test fetches the agent's
``/.well-known/jwks.json`` over HTTP and checks every recorded ``X-A2A-Signature`` with ``jwt.decode``.
(This module deliberately imports nothing from relaykit.)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from push_helpers import Recorder, Server, pem

ALGORITHMS = ["ES256", "RS256"]


def test_every_delivery_verifies_with_pyjwt_against_the_served_jwks(recorder: Recorder, tmp_path: Path) -> None:
    old_key, new_key = tmp_path / "old.pem", tmp_path / "new.pem"
    old_key.write_bytes(pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    new_key.write_bytes(pem(ec.generate_private_key(ec.SECP256R1())))
    server = Server(
        "examples/stream.py",
        "--push-allow",
        "127.0.0.1",
        "--push-signing-key",
        str(old_key),
        "--push-signing-key",
        str(new_key),
        log_dir=tmp_path,
    )
    try:
        push = {"url": recorder.url("/signed"), "authentication": {"scheme": "Bearer", "credentials": "cfg-secret"}}
        task_id = server.send("3", push=push).json()["task"]["id"]
        records = recorder.wait_accepted("/signed", 5)
        jwks_reply = httpx.get(f"{server.base}/.well-known/jwks.json", timeout=10)
        issuer = server.base
    finally:
        server.stop()
    assert jwks_reply.status_code == 200
    assert jwks_reply.headers["content-type"].startswith("application/json")
    jwks = jwt.PyJWKSet.from_dict(jwks_reply.json())
    assert [k.key_type for k in jwks.keys] == ["EC", "RSA"]  # both keys published, newest first
    newest_kid = jwks.keys[0].key_id
    jtis = set()
    for record in records:
        token = record["headers"]["x-a2a-signature"]
        header = jwt.get_unverified_header(token)
        assert header["kid"] == newest_kid  # the newest key signs
        key = jwks[header["kid"]]
        claims = jwt.decode(
            token, key=key, algorithms=ALGORITHMS, issuer=issuer, options={"require": ["iat", "exp", "jti"]}
        )
        assert claims["body_sha256"] == hashlib.sha256(record["body"]).hexdigest()
        assert claims["taskId"] == task_id
        assert claims["eventId"] == record["headers"]["x-relaykit-event-id"]
        jtis.add(claims["jti"])
        # The config's own credentials are untouched by signing.
        assert record["headers"]["authorization"] == "Bearer cfg-secret"
    assert len(jtis) == len(records)
    # A body changed in transit no longer matches its signed hash.
    tampered = records[0]["body"] + b" "
    claims = jwt.decode(records[0]["headers"]["x-a2a-signature"], key=jwks[newest_kid], algorithms=ALGORITHMS)
    assert claims["body_sha256"] != hashlib.sha256(tampered).hexdigest()
