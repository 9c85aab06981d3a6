"""Authentication and authorization, one layer for every binding and protocol version.

Configure it once (``create_app(auth=…)``, ``assemble(auth=…)`` or the ``relaykit serve --auth-*`` / ``--api-keys``
/ ``--ssl-ca-certs`` options); JSON-RPC, HTTP+JSON, gRPC and the push status endpoint all enforce the same ``Auth``,
and the card's ``securitySchemes`` / ``securityRequirements`` are generated from it.

>>> from relaykit.auth import Auth, APIKeyAuthenticator, JWTAuthenticator
>>> auth = Auth(
...     JWTAuthenticator("https://idp.example/jwks.json", issuer="https://idp.example", audience="my-agent"),
...     APIKeyAuthenticator({"ci-bot": "sha256:" + "ab" * 32}),
... )
>>> # app = create_app(agent, auth=auth)

Write your own authenticator by implementing ``Authenticator`` (``authenticate(request) -> Principal | None``);
refuse operations per principal with a ``CallInterceptor`` (raise ``PermissionDeniedError``).
"""

from relaykit._principal import ANONYMOUS_PRINCIPAL, Principal
from relaykit.auth._apikey import APIKeyAuthenticator, load_api_keys
from relaykit.auth._gate import Auth, Authenticator, AuthRequest, CallInterceptor
from relaykit.auth._jwt import JWTAuthenticator
from relaykit.auth._mtls import MTLSAuthenticator, certificate_subject

__all__ = [
    "ANONYMOUS_PRINCIPAL",
    "APIKeyAuthenticator",
    "Auth",
    "AuthRequest",
    "Authenticator",
    "CallInterceptor",
    "JWTAuthenticator",
    "MTLSAuthenticator",
    "Principal",
    "certificate_subject",
    "load_api_keys",
]
