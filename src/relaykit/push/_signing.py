"""Signed webhooks: a JWT per delivery attempt in ``X-A2A-Signature``, public keys at ``/.well-known/jwks.json``.

The token (ES256 for P-256 keys, ES384 for P-384, RS256 for RSA; header ``kid``, ``typ: JWT``) carries:

* ``iss``: the agent's public URL; ``iat`` / ``exp`` (``iat`` + ``ttl``, default 5 minutes);
* ``jti``: unique per delivery attempt (a receiver rejects a ``jti`` it has seen: a replay);
* ``eventId``: the notification's id, the same on every attempt and after a restart (a receiver that has seen it
  acknowledges without processing it again: a duplicate);
* ``taskId``; ``body_sha256``: the lowercase hex SHA-256 of the exact body bytes.

``Authorization`` stays the config's own credentials, so a receiver can check both. Rotation: give several keys,
oldest first; every one is published in the JWKS (receivers keep accepting the older ones), the last (newest) signs.
Retired keys may be given as public keys only. Needs PyJWT with cryptography (``pip install 'relaykit[signing]'``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SIGNATURE_HEADER", "PushSigner", "SignatureError", "verify_request"]

SIGNATURE_HEADER = "X-A2A-Signature"
ALGORITHMS = ("ES256", "ES384", "ES512", "RS256")


class SignatureError(ValueError):
    """A webhook request's signature is missing, invalid, stale, replayed or does not match its body."""


def _jwt() -> Any:
    try:
        import jwt
    except ImportError as exc:  # pragma: no cover - PyJWT is in the "signing" extra
        raise RuntimeError("signed webhooks need PyJWT with cryptography: pip install 'relaykit[signing]'") from exc
    return jwt


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _load_key(key: Any) -> Any:
    """A cryptography key object from a PEM (private or public) or a key object."""
    if isinstance(key, str):
        key = key.encode()
    if isinstance(key, bytes):
        from cryptography.hazmat.primitives import serialization

        try:
            return serialization.load_pem_private_key(key, password=None)
        except (ValueError, TypeError):
            try:
                return serialization.load_pem_public_key(key)
            except ValueError as exc:
                raise ValueError("push signing key is neither a PEM private key nor a PEM public key") from exc
    return key


def _algorithm(public: Any) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(public, rsa.RSAPublicKey):
        return "RS256"
    if isinstance(public, ec.EllipticCurvePublicKey):
        names = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
        alg = names.get(public.curve.name)
        if alg is not None:
            return alg
        raise ValueError(f"push signing key: unsupported curve {public.curve.name} (use P-256, P-384 or P-521)")
    raise ValueError(f"push signing key: unsupported key type {type(public).__name__} (use an EC or RSA key)")


@dataclass(frozen=True, slots=True)
class _Key:
    kid: str
    alg: str
    jwk: dict[str, Any]
    private: Any  # None for a retired key given as a public key


def _thumbprint(jwk: Mapping[str, Any]) -> str:
    # RFC 7638: the required members, sorted, no whitespace.
    members = ("crv", "kty", "x", "y") if jwk["kty"] == "EC" else ("e", "kty", "n")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return _b64url(hashlib.sha256(canonical.encode()).digest())


def _make_key(key: Any, kid: str | None) -> _Key:
    jwt = _jwt()
    obj = _load_key(key)
    public = obj.public_key() if hasattr(obj, "private_bytes") else obj
    private = obj if hasattr(obj, "private_bytes") else None
    alg = _algorithm(public)
    algo = jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
    jwk = dict(algo.to_jwk(public, as_dict=True))
    kid = kid or _thumbprint(jwk)
    jwk.update({"kid": kid, "alg": alg, "use": "sig"})
    return _Key(kid, alg, jwk, private)


class PushSigner:
    """Signs webhook deliveries and publishes its public keys.

    ``keys``: one key or several (oldest first; the last signs), each a PEM (str/bytes) or a cryptography key
    object; ``key_ids``: one ``kid`` (for the signing key) or one per key (``None`` entries: RFC 7638 thumbprint).

    >>> # signer = PushSigner(pem, key_ids="2026-11", issuer="https://agent.example.com")
    """

    def __init__(
        self,
        keys: Any,
        *,
        key_ids: str | Sequence[str | None] | None = None,
        issuer: str,
        ttl: float = 300.0,
    ) -> None:
        items = list(keys) if isinstance(keys, list | tuple) else [keys]
        if not items:
            raise ValueError("push signing needs at least one key")
        if key_ids is None or isinstance(key_ids, str):
            ids: list[str | None] = [*([None] * (len(items) - 1)), key_ids]
        else:
            ids = list(key_ids)
            if len(ids) != len(items):
                raise ValueError(f"{len(items)} push signing keys but {len(ids)} key ids")
        self._keys = [_make_key(key, kid) for key, kid in zip(items, ids, strict=True)]
        if len({k.kid for k in self._keys}) != len(self._keys):
            raise ValueError("push signing key ids must be unique")
        self._signing = self._keys[-1]
        if self._signing.private is None:
            raise ValueError("the newest (last) push signing key must be a private key")
        self.issuer = issuer.rstrip("/") or issuer
        self.ttl = ttl

    @property
    def kid(self) -> str:
        """The ``kid`` of the signing key."""
        return self._signing.kid

    @property
    def algorithm(self) -> str:
        """The JWS algorithm of the signing key."""
        return self._signing.alg

    def jwks(self) -> dict[str, Any]:
        """The JWK Set of every key (newest first), public parts only."""
        return {"keys": [dict(k.jwk) for k in reversed(self._keys)]}

    def sign(self, *, body: bytes, task_id: str, event_id: str) -> str:
        """A fresh token for one delivery attempt of ``body``."""
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "iat": now,
            "exp": now + int(self.ttl),
            "jti": uuid.uuid4().hex,
            "eventId": event_id,
            "taskId": task_id,
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }
        token = _jwt().encode(
            claims, self._signing.private, algorithm=self._signing.alg, headers={"kid": self.kid, "typ": "JWT"}
        )
        return str(token)


def header_value(headers: Any, name: str) -> str | None:
    """A header from a mapping (any case) or ASGI ``[(bytes, bytes)]`` pairs, as text."""
    wanted = name.lower()
    items: Iterable[tuple[Any, Any]] = headers.items() if hasattr(headers, "items") else headers
    for key, value in items:
        key_text = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        if key_text.lower() == wanted:
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


def public_keys(jwks_or_keys: Any) -> list[tuple[str | None, str | None, Any]]:
    """``(kid, alg, key object)`` for a JWKS (dict or JSON), a list of JWKs / PEMs / key objects, or a signer."""
    jwt = _jwt()
    source = jwks_or_keys
    if hasattr(source, "jwks") and callable(source.jwks):
        source = source.jwks()
    if isinstance(source, bytes):
        source = source.decode()
    if isinstance(source, str) and not source.lstrip().startswith("-----"):
        source = json.loads(source)
    if isinstance(source, Mapping) and "keys" in source:
        source = source["keys"]
    if not isinstance(source, list | tuple):
        source = [source]
    out: list[tuple[str | None, str | None, Any]] = []
    for item in source:
        if isinstance(item, Mapping):
            jwk = jwt.PyJWK(dict(item))
            out.append((jwk.key_id, item.get("alg") or jwk.algorithm_name, jwk.key))
        else:
            obj = _load_key(item)
            public = obj.public_key() if hasattr(obj, "private_bytes") else obj
            out.append((None, _algorithm(public), public))
    return out


def verify_request(
    headers: Any,
    body: bytes,
    jwks_or_keys: Any,
    *,
    issuer: str | None = None,
    max_age: float = 300.0,
    leeway: float = 5.0,
    algorithms: Sequence[str] = ALGORITHMS,
    header: str = SIGNATURE_HEADER,
) -> dict[str, Any]:
    """Verify a signed webhook request; returns its claims, raises ``SignatureError``.

    Checks the signature against the keys (by ``kid`` when the token names one), the algorithm against
    ``algorithms`` (never ``none`` or HMAC), ``iss`` when ``issuer`` is given, ``iat`` no older than ``max_age``
    seconds and not in the future, ``exp``, and that ``body_sha256`` is the hash of ``body``. Replay (``jti``) and
    duplicate (``eventId``) detection need memory across requests: ``WebhookReceiver`` does both.

    >>> # claims = verify_request(request.headers, await request.body(), jwks, issuer="https://agent.example.com")
    """
    jwt = _jwt()
    token = header_value(headers, header)
    if not token:
        raise SignatureError(f"missing {header} header")
    try:
        unverified = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise SignatureError(f"malformed {header} token: {exc}") from None
    alg = unverified.get("alg")
    if alg not in algorithms:
        raise SignatureError(f"{header} algorithm {alg!r} is not accepted (accepted: {', '.join(algorithms)})")
    kid = unverified.get("kid")
    try:
        keys = public_keys(jwks_or_keys)
    except (ValueError, jwt.PyJWTError) as exc:
        raise SignatureError(f"no usable verification keys: {exc}") from None
    candidates = [k for k in keys if (kid is None or k[0] is None or k[0] == kid) and (k[1] in (None, alg))]
    if not candidates:
        raise SignatureError(f"no key with kid {kid!r} for algorithm {alg}")
    claims: dict[str, Any] | None = None
    error: Exception | None = None
    for _kid, _alg, key in candidates:
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                issuer=issuer,
                leeway=leeway,
                options={"require": ["iat", "jti", "body_sha256"], "verify_aud": False},
            )
            break
        except jwt.InvalidSignatureError as exc:
            error = exc
        except jwt.PyJWTError as exc:
            raise SignatureError(f"{header} rejected: {exc}") from None
    if claims is None:
        raise SignatureError(f"{header} signature does not verify: {error}")
    now = time.time()
    iat = claims["iat"]
    if not isinstance(iat, int | float):
        raise SignatureError("iat is not a number")
    if iat > now + leeway:
        raise SignatureError("the token is issued in the future")
    if now - iat > max_age + leeway:
        raise SignatureError(f"the token is stale (issued {int(now - iat)} s ago, max age {int(max_age)} s)")
    digest = hashlib.sha256(body).digest()
    expected = str(claims["body_sha256"])
    if not (hmac.compare_digest(expected.lower(), digest.hex()) or hmac.compare_digest(expected, _b64url(digest))):
        raise SignatureError("body_sha256 does not match the request body")
    return claims
