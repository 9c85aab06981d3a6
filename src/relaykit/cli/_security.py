"""``relaykit serve``'s security options: authentication, the extended card, card signing, TLS (CONTRACT, second round).

Any auth option (``--auth-jwks``, ``--auth-oidc``, ``--api-keys``, ``--ssl-ca-certs``) makes authentication required
for every operation except the public card, ``/healthz``, ``/readyz`` and ``/metrics``; the card's security then
describes exactly those schemes. ``--ssl-certfile``/``--ssl-keyfile`` serve TLS on the HTTP and the gRPC port;
``--ssl-ca-certs`` additionally requires a client certificate signed by that CA (the principal is its subject).
``--push-secrets-key`` encrypts push credentials in the store.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
from pathlib import Path
from typing import Any

from relaykit.cli._fail import CliError

__all__ = [
    "SERVING_ONLY",
    "add_push_secrets_option",
    "add_security_options",
    "grpc_credentials",
    "security_kwargs",
    "uvicorn_tls",
]


def add_security_options(p: argparse.ArgumentParser) -> None:
    """Add the auth, extended card, card signing and TLS options."""
    g = p.add_argument_group("security")
    g.add_argument("--auth-jwks", metavar="URL", help="accept Bearer JWTs verified against this JWKS")
    g.add_argument("--auth-oidc", metavar="URL", help="accept Bearer JWTs from this OpenID Connect provider")
    g.add_argument("--auth-issuer", metavar="ISS", help="required iss claim (with --auth-jwks / --auth-oidc)")
    g.add_argument("--auth-audience", metavar="AUD", help="required aud claim (with --auth-jwks / --auth-oidc)")
    g.add_argument(
        "--api-keys", metavar="FILE", help="accept X-API-Key; FILE lines 'PRINCIPAL KEY' / 'PRINCIPAL sha256:HEX'"
    )
    g.add_argument("--extended-card", metavar="FILE", help="JSON of the extended card (authenticated callers only)")
    g.add_argument("--card-key", metavar="FILE", help="PEM private key that signs the served card (JWS, RFC 8785)")
    g.add_argument("--card-kid", metavar="KID", help="kid of --card-key (default: its JWK thumbprint)")
    g.add_argument("--ssl-certfile", metavar="FILE", help="TLS certificate (PEM) for the HTTP and gRPC ports")
    g.add_argument("--ssl-keyfile", metavar="FILE", help="TLS private key (PEM)")
    g.add_argument("--ssl-ca-certs", metavar="FILE", help="require client certificates signed by this CA (mTLS)")
    add_push_secrets_option(g)


# The options above that only a serving process reads; ``relaykit worker`` (no binding) sets them to None.
SERVING_ONLY = (
    "auth_jwks",
    "auth_oidc",
    "auth_issuer",
    "auth_audience",
    "api_keys",
    "extended_card",
    "card_key",
    "card_kid",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_ca_certs",
)


def add_push_secrets_option(p: Any) -> None:
    """``--push-secrets-key``: serve and worker (a worker delivers push notifications, so it must read them)."""
    p.add_argument(
        "--push-secrets-key",
        metavar="FILE",
        help="encrypt push credentials at rest with the Fernet key(s) in FILE, one a line, the first sealing "
        "(env RELAYKIT_PUSH_SECRETS_KEY: one key)",
    )


def _given(args: argparse.Namespace, *names: str) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None)]


def tls_on(args: argparse.Namespace) -> bool:
    """Whether TLS serves the ports."""
    return bool(getattr(args, "ssl_certfile", None))


def check_security_options(args: argparse.Namespace) -> None:
    """Refuse combinations that cannot mean anything (CliError, exit 2)."""
    if args.auth_jwks and args.auth_oidc:
        raise CliError("--auth-jwks and --auth-oidc both read Authorization: Bearer; give one of them")
    if (args.auth_issuer or args.auth_audience) and not (args.auth_jwks or args.auth_oidc):
        raise CliError("--auth-issuer / --auth-audience need --auth-jwks or --auth-oidc")
    if args.ssl_keyfile and not args.ssl_certfile:
        raise CliError("--ssl-keyfile needs --ssl-certfile")
    if args.ssl_ca_certs and not args.ssl_certfile:
        raise CliError("--ssl-ca-certs (client certificates) needs TLS: give --ssl-certfile and --ssl-keyfile")
    if args.card_kid and not args.card_key:
        raise CliError("--card-kid needs --card-key")
    if args.extended_card and not (args.auth_jwks or args.auth_oidc or args.api_keys or args.ssl_ca_certs):
        # The extended card goes to authenticated callers only: with no way to authenticate it could never be
        # served, while the card would advertise it (spec §5.13: it uses a scheme the public card declares).
        raise CliError(
            "--extended-card is served to authenticated callers only: give an auth option too "
            "(--auth-jwks, --auth-oidc, --api-keys or --ssl-ca-certs)"
        )


def any_security_option(args: argparse.Namespace) -> list[str]:
    """The security options given (an app target configures its own, so these are refused for it)."""
    return _given(args, "auth_jwks", "auth_oidc", "api_keys", "ssl_ca_certs", "extended_card", "card_key")


def security_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``assemble``'s ``auth``, ``extended_card``, ``card_signing_key`` and ``card_key_id`` from the options."""
    from relaykit._card import AgentCard
    from relaykit.auth import APIKeyAuthenticator, Auth, JWTAuthenticator, MTLSAuthenticator

    check_security_options(args)
    authenticators: list[Any] = []
    if args.auth_jwks or args.auth_oidc:
        authenticators.append(
            JWTAuthenticator(
                args.auth_jwks, oidc_url=args.auth_oidc, issuer=args.auth_issuer, audience=args.auth_audience
            )
        )
    if args.api_keys:
        try:
            authenticators.append(APIKeyAuthenticator(args.api_keys))
        except (OSError, ValueError) as exc:
            raise CliError(f"--api-keys: {exc}") from None
    if args.ssl_ca_certs:
        authenticators.append(MTLSAuthenticator())
    out: dict[str, Any] = {}
    if authenticators:
        out["auth"] = Auth(*authenticators)
    if args.extended_card:
        try:
            out["extended_card"] = AgentCard.model_validate(json.loads(Path(args.extended_card).read_text()))
        except (OSError, ValueError) as exc:
            raise CliError(f"--extended-card: {exc}") from None
    if args.card_key:
        try:
            out["card_signing_key"] = Path(args.card_key).read_bytes()
        except OSError as exc:
            raise CliError(f"--card-key: {exc}") from None
        out["card_key_id"] = args.card_kid
    keys = _secrets_keys(args)
    if keys:
        out["push_secrets_key"] = keys
    return out


def _secrets_keys(args: argparse.Namespace) -> list[str]:
    if getattr(args, "push_secrets_key", None):
        try:
            lines = Path(args.push_secrets_key).read_text().splitlines()
        except OSError as exc:
            raise CliError(f"--push-secrets-key: {exc}") from None
        keys = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if not keys:
            raise CliError(f"--push-secrets-key: {args.push_secrets_key} holds no key")
        return keys
    env = os.environ.get("RELAYKIT_PUSH_SECRETS_KEY", "").strip()
    return [env] if env else []


def uvicorn_tls(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn.Config's TLS options (client certificates asked for and verified with ``--ssl-ca-certs``)."""
    if not tls_on(args):
        return {}
    out: dict[str, Any] = {"ssl_certfile": args.ssl_certfile, "ssl_keyfile": args.ssl_keyfile}
    if args.ssl_ca_certs:
        out["ssl_ca_certs"] = args.ssl_ca_certs
        # Optional at the handshake, required by the auth gate: a certificate that is sent must chain to the CA (or
        # the handshake fails), and one that is not leaves the request without that credential. So the public card,
        # /healthz, /readyz and /metrics stay reachable (a health probe has no client certificate), another scheme
        # given with it (--api-keys, a JWT) is enough on its own as the card says, and every operation without any
        # credential gets 401 + WWW-Authenticate like every other refusal (CONTRACT). gRPC cannot ask for an
        # optional certificate (Python gRPC's server credentials either require one or never ask), so there the
        # handshake requires it.
        out["ssl_cert_reqs"] = ssl.CERT_OPTIONAL
    return out


def with_client_certs(config: Any) -> None:
    """Make uvicorn pass each connection's verified client certificate to the app (mutual TLS)."""
    from relaykit.http._tls import client_cert_protocol

    config.load()
    config.http_protocol_class = client_cert_protocol(config.http_protocol_class)


def grpc_credentials(args: argparse.Namespace) -> Any:
    """The gRPC port's TLS credentials, or None."""
    if not tls_on(args):
        return None
    from relaykit.grpc import server_credentials

    return server_credentials(args.ssl_certfile, args.ssl_keyfile or args.ssl_certfile, args.ssl_ca_certs)
