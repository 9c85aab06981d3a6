"""Agent Card signatures: detached JWS (RFC 7515) over the card's RFC 8785 canonical form (digest §7.5).

Invariants:

* The payload is ``canonical_card(card)``: the card's ProtoJSON (unset optional fields omitted, REQUIRED fields kept
  even when empty, other defaults omitted), ``signatures`` removed, serialised by RFC 8785 (JCS: keys ordered by
  UTF-16 code units, ECMAScript number form, so ``1.0`` is ``1`` and ``1e-07`` is ``1e-7``, literal UTF-8). The JCS
  implementation is the ``rfc8785`` package; relaykit's tests run RFC 8785's published vectors against it.
* A signature is ``{"protected": b64url(header), "signature": b64url(sig)}``; the signing input is
  ``protected + "." + b64url(payload)`` and the payload is not stored (detached). The protected header carries
  ``alg``, ``kid``, ``typ: JOSE`` and, when given, ``jku``.
* Verification pins the algorithms (never ``none``, never HS* unless the caller names them) and passes when at least
  one signature verifies (several signatures: key rotation, or the two forms below).
* a2a-sdk's signer and verifier drop every empty string, list and object before canonicalising (digest §9 #18), so on
  a card with such values (``"securityRequirements":[{"schemes":{"bearer":{}}}]``, an empty ``capabilities``) its
  payload differs from the strict one. ``sign_card(..., sdk_form=True)`` adds a second signature over that form when it
  differs, so both a strict verifier and a2a-sdk accept the card; ``verify_card(..., sdk_form=True)`` accepts a
  signature over it (off by default: that form does not cover the empty values, which a forger could then add).
  @a2a-js/sdk also leaves ``securitySchemes`` out of its payload (a2a-js #663); relaykit does not copy that.
* a2a-sdk 0.3 signs and verifies another form again (``sdk03_canonical_card``): its 0.3 model's reading of the JSON
  (``relaykit._v03._card_model``: 0.3 members only, schema defaults and empties dropped) serialised by ``json.dumps``
  with sorted keys, not by RFC 8785. For a card that lists a 0.3 interface, ``sign_card(..., sdk_form=True)`` adds a
  signature over that form of the card as served to 0.3 clients (1.0 + 0.3 members); ``verify_card(...,
  sdk_form=True, received=...)`` accepts one over that form of the JSON received, only when those 0.3 members, read
  back, are the whole card up to empty values: the form leaves out every 1.0 member (``supportedInterfaces``, say),
  which must not be left for a forger to change.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from relaykit._card import AgentCard, AgentCardSignature
from relaykit._errors import A2AInvalidCardError
from relaykit._v03._card import card_in, card_merged, is_v03
from relaykit._v03._card_model import model_view

__all__ = [
    "canonical_card",
    "jwks_keys",
    "resolve_key",
    "sdk03_canonical_card",
    "sdk_canonical_card",
    "sign_card",
    "sign_served_json",
    "verify_card",
    "verify_sdk03_signature",
]

# Key for verify_card: a key (PEM, cryptography key, PyJWK, JWK dict), a JWKS document ({"keys": [...]}), a
# {kid: key} mapping, or a callable (kid, jku) -> key (None when it has no key for them).
KeySource = Any


def _jcs(data: Any) -> bytes:
    try:
        import rfc8785
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise ImportError("card signing needs rfc8785 and PyJWT: pip install 'relaykit[signing]'") from exc
    try:
        out: bytes = rfc8785.dumps(data)
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        raise A2AInvalidCardError(f"the agent card has no RFC 8785 canonical form: {exc}") from None
    return out


def _jwt() -> Any:
    try:
        import jwt
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise ImportError("card signing needs PyJWT: pip install 'relaykit[signing]'") from exc
    return jwt


def canonical_card(card: AgentCard) -> bytes:
    """The RFC 8785 (JCS) canonical form of a card without its signatures: the JWS payload (digest §7.5)."""
    data: dict[str, Any] = card.to_dict()
    data.pop("signatures", None)
    return _jcs(data)


def _drop_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: v for k, v in ((k, _drop_empty(v)) for k, v in value.items()) if v is not None}
        return kept or None
    if isinstance(value, list):
        items = [v for v in (_drop_empty(v) for v in value) if v is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def sdk_canonical_card(card: AgentCard) -> bytes:
    """The payload a2a-sdk signs and verifies: the canonical form with every empty string, list and object dropped."""
    data: dict[str, Any] = card.to_dict()
    data.pop("signatures", None)
    return _jcs(_drop_empty(data) or {})


def sdk03_canonical_card(data: Mapping[str, Any]) -> bytes | None:
    """The payload a2a-sdk 0.3 signs and verifies for the card JSON ``data`` (``None``: ``data`` is no 0.3 card)."""
    view = model_view(data, defaults=False)
    if view is None:
        return None
    # Not RFC 8785, on purpose: a2a-sdk 0.3.26 (``a2a.utils.helpers.canonicalize_agent_card``) serialises its model
    # dump with json.dumps(sort_keys=True, separators=(",", ":")): keys in code point order, non-ASCII as \u
    # escapes, floats as Python's repr (1e-07, 1.0). Its signature is over exactly those bytes, so a signature a
    # 0.3 SDK accepts, or one it made, can only be over them; that is why this form is an extra one, never the
    # only one (the strict RFC 8785 form stays the card's first signature).
    return json.dumps(_drop_empty(view) or {}, separators=(",", ":"), sort_keys=True).encode("ascii")


def _unsigned(card: AgentCard) -> Any:
    data = card.to_dict()
    data.pop("signatures", None)
    return _drop_empty(data)


def _sdk03_covering(card: AgentCard, received: Mapping[str, Any]) -> bytes | None:
    """a2a-sdk 0.3's payload for ``received``, when the 0.3 members it covers, read back, are ``card`` (up to empty
    values, which that payload leaves out); ``None`` otherwise (a 1.0 member outside it would go unchecked)."""
    covered = model_view(received, defaults=True)
    if covered is None:
        return None
    try:
        rebuilt = AgentCard.model_validate(card_in(_drop_empty(covered) or {}))
    except ValidationError:
        return None
    if _unsigned(rebuilt) != _unsigned(card):
        return None
    return sdk03_canonical_card(received)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _protected_header(protected: str) -> dict[str, Any]:
    try:
        header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    except (ValueError, binascii.Error):
        return {}
    return header if isinstance(header, dict) else {}


def sign_card(
    card: AgentCard,
    key: Any,
    *,
    algorithm: str = "ES256",
    kid: str,
    jku: str | None = None,
    header: Mapping[str, Any] | None = None,
    sdk_form: bool = False,
) -> AgentCard:
    """A copy of ``card`` with one more detached JWS signature over ``canonical_card(card)``.

    ``key``: the private key (PEM bytes/str, a cryptography key or a PyJWK). The protected header holds ``alg``,
    ``kid``, ``typ: JOSE`` and ``jku`` when given; ``header`` is the unprotected header. ``sdk_form=True`` also signs
    a2a-sdk's forms where they differ (see the module docstring): its 1.x form, and, for a card that lists a 0.3
    interface, a2a-sdk 0.3's form of the card as served to 0.3 clients, so both SDKs verify the card too.

    >>> # signed = sign_card(card, private_pem, kid="2026-11", jku="https://agent.example/jwks.json")
    """
    jwt = _jwt()
    protected: dict[str, Any] = {"alg": algorithm, "kid": kid, "typ": "JOSE"}
    if jku:
        protected["jku"] = jku
    payloads = [canonical_card(card)]
    if sdk_form:
        other = sdk_canonical_card(card)
        if other != payloads[0]:
            payloads.append(other)
        # What a 0.3 client reads is the served JSON (the 1.0 card with the 0.3 members merged in): signed here,
        # once per card built, not per request.
        merged = card_merged(card)
        v03 = sdk03_canonical_card(merged) if merged is not None else None
        if v03 is not None and v03 not in payloads:
            payloads.append(v03)
    signatures = list(card.signatures)
    for payload in payloads:
        token = jwt.api_jws.PyJWS().encode(payload, key, algorithm=algorithm, headers=protected)
        head, _, sig = token.split(".")
        signatures.append(AgentCardSignature(protected=head, signature=sig, header=dict(header) if header else None))
    return card.model_copy(update={"signatures": signatures})


def sign_served_json(
    data: Mapping[str, Any], key: Any, *, algorithm: str = "ES256", kid: str, jku: str | None = None
) -> dict[str, Any]:
    """``data`` (a card's JSON object as it will be served) with one more signature, over ``data`` itself.

    For JSON that is more than one card model's rendering (the 1.0 card with the 0.3 members merged in): a verifier
    that canonicalises what it received, with no model in between, needs a signature over exactly that; a verifier
    that reads it into a model finds its own among the others (``sign_card``'s)."""
    jwt = _jwt()
    protected: dict[str, Any] = {"alg": algorithm, "kid": kid, "typ": "JOSE"}
    if jku:
        protected["jku"] = jku
    out = dict(data)
    signatures = list(out.pop("signatures", None) or [])
    token = jwt.api_jws.PyJWS().encode(_jcs(out), key, algorithm=algorithm, headers=protected)
    head, _, sig = token.split(".")
    out["signatures"] = [*signatures, {"protected": head, "signature": sig}]
    return out


def jwks_keys(document: Any) -> dict[str, Any]:
    """The ``{kid: key}`` of a JWKS document (RFC 7517 §5); entries without a ``kid`` or that PyJWT cannot use are
    left out (a key this client cannot use verifies nothing).

    >>> jwks_keys({"keys": []})
    {}
    """
    jwt = _jwt()
    keys: dict[str, Any] = {}
    entries = document.get("keys") if isinstance(document, Mapping) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("kid"):
            try:
                keys[str(entry["kid"])] = jwt.PyJWK(entry).key
            except jwt.PyJWTError:
                continue
    return keys


def resolve_key(key: KeySource, kid: str | None, jku: str | None) -> Any:
    """The key ``key`` (any ``KeySource``) gives for a signature's ``kid`` / ``jku`` (``None``: none for them)."""
    if callable(key) and not hasattr(key, "public_bytes") and not hasattr(key, "verify"):
        return key(kid, jku)
    if isinstance(key, Mapping) and isinstance(key.get("keys"), list):
        key = jwks_keys(key)  # a JWKS document: its keys by kid
    if isinstance(key, Mapping) and "kty" not in key:
        return key.get(kid) if kid is not None else None
    if isinstance(key, Mapping):
        return _jwt().PyJWK(dict(key)).key
    return key


def verify_card(
    card: AgentCard,
    key: KeySource,
    *,
    algorithms: Sequence[str] = ("ES256", "RS256"),
    sdk_form: bool = False,
    received: Mapping[str, Any] | None = None,
) -> None:
    """Verify at least one of the card's signatures; raise ``A2AInvalidCardError`` otherwise.

    ``key``: the public key (PEM, cryptography key, PyJWK, or a JWK dict), a JWKS document (``{"keys": [...]}``),
    a ``{kid: key}`` mapping, or a callable
    ``(kid, jku) -> key | None`` (fetch from a ``jku`` you trust there, never from any ``jku`` a card names).
    ``algorithms`` are pinned. ``sdk_form=True`` also accepts a signature over a2a-sdk's empties-dropped form.
    ``received``: the card's JSON object as it came over the wire; a signature over exactly that JSON (minus
    ``signatures``) is accepted too (the 1.0 card with the 0.3 members merged in is signed that way as well).
    ``sdk_form=True`` with ``received`` also accepts a2a-sdk 0.3's form of that JSON (a card an a2a-sdk 0.3 agent
    signed), when its 0.3 members alone make ``card`` (see the module docstring).
    Signatures with an unencoded payload (RFC 7797 ``"b64": false``), made by relaykit before 0.2, verify too.

    >>> # verify_card(card, public_pem, algorithms=["ES256"])
    """
    if not card.signatures:
        raise A2AInvalidCardError(f"agent card {card.name!r} is not signed")
    payloads = [canonical_card(card)]
    if sdk_form:
        other = sdk_canonical_card(card)
        if other != payloads[0]:
            payloads.append(other)
    if received is not None:
        as_received = _jcs({k: v for k, v in received.items() if k != "signatures"})
        if as_received not in payloads:
            payloads.append(as_received)
        v03 = _sdk03_covering(card, received) if sdk_form else None
        if v03 is not None and v03 not in payloads:
            payloads.append(v03)
    errors: list[str] = []
    if _any_verifies(card, key, payloads, algorithms, errors):
        return
    hint = ""
    if sdk_form and received is None and any(is_v03(i.protocol_version) for i in card.supported_interfaces):
        hint = "; a card signed by a2a-sdk 0.3 verifies only with received= (its JSON as fetched)"
    raise A2AInvalidCardError(f"agent card {card.name!r}: no signature verifies ({'; '.join(errors)}{hint})")


def _any_verifies(
    card: AgentCard, key: KeySource, payloads: Sequence[bytes], algorithms: Sequence[str], errors: list[str]
) -> bool:
    """Whether one of the card's signatures verifies over one of ``payloads`` (why each did not: ``errors``)."""
    jwt = _jwt()
    for signature in card.signatures:
        header = _protected_header(signature.protected)
        kid = header.get("kid")
        jku = header.get("jku")
        try:
            resolved = resolve_key(key, kid if isinstance(kid, str) else None, jku if isinstance(jku, str) else None)
        except Exception as exc:
            errors.append(f"no key for kid {kid!r}: {exc}")
            continue
        if resolved is None:
            errors.append(f"no key for kid {kid!r}")
            continue
        for payload in payloads:
            try:
                if header.get("b64") is False:
                    jwt.api_jws.PyJWS().decode_complete(
                        f"{signature.protected}..{signature.signature}",
                        key=resolved,
                        algorithms=list(algorithms),
                        detached_payload=payload,
                    )
                else:
                    jwt.api_jws.PyJWS().decode_complete(
                        f"{signature.protected}.{_b64(payload)}.{signature.signature}",
                        key=resolved,
                        algorithms=list(algorithms),
                    )
                return True
            except jwt.PyJWTError as exc:
                errors.append(str(exc))
    return False


def verify_sdk03_signature(
    card: AgentCard, key: KeySource, received: Mapping[str, Any], *, algorithms: Sequence[str] = ("ES256", "RS256")
) -> None:
    """Verify one of the card's signatures over a2a-sdk 0.3's form of ``received`` alone (``A2AInvalidCardError``
    otherwise), without ``verify_card``'s question whether that form covers the whole card.

    For a report on each signature (the inspector: the 0.3 signature of a card relaykit serves covers its 0.3
    members, not its 1.0 ones), never for trusting a card: ``verify_card`` is that."""
    payload = sdk03_canonical_card(received)
    errors: list[str] = []
    if payload is None:
        errors.append("the JSON is no A2A 0.3 card")
    elif _any_verifies(card, key, [payload], algorithms, errors):
        return
    raise A2AInvalidCardError(f"agent card {card.name!r}: no signature over a2a-sdk 0.3's form ({'; '.join(errors)})")
