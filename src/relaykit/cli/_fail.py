"""How the ``relaykit`` command reports a failure the user can fix: one line, an exit code, no traceback.

Invariants:

* A command raises ``CliError`` for anything the user can act on (a bad target, a mistake in their agent file, a
  missing extra, a port in use, a store that refuses); ``main`` prints it as ONE line,
  ``relaykit COMMAND: error: MESSAGE``, and exits with its code (2 unless said otherwise).
* A mistake in the user's own code is named by where it is in *their* files, ``agent.py:7: RuntimeError: boom``:
  never a relaykit frame, the standard library's or an installed package's.
* ``--debug`` (or ``RELAYKIT_DEBUG=1``) prints the full traceback instead, the original error included.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path

__all__ = ["EXIT_USAGE", "CliError", "debug_enabled", "describe", "report", "user_code_error"]

EXIT_USAGE = 2
_RELAYKIT_DIR = Path(__file__).resolve().parents[1]  # src/relaykit
# Frames in these directories are not the user's code: the standard library and installed packages.
_LIBRARY_DIRS = tuple(
    Path(p).resolve() for p in {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
)


class CliError(Exception):
    """A failure the user can fix; ``main`` prints the message as one line and exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(_one_line(message))
        self.code = code


def describe(exc: BaseException) -> str:
    """An exception's message for a ``CliError`` (its type's name when it has none)."""
    return str(exc).strip() or type(exc).__name__


def debug_enabled(debug_flag: bool) -> bool:
    """``--debug`` was given, or ``RELAYKIT_DEBUG`` is set to something other than ``""``/``0``."""
    return debug_flag or os.environ.get("RELAYKIT_DEBUG", "").strip() not in ("", "0")


def report(prog: str, error: CliError, *, debug: bool) -> int:
    """Print ``error`` (one line, or the whole traceback when debugging); returns its exit code."""
    if debug:
        traceback.print_exception(error)
    else:
        print(f"{prog}: error: {error}", file=sys.stderr, flush=True)
    return error.code


def _one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0].strip() + (" …" if len(lines) > 1 else "")


def _shown(filename: str, aliases: dict[Path, str]) -> str:
    """How a file is named in a message: as the user spelled the target, else relative to the working directory."""
    path = Path(filename).resolve()
    if path in aliases:
        return aliases[path]
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    path = Path(filename).resolve()
    return not any(path.is_relative_to(d) for d in (_RELAYKIT_DIR, *_LIBRARY_DIRS))


def user_code_error(exc: BaseException, target: Path | None = None, spelled: str | None = None) -> CliError:
    """``FILE:LINE: Type: message`` for an exception raised by the user's code, located in the user's own files.

    ``target`` (the agent file, ``spelled`` as the user typed it) names that file in their spelling, and is the
    fallback location when no frame of the traceback is the user's (e.g. an error raised inside a library)."""
    aliases = {target.resolve(): spelled or str(target)} if target is not None else {}
    kind = type(exc).__name__
    # A syntax error has no frame of its own: the parser says where it stopped.
    if isinstance(exc, SyntaxError) and exc.filename and not exc.filename.startswith("<"):
        where = f"{_shown(exc.filename, aliases)}:{exc.lineno}"
        return CliError(f"{where}: {kind}: {_one_line(exc.msg or '')}")
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if _is_user_file(f.filename)]
    if not user and target is not None:
        user = [f for f in frames if Path(f.filename).resolve() == target.resolve()]
    message = _one_line(str(exc))
    what = f"{kind}: {message}" if message else kind
    if not user:
        return CliError(f"{spelled or 'the agent'}: {what}")
    frame = user[-1]  # the innermost: where the user's code raised, or called into what raised
    return CliError(f"{_shown(frame.filename, aliases)}:{frame.lineno}: {what}")
