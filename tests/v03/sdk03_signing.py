"""Agent Card signatures with the official a2a-sdk 0.3.26's own signer and verifier (``a2a.utils.signing``); prints a
JSON report as its last line.

Runs in the a2a-sdk 0.3.26 virtual environment the tests create (``tests/v03/conftest.py``), never in relaykit's:

    python sdk03_signing.py served URL          # A2ACardResolver + its signature_verifier, key from the card's jku
    python sdk03_signing.py verify CARDS PUB    # each card JSON object in the file CARDS, public key PEM file PUB
    python sdk03_signing.py sign CARDS KEY KID  # each 0.3 card in CARDS signed with private key PEM file KEY

Every verification is also tried on the card with its name changed, which must fail: a verifier that passes
anything proves nothing. Every network wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import httpx
import jwt
from a2a.client import A2ACardResolver
from a2a.types import AgentCard
from a2a.utils.signing import create_agent_card_signer, create_signature_verifier

STEP = 20.0  # seconds any one network step may take


def _outcome(verify: Any, card: AgentCard) -> dict[str, Any]:
    """Whether ``verify`` accepts ``card``, and whether it refuses the card with its name changed."""
    out: dict[str, Any] = {}
    try:
        verify(card)
        out["ok"] = True
    except Exception as exc:
        out["ok"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"
    tampered = card.model_copy(update={"name": card.name + " (changed)"})
    try:
        verify(tampered)
        out["tampered_refused"] = False
    except Exception:
        out["tampered_refused"] = True
    return out


async def served(url: str) -> dict[str, Any]:
    base = url.rstrip("/")

    def keys(kid: str | None, jku: str | None) -> Any:
        # A key from the jku the card names, and only under the agent's own URL (never wherever a card points).
        if not jku or not jku.startswith(base + "/"):
            raise ValueError(f"jku {jku!r} is not under {base}")
        document = httpx.get(jku, timeout=STEP).json()
        for entry in document["keys"]:
            if entry.get("kid") == kid:
                return jwt.PyJWK(entry).key
        raise ValueError(f"no key {kid!r} at {jku}")

    verify = create_signature_verifier(keys, ["ES256"])
    async with httpx.AsyncClient(timeout=STEP) as http:
        resolver = A2ACardResolver(http, base)
        card = await asyncio.wait_for(resolver.get_agent_card(), STEP)
        report: dict[str, Any] = {"signatures": len(card.signatures or []), **_outcome(verify, card)}
        try:
            # The SDK's own hook: the resolver refuses a card its verifier refuses.
            await asyncio.wait_for(resolver.get_agent_card(signature_verifier=verify), STEP)
            report["resolver_verified"] = True
        except Exception as exc:
            report["resolver_verified"] = False
            report["resolver_error"] = f"{type(exc).__name__}: {exc}"
    return report


def verify_file(cards: Path, public: Path) -> list[dict[str, Any]]:
    key = public.read_bytes()
    verify = create_signature_verifier(lambda kid, jku: key, ["ES256"])
    return [_outcome(verify, AgentCard.model_validate(data)) for data in json.loads(cards.read_text())]


def sign_file(cards: Path, private: Path, kid: str) -> list[dict[str, Any]]:
    header: Any = {"alg": "ES256", "kid": kid, "typ": "JOSE"}
    sign = create_agent_card_signer(private.read_bytes(), header)
    out = []
    for data in json.loads(cards.read_text()):
        card = sign(AgentCard.model_validate(data))
        # As an a2a-sdk 0.3 agent serves its card (its card endpoint dumps exclude_none, by alias).
        out.append(card.model_dump(mode="json", exclude_none=True, by_alias=True))
    return out


def main() -> None:
    command, *args = sys.argv[1:]
    result: Any
    try:
        if command == "served":
            result = asyncio.run(served(args[0]))
        elif command == "verify":
            result = verify_file(Path(args[0]), Path(args[1]))
        elif command == "sign":
            result = sign_file(Path(args[0]), Path(args[1]), args[2])
        else:
            raise SystemExit(f"unknown command {command!r}")
    except Exception:
        result = {"crash": traceback.format_exc()[-3000:]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
