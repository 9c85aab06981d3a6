"""``Client(card_verifier=…)`` checks the extended agent card (GetExtendedAgentCard) as it checks the public one, on
every binding: on the card's JSON as received (over gRPC, the ProtoJSON of the protobuf message received). A card
whose signature does not verify is refused with ``A2AInvalidCardError``, and the client keeps the card it had.

The agent signs its cards (``card_signing_key``); a tampered extended card comes from an extended-card provider
function, whose cards the server serves as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest
from auth.conftest import BINDINGS, T, pem, public_pem
from auth.whoami_agent import whoami
from cryptography.hazmat.primitives.asymmetric import ec

from relaykit._jws import sign_served_json
from relaykit.auth import APIKeyAuthenticator, Auth
from relaykit.client import APIKeyAuth, CardSignatureVerifier, sign_card
from relaykit.errors import A2AInvalidCardError
from relaykit.types import AgentCard, AgentSkill

EXTENDED = AgentCard(
    name="whoami (extended)",
    description="more for known callers",
    version="1.0.0",
    skills=[AgentSkill(id="secret", name="secret", description="only for callers with a key", tags=["x"])],
)


def _auth() -> Auth:
    return Auth(APIKeyAuthenticator({"alice": "alice-key"}), required=False)


class Recording:
    """A ``CardSignatureVerifier`` that also keeps every card it was given, with its JSON as received."""

    def __init__(self, key: ec.EllipticCurvePrivateKey) -> None:
        self.verifier = CardSignatureVerifier(public_pem(key), algorithms=["ES256"])
        self.seen: list[tuple[AgentCard, dict[str, Any]]] = []

    async def __call__(self, card: AgentCard, received: Mapping[str, Any]) -> None:
        self.seen.append((card, dict(received)))
        await self.verifier(card, received)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_signed_extended_card_is_verified_as_received(agent: Callable[..., Any], binding: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    served = await agent(whoami, auth=_auth(), extended_card=EXTENDED, card_signing_key=pem(key))
    verifier = Recording(key)
    async with asyncio.timeout(T):
        client = await served.client(binding, APIKeyAuth("alice-key"), card_verifier=verifier)
        card = await client.extended_card()
        async with httpx.AsyncClient(timeout=T) as http:  # the card as the server renders it in JSON
            headers = {"X-API-Key": "alice-key", "A2A-Version": "1.0"}
            sent = (await http.get(served.url + "/extendedAgentCard", headers=headers)).json()
    assert card.name == "whoami (extended)"
    assert client.card is card
    assert [seen.name for seen, _ in verifier.seen] == ["whoami", "whoami (extended)"]
    # What the verifier saw is the card's JSON: over gRPC the ProtoJSON of what arrived, the same as HTTP's.
    assert verifier.seen[1][1] == sent


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_tampered_extended_card_is_refused(agent: Callable[..., Any], binding: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    signed = sign_card(EXTENDED, pem(key), kid="card-key")
    extra = AgentSkill(id="admin", name="admin", description="added after signing", tags=["x"])
    tampered = signed.model_copy(update={"skills": [*signed.skills, extra]})

    async def provider(call: Any) -> AgentCard:
        return tampered

    served = await agent(whoami, auth=_auth(), extended_card=provider, card_signing_key=pem(key))
    async with asyncio.timeout(T):
        verifier = CardSignatureVerifier(public_pem(key), algorithms=["ES256"])
        client = await served.client(binding, APIKeyAuth("alice-key"), card_verifier=verifier)
        public = client.card
        with pytest.raises(A2AInvalidCardError, match="no signature verifies"):
            await client.extended_card()
        assert client.card is public  # the refused card is not used
        # The signed card as it was, served by the same provider, verifies: the refusal is the tampering's.
        tampered = signed
        assert (await client.extended_card()).skills == signed.skills
    assert public is not None
    assert public.name == "whoami"


async def test_a_card_signed_in_the_spec_form_verifies_over_grpc(agent: Callable[..., Any]) -> None:
    """The spec's canonical form keeps REQUIRED fields even when empty (a skill's ``"description": ""`` and
    ``"tags": []``, ``"supportedInterfaces": []``, digest §7.5); protobuf does not carry them, and the ProtoJSON of
    the message received used to leave them out, so such a card, signed by a conformant signer, was refused over
    gRPC. The client rebuilds that form from the message (REQUIRED fields kept), and the card verifies."""
    key = ec.generate_private_key(ec.SECP256R1())
    spec_form = {
        "name": "whoami (extended)",
        "description": "more for known callers",
        "supportedInterfaces": [],
        "version": "1.0.0",
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "plain", "name": "plain", "description": "", "tags": []}],
    }
    signed = AgentCard.model_validate(sign_served_json(spec_form, pem(key), kid="card-key"))

    async def provider(call: Any) -> AgentCard:
        return signed  # served as it is: it is signed already

    served = await agent(whoami, auth=_auth(), extended_card=provider, card_signing_key=pem(key))
    verifier = Recording(key)
    async with asyncio.timeout(T):
        client = await served.client("GRPC", APIKeyAuth("alice-key"), card_verifier=verifier)
        card = await client.extended_card()
    assert card.skills == signed.skills
    received = dict(verifier.seen[1][1])
    received.pop("signatures")
    assert received == spec_form
