"""Argument types and options shared by the commands that make HTTP requests (the client commands, ``push status``),
so that each is spelled, parsed and refused the same way everywhere."""

from __future__ import annotations

import argparse
import os

__all__ = ["add_credentials", "parse_header", "request_headers"]


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
    """``-H/--header NAME:VALUE`` (repeatable) and ``--token`` (default: env ``RELAYKIT_TOKEN``)."""
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


def request_headers(args: argparse.Namespace) -> dict[str, str]:
    """The headers ``add_credentials``'s options ask for (``--token`` as ``Authorization: Bearer …``)."""
    headers = dict(args.header)
    token = args.token or os.environ.get("RELAYKIT_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
