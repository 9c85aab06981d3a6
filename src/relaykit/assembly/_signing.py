"""``CardSigner``: signs the card an agent serves (``card_signing_key`` / ``relaykit serve --card-key``).

The card is signed as served: after its interfaces, capabilities and security are filled in, and again for each
base URL when the HTTP app names the address a request reached it at. Each signature covers the strict RFC 8785 form
and, where a2a-sdk's empties-dropped form differs (a security requirement without scopes is ``{}``), that form too,
so strict verifiers and a2a-sdk 1.3.0 both accept the card (``relaykit._jws``); a card that lists a 0.3 interface
also gets one over a2a-sdk 0.3's form of the card as a 0.3 client reads it, which a2a-sdk 0.3.26's verifier needs.
All of them are made when the card is built, once per base URL, never per request. The protected header names the key
(``kid``: given, or the RFC 7638 thumbprint) and where to fetch it (``jku``: the agent's ``/.well-known/jwks.json``).
"""

from __future__ import annotations

from typing import Any

from relaykit._card import AgentCard
from relaykit._jws import sign_card, sign_served_json
from relaykit.push._signing import _make_key

__all__ = ["CardSigner"]


class CardSigner:
    """Signs agent cards with one private key (EC P-256/384/521 or RSA)."""

    def __init__(self, key: Any, *, kid: str | None = None, jku: str | None = None) -> None:
        made = _make_key(key, kid)
        if made.private is None:
            raise ValueError("the card signing key must be a private key (PEM)")
        self.kid = made.kid
        self.algorithm = made.alg
        self.jwk: dict[str, Any] = made.jwk
        self.jku = jku
        self._private = made.private

    def sign(self, card: AgentCard) -> AgentCard:
        """``card`` with this key's signatures (strict form, plus a2a-sdk's forms, 1.x and 0.3, where they differ)."""
        return sign_card(card, self._private, algorithm=self.algorithm, kid=self.kid, jku=self.jku, sdk_form=True)

    def sign_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (the card JSON as served, when that is more than one model's rendering) with a signature over
        itself added to the ones ``sign`` made."""
        return sign_served_json(data, self._private, algorithm=self.algorithm, kid=self.kid, jku=self.jku)
