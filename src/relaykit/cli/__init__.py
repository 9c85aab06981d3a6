"""The ``relaykit`` command line: ``serve`` an agent, call agents (``card``, ``send``, ``get``, ``list``, ``cancel``,
``subscribe``, ``chat``), look at one in a browser (``inspect``), run scale-out ``worker``s, and operate stores
(``db upgrade``, ``push status``).

    relaykit serve examples/echo.py --port 8000
    relaykit send http://localhost:8000 "hello"

A failure the user can fix (a mistake in the agent file, a bad option, a port in use, a missing extra) is one line on
stderr, ``relaykit COMMAND: error: …``, with exit code 2; ``--debug`` (or ``RELAYKIT_DEBUG=1``) shows the full
traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from relaykit.cli._client_cmds import add_client_parsers
from relaykit.cli._db_cmds import add_db_parser
from relaykit.cli._fail import CliError, debug_enabled, report
from relaykit.cli._inspect import add_inspect_parser
from relaykit.cli._push_cmds import add_push_parser
from relaykit.cli._serve import add_serve_parser
from relaykit.cli._worker import add_worker_parser

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="relaykit", description="A2A 1.0 agents: serve them, call them.")
    parser.add_argument("--version", action="version", version=f"relaykit {_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="on an error, show the full traceback (also: RELAYKIT_DEBUG=1)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    add_worker_parser(sub)
    add_client_parsers(sub)
    add_db_parser(sub)
    add_push_parser(sub)
    add_inspect_parser(sub)
    return parser


def _version() -> str:
    try:
        return version("relaykit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(version unknown: not installed)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``relaykit`` script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as exc:
        command = [args.command, getattr(args, f"{args.command}_command", None)]
        prog = " ".join(["relaykit", *filter(None, command)])
        return report(prog, exc, debug=debug_enabled(args.debug))
    return code


if __name__ == "__main__":
    sys.exit(main())
