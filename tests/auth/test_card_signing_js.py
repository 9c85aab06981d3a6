"""Card signatures verified both ways against @a2a-js/sdk 1.3.0 (Node), on the same cards as the a2a-sdk tests.

Needs ``node``; the SDK is installed from npm once and cached (``tests/support/jssdk.py``; ``A2A_JS_SDK_DIR`` names a
ready directory instead). Without node or the registry the tests skip with the reason, except under ``CI=true``,
where they fail.

a2a-js #663 reports that the JS SDK leaves ``securitySchemes`` out of its payload. Measured against @a2a-js/sdk 1.3.0
(``canonicalizeAgentCard``), it keeps them, and drops every empty value as a2a-sdk does (an ``mtlsSecurityScheme`` is
``{}``, so it vanishes): relaykit's second, empties-dropped signature is what it verifies, and ``sdk_form=True`` is what
relaykit needs to verify its signatures. relaykit copies neither behaviour in its strict form.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jwt
import pytest
from auth.conftest import public_pem
from auth.test_card_signing import CARDS
from cryptography.hazmat.primitives.asymmetric import ec
from support.jssdk import JsSdkUnavailable, js_sdk_dir
from support.sdk03 import in_ci

from relaykit.client import parse_card, sign_card, verify_card
from relaykit.errors import A2AInvalidCardError

SCRIPT = Path(__file__).parent / "js" / "card_signature.cjs"
NODE = shutil.which("node")

pytestmark = [pytest.mark.interop, pytest.mark.usefixtures("js_sdk")]

_sdk: list[Path] = []


@pytest.fixture(scope="module")
def js_sdk() -> Path:
    """The @a2a-js/sdk directory (made and cached on first use); skipped locally, failed under CI, when unavailable."""
    if not _sdk:
        try:
            _sdk.append(js_sdk_dir())
        except JsSdkUnavailable as exc:
            if in_ci():
                pytest.fail(f"CI=true: @a2a-js/sdk 1.3.0 is needed: {exc}", pytrace=False)
            pytest.skip(f"@a2a-js/sdk 1.3.0 unavailable: {exc}")
    return _sdk[0]


def _node(mode: str, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run(
        [NODE, str(SCRIPT), mode],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "A2A_JS_SDK_DIR": str(_sdk[0])},
        check=False,
    )


def _keys() -> tuple[Any, dict[str, Any]]:
    private = ec.generate_private_key(ec.SECP256R1())
    return private, jwt.algorithms.ECAlgorithm.to_jwk(private, as_dict=True)


@pytest.mark.parametrize("name", list(CARDS))
def test_relaykit_signs_a2a_js_verifies(name: str) -> None:
    private, jwk = _keys()
    signed = sign_card(CARDS[name], private, kid="k1", sdk_form=True)
    public = {k: v for k, v in jwk.items() if k != "d"}
    result = _node("verify", {"card": json.loads(signed.to_json()), "jwk": public, "alg": "ES256"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "verified"


@pytest.mark.parametrize("name", list(CARDS))
def test_a2a_js_signs_relaykit_verifies(name: str) -> None:
    private, jwk = _keys()
    result = _node("sign", {"card": json.loads(CARDS[name].to_json()), "jwk": jwk, "alg": "ES256", "kid": "k1"})
    assert result.returncode == 0, result.stderr
    card = parse_card(result.stdout)
    verify_card(card, public_pem(private), sdk_form=True)
    tampered = card.model_copy(update={"description": "changed"})
    with pytest.raises(A2AInvalidCardError):
        verify_card(tampered, public_pem(private), sdk_form=True)
