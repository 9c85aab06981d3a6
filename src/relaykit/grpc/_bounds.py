"""What one gRPC request message may cost the server before it is decoded: the gRPC side of ``relaykit._input``.

Invariants (both services, 1.0 and 0.3, every rpc):

* A request of at most ``OFF_LOOP_BYTES`` is decoded where it arrives, as before: at that size the worst message
  (every field an empty submessage or list item; parts past ``MAX_PARTS`` are dropped unread by both codecs) costs
  the loop ~20 ms, so the hot path takes no thread hop and no extra pass.
* A larger one is decoded in a worker thread, and before the protobuf parser sees it its fields are counted on the
  wire: more than ``MAX_FIELDS`` is ``PayloadTooLargeError`` (INVALID_ARGUMENT, the field being counted named),
  raised after reading ``MAX_FIELDS`` fields, whatever the message holds past them. The count comes first because
  the parser (upb, C) holds the GIL for the whole message, ~0.2 µs per field: a 10 MiB message of 5 million empty
  parts held the event loop for 0.9 s even from a thread. The count is Python, so the thread yields the GIL at the
  interpreter's switch interval; ``MAX_FIELDS`` fields parse in ~20 ms.

A field is one tag on the wire: a submessage, a map entry, a list item, a scalar (repeated or not: a singular field
sent a million times costs the parser a million times). ``MAX_FIELDS`` equals the JSON bindings' ``MAX_JSON_VALUES``:
a 1,000-part message with a few fields per part holds ~5,000, and a message of a few large parts (files, long texts)
a handful whatever its size.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from relaykit._errors import PayloadTooLargeError
from relaykit._input import MAX_JSON_VALUES

__all__ = ["MAX_FIELDS", "OFF_LOOP_BYTES", "count_fields", "decode_large"]

T = TypeVar("T")

# Above this a request is counted and decoded in a thread. Lower than HTTP's 256 KiB: converting protobuf costs
# ~0.5-1 µs per field in Python, far more than pydantic-core's JSON, and the worst 64 KiB message (32k one-item
# lists in a Struct) took ~40 ms on the loop; at 32 KiB the worst is ~20 ms. A real message that large is a file or
# a long text, a handful of fields, and pays one thread hop (~0.1 ms).
OFF_LOOP_BYTES = 32 * 1024
MAX_FIELDS = MAX_JSON_VALUES
_MAX_DEPTH = 100  # upb refuses messages nested deeper: past it the count leaves the rest to the parser


class _TooManyFields(Exception):
    def __init__(self, name: str) -> None:
        self.path = [name]  # innermost first: each enclosing level appends its field's name


@functools.cache
def _children(descriptor: Any) -> dict[int, tuple[str, Any]]:
    # Field number => (its name, the descriptor of its message type or None): what the count descends into.
    return {field.number: (field.name, field.message_type) for field in descriptor.fields}


def _skip_varint(data: bytes, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _count(data: bytes, pos: int, end: int, descriptor: Any, seen: int, limit: int, depth: int) -> int:
    children = _children(descriptor)
    while pos < end:
        tag = data[pos]
        pos += 1
        if tag > 0x7F:  # most tags are one byte: a call only for the others
            tag, pos = _varint(data, pos - 1)
        seen += 1
        if seen > limit:
            raise _TooManyFields(children.get(tag >> 3, (f"#{tag >> 3}", None))[0])
        wire = tag & 7
        if wire == 0:
            pos = _skip_varint(data, pos)
        elif wire == 2:
            length = data[pos]
            pos += 1
            if length > 0x7F:
                length, pos = _varint(data, pos - 1)
            child = children.get(tag >> 3)
            if child is not None and child[1] is not None and depth < _MAX_DEPTH:
                try:
                    seen = _count(data, pos, min(pos + length, end), child[1], seen, limit, depth + 1)
                except _TooManyFields as exc:
                    exc.path.append(child[0])
                    raise
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            return seen  # a group or a malformed tag: not proto3, the parser refuses it
    return seen


def count_fields(data: bytes, descriptor: Any, limit: int = MAX_FIELDS) -> None:
    """Raise ``PayloadTooLargeError`` if the serialized message ``data`` of type ``descriptor`` holds more than
    ``limit`` fields (at any depth); reads at most ``limit`` fields. Malformed data is left to the parser.

    >>> from relaykit._grpc_gen import a2a_pb2 as pb
    >>> count_fields(pb.Message(parts=[pb.Part(text="a")] * 3).SerializeToString(), pb.Message.DESCRIPTOR, 5)
    Traceback (most recent call last):
    relaykit._errors.PayloadTooLargeError: the request message holds more than 5 fields (at parts.text); ...
    """
    try:
        _count(data, 0, len(data), descriptor, 0, limit, 0)
    except IndexError:
        return  # truncated: the parser says so
    except _TooManyFields as exc:
        where = ".".join(reversed(exc.path)) or "(request)"
        raise PayloadTooLargeError(
            f"the request message holds more than {limit} fields (at {where}); send fewer parts or smaller data",
            field_violations=[(where, f"the request message holds more than {limit} fields")],
        ) from None


def _checked(decode: Callable[[bytes], T], data: bytes, descriptor: Any) -> T:
    count_fields(data, descriptor)
    return decode(data)


async def decode_large(decode: Callable[[bytes], T], data: bytes, descriptor: Any) -> T:
    """``decode(data)`` for a request over ``OFF_LOOP_BYTES``: its fields counted, then decoded, in a thread."""
    return await asyncio.to_thread(_checked, decode, data, descriptor)
