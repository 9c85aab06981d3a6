"""Client-supplied values that are not A2A models, validated before anything uses them.

Invariants (every binding goes through these, so no client input becomes a 500 or a stalled event loop):

* An event id (``Last-Event-ID`` header, ``lastEventId`` query parameter, gRPC ``last-event-id`` metadata) is 1 to
  ``MAX_EVENT_ID_DIGITS`` ASCII digits with a value that fits the stores' BIGINT; anything else (``"\\xb2"``, which
  ``str.isdigit`` accepts, a 4,300-digit number, a negative one) is ``InvalidParamsError``.
* A request body is strict JSON (RFC 8259): ``NaN``, ``Infinity`` and ``-Infinity`` are ``JSONParseError`` rather
  than floats that would be stored as ``null``, and so is a ``\\u`` escape of a lone UTF-16 surrogate (no store can
  encode that string).
* Every number in a request body fits a double, ProtoJSON's only number (``google.protobuf.Value``): ``1e400``,
  which both parsers read as infinity (stored as ``null``), and an integer past ±1.8e308 (which no gRPC reader could
  be sent) are ``JSONParseError`` too. Neither parser refuses them: the large-body parser's number hooks do, and a
  small body's decoded numbers are looked at when it names a key of free JSON (``metadata``, ``data``), where alone
  a request keeps numbers that no typed field bounds.
* Arrays and objects nest at most ``MAX_JSON_DEPTH`` deep in a request body (the outermost counts one), whatever its
  size; deeper is ``JSONParseError`` (RFC 8259 §9 lets a parser limit nesting). Whatever a request carries is
  stored a few levels deeper at most (a data part in a task's history, the task in a stream event), under what
  every reader reads back (jiter, the stores' reader: 200 levels; a gRPC client's protobuf parser: about 33 levels
  of JSON in metadata): a task can never be written that cannot be read, on any binding.
* A body over ``OFF_LOOP_BYTES`` is parsed in a worker thread, and holds at most ``MAX_JSON_VALUES`` entries of
  arrays and objects (array items and object members; an empty array or object counts one), else
  ``PayloadTooLargeError``. They are counted before the body is parsed, because the parser (C) holds the GIL for
  the whole body: 3 million array items in 9 MB would hold the event loop while parsed, and again while validated.
  Counting is three ``bytes.count`` (C, a few milliseconds for 10 MB) when the whole body has few enough commas and
  brackets; otherwise (commas in a long text, or too many entries) a scan that skips strings, in Python, so the
  thread yields the GIL at the interpreter's switch interval, stopping at the first entry too many. Smaller bodies
  keep the fast path: one of at most ``OFF_LOOP_BYTES`` holds at most ~130k entries (``0,`` each).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import pydantic_core

from relaykit._errors import InvalidParamsError, JSONParseError, PayloadTooLargeError

__all__ = [
    "MAX_EVENT_ID_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "OFF_LOOP_BYTES",
    "decode_json",
    "decode_small_json",
    "parse_event_id",
]

MAX_EVENT_ID_DIGITS = 19  # 2**63 - 1 has 19 digits: the stores keep event ids as BIGINT
_MAX_EVENT_ID = 2**63 - 1
OFF_LOOP_BYTES = 256 * 1024  # a body this small parses in a few milliseconds: not worth a thread hop
# Entries of arrays and objects per request body over OFF_LOOP_BYTES: a 1,000-part message holds a few thousand.
# The gRPC bindings count protobuf fields against the same number (grpc._bounds.MAX_FIELDS).
MAX_JSON_VALUES = 100_000
# 32, not more: every binding must read back whatever was stored, and gRPC's protobuf reader, which spends about three
# of its 100 recursion levels per level of JSON in a Struct (metadata, data parts), gives up on a stored task whose
# message metadata nests more than about 33 levels (measured: 32 read back, 40 refused). A message's metadata sits
# 4 levels down in a JSON-RPC SendMessage body, a data part 5: 27-28 levels are left for the data itself.
MAX_JSON_DEPTH = 32
_TOO_DEEP = (
    f"request body is not valid JSON for this server: arrays and objects nest more than {MAX_JSON_DEPTH} levels deep"
)
# A \u escape of a UTF-16 surrogate (D800-DFFF). In valid JSON every backslash is inside a string and starts an
# escape, so a "\u" is one when the run of backslashes ending in it has odd length: the match starts right after a
# character that is not a backslash and takes the run's pairs ("\\\\") first.
_SURROGATE_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*(\\u[dD][0-9a-fA-F]{3})")
# Where a small body can hold a number no double holds (1e400, which jiter reads as infinity, or a 400-digit
# integer): only under a key of free JSON, "metadata" or "data" (ProtoJSON's Struct); every other number a request
# carries is a typed field (historyLength, pageSize) that validation bounds. So the decoded numbers are looked at only
# when the body names such a key (both end in ``data"``) or may name it in escapes (``\u``): one substring search
# in C, which a usual body passes at a fraction of a microsecond (a regular expression looking for the literal itself
# cost three times the parse).
_FREE_JSON_KEY = b'data"'
_ESCAPE = b"\\u"
_NOT_A_DOUBLE = "request body is not valid JSON for this server: a number does not fit a double (ProtoJSON's number)"
# What the count of entries skips: a string (any escape in it), or else one of the characters it counts. A lone
# quote is a string that never ends: the body is not JSON, and counting stops there (the parser says why).
_ENTRIES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[,\[{]|"', re.DOTALL)


def parse_event_id(text: str, source: str = "Last-Event-ID") -> int | None:
    """The event id a client resumes after, or None when ``text`` is empty.

    >>> parse_event_id(" 42 ")
    42
    >>> parse_event_id("")
    """
    text = text.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_EVENT_ID_DIGITS) or int(text) > _MAX_EVENT_ID:
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise InvalidParamsError(
            f"{source} {shown!r} is not an event id from this server (at most {MAX_EVENT_ID_DIGITS} digits 0-9)"
        )
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _double(text: str) -> float:
    # parse_float of the large-body parser: the float the standard library makes, refused where jiter's is infinite.
    value = float(text)
    if math.isinf(value):
        raise JSONParseError(_NOT_A_DOUBLE)
    return value


def _double_int(text: str) -> int:
    # parse_int of the large-body parser: an integer a double holds (up to ~1.8e308, 309 digits).
    value = int(text)
    if len(text) > 308 and not _fits_double(value):
        raise JSONParseError(_NOT_A_DOUBLE)
    return value


def _fits_double(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _not_a_double(value: Any) -> bool:
    """Whether decoded JSON holds a number a double cannot hold: an infinite float or too large an integer."""
    # Depth-first without recursion; small bodies are walked only when they name a key of free JSON.
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack += item.values()
        elif kind is list:
            stack += item
        elif kind is float:
            if math.isinf(item):
                return True
        elif kind is int and not _fits_double(item):
            return True
    return False


class _TooManyValues(Exception):
    pass


def _count_entries(body: bytes) -> None:
    """Raise ``_TooManyValues`` if arrays and objects in ``body`` hold more than ``MAX_JSON_VALUES`` entries."""
    # Each entry of an array or object but its first follows a comma, and the first follows the opening bracket:
    # the commas and opening brackets outside strings are the entries (plus one per empty array or object).
    if body.count(b",") + body.count(b"[") + body.count(b"{") <= MAX_JSON_VALUES:
        return  # the usual large body: a few big strings, whatever their commas, among few entries
    seen = 0
    for match in _ENTRIES.finditer(body):
        if match.end() - match.start() == 1:  # a string is two bytes at least
            if body[match.start()] == 0x22:  # '"': a string that never ends
                return
            seen += 1
            if seen > MAX_JSON_VALUES:
                raise _TooManyValues


def _too_deep(value: Any) -> bool:
    """Whether arrays and objects nest more than ``MAX_JSON_DEPTH`` deep in ``value`` (decoded JSON)."""
    # Level by level, without recursion: a level's containers are kept, its scalars dropped in the comprehension.
    level = [value]
    for _ in range(MAX_JSON_DEPTH):  # after the n-th round, ``level`` holds the containers n + 1 deep
        below: list[Any] = []
        for item in level:
            if type(item) is dict:
                below += [v for v in item.values() if type(v) is dict or type(v) is list]
            elif type(item) is list:
                below += [v for v in item if type(v) is dict or type(v) is list]
        if not below:
            return False
        level = below
    return True


def _lone_surrogate(body: bytes) -> bool:
    """Whether a body that parsed as JSON escapes a UTF-16 surrogate that is not half of a pair (high then low)."""
    if b"\\ud" not in body and b"\\uD" not in body:
        return False
    high_end = -1  # where the escape of an unpaired high surrogate ends
    for match in _SURROGATE_ESCAPE.finditer(body):
        start, end = match.span(1)
        if body[start + 3] in b"cdefCDEF":  # a low surrogate: pairs only with the high one right before it
            if start != high_end:
                return True
            high_end = -1
        elif high_end != -1:
            return True
        else:
            high_end = end
    return high_end != -1


def _parse_large(body: bytes) -> Any:
    _count_entries(body)
    try:
        value = json.loads(body, parse_constant=_no_constant, parse_float=_double, parse_int=_double_int)
    except RecursionError:  # ~1,000 levels: the interpreter's stack, well past the limit
        raise JSONParseError(_TOO_DEEP) from None
    # The checks jiter (decode_small_json) makes while parsing, made after the standard library's parse.
    if _lone_surrogate(body):
        raise JSONParseError("request body is not valid JSON: a \\u escape of a lone UTF-16 surrogate")
    if _too_deep(value):
        raise JSONParseError(_TOO_DEEP)
    return value


def decode_small_json(body: bytes) -> Any:
    """A body of at most ``OFF_LOOP_BYTES`` as Python data (strict JSON), parsed here: what ``decode_json`` does
    for it, for a binding that spares the coroutine on its hot path."""
    try:
        value = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError as exc:
        if str(exc).startswith("recursion limit exceeded"):  # jiter's own limit, 200 levels
            raise JSONParseError(_TOO_DEEP) from None
        raise JSONParseError(f"request body is not valid JSON: {exc}") from None
    # Nesting deeper than the limit needs more brackets than it: two scans in C clear a usual body (a few dozen
    # objects) without walking what it decoded to.
    if body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH and _too_deep(value):
        raise JSONParseError(_TOO_DEEP)
    # jiter reads 1e400 as infinity: the decoded numbers are looked at only where free JSON may hold one
    # (``_FREE_JSON_KEY``), or when the body is a bare number.
    if (type(value) is float or type(value) is int or _FREE_JSON_KEY in body or _ESCAPE in body) and _not_a_double(
        value
    ):
        raise JSONParseError(_NOT_A_DOUBLE)
    return value


async def decode_json(body: bytes) -> Any:
    """A request body as Python data (strict JSON), parsed off the event loop when it is large."""
    if len(body) <= OFF_LOOP_BYTES:
        return decode_small_json(body)
    try:
        return await asyncio.to_thread(_parse_large, body)
    except _TooManyValues:
        raise PayloadTooLargeError(
            f"request body holds more than {MAX_JSON_VALUES} JSON values (array items and object members); "
            "send fewer parts or smaller data"
        ) from None
    except ValueError as exc:
        raise JSONParseError(f"request body is not valid JSON: {exc}") from None
