"""The A2A client: card discovery, transport negotiation, resumable streams, typed errors, human-in-the-loop.

>>> from relaykit.client import Client
>>> async def main():
...     async with Client("http://localhost:8000") as client:
...         task = await client.send("hello")
...         async for event in client.stream("stream me"):
...             print(event)

Human in the loop: ``Client(on_input_required=…, on_auth_required=…)`` lets ``ask()`` answer a question and resolve
an in-task authorization (a reply, ``Credentials`` to send, or a wait while the credential arrives out of band).

Trust: ``Client(card_verifier=CardSignatureVerifier(...))`` refuses an agent card, public or extended, whose
signature does not verify;
credentials are never sent without TLS to a host that is not loopback unless ``allow_insecure_credentials=True``;
URLs in error messages have their userinfo and query values masked.
"""

from relaykit.client._auth import APIKeyAuth, BearerAuth, Interceptor, OAuth2ClientCredentials, TraceContext
from relaykit.client._card import (
    CardResolver,
    canonical_card,
    choose_interface,
    parse_card,
    sign_card,
    verify_card,
)
from relaykit.client._card_trust import CardSignatureVerifier, CardVerifier, card_keys
from relaykit.client._client import Client
from relaykit.client._interrupts import Credentials
from relaykit.client._policies import ResumePolicy, RetryPolicy
from relaykit.client._tls import tls_verify
from relaykit.client._transport import ClientTransport, JSONRPCTransport, RESTTransport

__all__ = [
    "APIKeyAuth",
    "BearerAuth",
    "CardResolver",
    "CardSignatureVerifier",
    "CardVerifier",
    "Client",
    "ClientTransport",
    "Credentials",
    "Interceptor",
    "JSONRPCTransport",
    "OAuth2ClientCredentials",
    "RESTTransport",
    "ResumePolicy",
    "RetryPolicy",
    "TraceContext",
    "canonical_card",
    "card_keys",
    "choose_interface",
    "parse_card",
    "sign_card",
    "tls_verify",
    "verify_card",
]
