"""Client-supplied values that are not A2A models, validated before anything uses them.

Invariants (every binding goes through these, so no client input becomes a 500 or a stalled event loop):

* An event id (``Last-Event-ID`` header, ``lastEventId`` query parameter, gRPC ``last-event-id`` metadata) is 1 to
  ``MAX_EVENT_ID_DIGITS`` ASCII digits with a value that fits the stores' BIGINT; anything else (``"\\xb2"``, which
  ``str.isdigit`` accepts, a 4,300-digit number, a negative one) is ``InvalidParamsError``.
* A request body is strict JSON (RFC 8259): ``NaN``, ``Infinity`` and ``-Infinity`` are ``JSONParseError`` rather
  than floats that would be stored as ``null``.
* A body over ``OFF_LOOP_BYTES`` is parsed in a worker thread with a Python hook per object, which both lets the
  event loop run between objects (the hook releases the GIL at the interpreter's switch interval) and refuses a
  body of more than ``MAX_JSON_OBJECTS`` objects as soon as it has seen one too many: a 10 MB body of 800k tiny
  objects costs the loop nothing and the thread a fraction of a second. Smaller bodies keep the fast path.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pydantic_core

from relaykit._errors import InvalidParamsError, JSONParseError, PayloadTooLargeError

__all__ = [
    "MAX_EVENT_ID_DIGITS",
    "MAX_JSON_OBJECTS",
    "OFF_LOOP_BYTES",
    "decode_json",
    "decode_small_json",
    "parse_event_id",
]

MAX_EVENT_ID_DIGITS = 19  # 2**63 - 1 has 19 digits: the stores keep event ids as BIGINT
_MAX_EVENT_ID = 2**63 - 1
OFF_LOOP_BYTES = 256 * 1024  # a body this small parses in a few milliseconds: not worth a thread hop
MAX_JSON_OBJECTS = 100_000  # per request body over OFF_LOOP_BYTES; a 1,000-part message holds ~1,000


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


class _TooManyObjects(Exception):
    pass


def _parse_counted(body: bytes) -> Any:
    count = 0

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal count
        count += 1
        if count > MAX_JSON_OBJECTS:
            raise _TooManyObjects
        return dict(items)

    return json.loads(body, object_pairs_hook=pairs, parse_constant=_no_constant)


def decode_small_json(body: bytes) -> Any:
    """A body of at most ``OFF_LOOP_BYTES`` as Python data (strict JSON), parsed here: what ``decode_json`` does
    for it, for a binding that spares the coroutine on its hot path."""
    try:
        return pydantic_core.from_json(body, allow_inf_nan=False)
    except (ValueError, RecursionError) as exc:
        raise JSONParseError(f"request body is not valid JSON: {exc}") from None


async def decode_json(body: bytes) -> Any:
    """A request body as Python data (strict JSON), parsed off the event loop when it is large."""
    if len(body) <= OFF_LOOP_BYTES:
        return decode_small_json(body)
    try:
        return await asyncio.to_thread(_parse_counted, body)
    except _TooManyObjects:
        raise PayloadTooLargeError(
            f"request body holds more than {MAX_JSON_OBJECTS} JSON objects; send fewer parts or smaller data"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise JSONParseError(f"request body is not valid JSON: {exc}") from None
