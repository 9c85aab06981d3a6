"""Argument types and options shared by the commands that make HTTP requests (the client commands, ``push status``),
so that each is spelled, parsed and refused the same way everywhere."""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = ["add_credentials", "parse_header", "request_headers", "tls_options"]


def parse_header(text: str) -> tuple[str, str]:
    """``'NAME: VALUE'`` or ``NAME:VALUE`` ⇒ ``(NAME, VALUE)``, spaces around either trimmed.

    >>> parse_header("X-Test: yes")
    ('X-Test', 'yes')
    """
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"a header is NAME:VALUE, not {text!r}")
    return name.strip(), value.strip()


def add_credentials(group: argparse._ActionsContainer) -> None:
    """``-H/--header NAME:VALUE`` (repeatable), ``--token`` (default: env ``RELAYKIT_TOKEN``) and the TLS files:
    ``--ca`` (trust this CA bundle instead of the system's), ``--cert`` / ``--key`` (a client certificate, for an
    agent that requires mutual TLS; ``--cert`` alone when one PEM file holds both), and ``--insecure-credentials``
    (credentials may go without TLS to a host that is not loopback: ``Client(allow_insecure_credentials=True)``)."""
    group.add_argument(
        "-H",
        "--header",
        action="append",
        type=parse_header,
        default=[],
        metavar="NAME:VALUE",
        help="send this HTTP header on every request (repeatable)",
    )
    group.add_argument("--token", default=None, help="bearer token (default: env RELAYKIT_TOKEN)")
    group.add_argument("--ca", default=None, metavar="FILE", help="trust this PEM CA bundle (HTTPS and gRPC over TLS)")
    group.add_argument("--cert", default=None, metavar="FILE", help="client certificate (PEM), for mutual TLS")
    group.add_argument("--key", default=None, metavar="FILE", help="the client certificate's private key (PEM)")
    group.add_argument(
        "--insecure-credentials",
        action="store_true",
        help="send --token / -H credentials even without TLS to a host that is not loopback (refused by default)",
    )


def tls_options(args: argparse.Namespace) -> dict[str, Any]:
    """``ca_certs`` / ``client_cert`` for ``relaykit.client.Client`` (and ``tls_verify``) from ``--ca/--cert/--key``.

    Raises ``argparse.ArgumentTypeError`` for ``--key`` without ``--cert`` or a file that cannot be read (a usage
    error, exit 2, rather than a TLS failure deep in a connection attempt).
    """
    if args.key and not args.cert:
        raise argparse.ArgumentTypeError("--key needs --cert (the certificate it belongs to)")
    for flag, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key)):
        if path is not None and not os.path.isfile(path):
            raise argparse.ArgumentTypeError(f"{flag}: no such file: {path}")
    options: dict[str, Any] = {}
    if args.ca:
        options["ca_certs"] = args.ca
    if args.cert:
        options["client_cert"] = (args.cert, args.key) if args.key else args.cert
    return options


def request_headers(args: argparse.Namespace) -> dict[str, str]:
    """The headers ``add_credentials``'s options ask for (``--token`` as ``Authorization: Bearer …``)."""
    headers = dict(args.header)
    token = args.token or os.environ.get("RELAYKIT_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
