"""The ``relaykit`` command line: ``serve`` an agent (more commands arrive with the client).

relaykit serve examples/echo.py --port 8000
"""

from __future__ import annotations

import argparse
import sys

from relaykit.cli._serve import add_serve_parser

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="relaykit", description="A2A 1.0 agents: serve them, call them.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``relaykit`` script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
