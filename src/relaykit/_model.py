"""The ProtoJSON base model and the wire field types every A2A object is built from.

Encoding rules (A2A 1.0 digest §2), enforced here once for every model:

* Output names are lowerCamelCase; input accepts camelCase and snake_case.
* Fields with implicit presence carry their proto default as the Python default (``""``, ``False``, ``[]``) and are
  left out of the output while they hold it. Presence-tracked fields (proto ``optional``) default to ``None`` and are
  emitted whenever set, so ``historyLength: 0`` goes out and an unset one does not. Fields the spec marks REQUIRED and
  that need a value from the caller have no default, so they are always emitted.
* Unknown input fields are ignored (spec: SHOULD ignore; a2a-sdk 1.3.0 measured to ignore them too).
* ``bytes`` is standard base64 with padding out; standard or URL-safe, padded or not, in.
* Timestamps are UTC with millisecond precision and a ``Z`` out; 0-9 fractional digits and any offset in.
* Ids a client chooses (``Id``: message, task, context, config ids, tenants, page tokens) are at most
  ``MAX_ID_LENGTH`` characters and hold no NUL: every store can keep them (PostgreSQL text refuses NUL), and a 1 MB
  id is refused at decode, on every binding, before anything stores, logs or indexes it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainSerializer, StringConstraints
from pydantic.alias_generators import to_camel

__all__ = [
    "MAX_ID_LENGTH",
    "A2AModel",
    "Base64Bytes",
    "Encoded",
    "Id",
    "Struct",
    "Timestamp",
    "format_timestamp",
    "set_field",
    "utc_now",
]


class A2AModel(BaseModel):
    """Base of every A2A object: camelCase on the wire, defaults omitted, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
        use_enum_values=False,
        ser_json_bytes="base64",
        # A ValidationError's text (what a logged traceback shows) names the field and the error, never the value:
        # it is a caller's content (a message, a stored task) and may hold credentials. The wire errors never had
        # it (``relaykit._errors.invalid_params`` leaves inputs out).
        hide_input_in_errors=True,
    )

    def to_json(self) -> bytes:
        """ProtoJSON bytes of this object (defaults omitted).

        >>> from relaykit import Part
        >>> Part(text="hi").to_json()
        b'{"text":"hi"}'
        """
        return self.__pydantic_serializer__.to_json(self, exclude_defaults=True, by_alias=True)

    def to_dict(self) -> dict[str, Any]:
        """ProtoJSON of this object as plain Python data (defaults omitted)."""
        out: dict[str, Any] = self.__pydantic_serializer__.to_python(
            self, mode="json", exclude_defaults=True, by_alias=True
        )
        return out

    @classmethod
    def _trusted(cls, **values: Any) -> Self:
        """An instance from values that already are what validation would make of them, without running it.

        For hot paths that build objects out of values they have just checked (exact ``str``/``bool``/enum members,
        instances of the field's model type, a fresh list). The result is the validated constructor's, field for
        field: every field present in declaration order, defaults (and default factories) filled in, and
        ``model_fields_set`` = the names given. Required fields must be given. A2A models have no extras and no
        private attributes. tests/test_trusted.py checks each use against the validated constructor.
        """
        plan = _PLANS.get(cls)
        if plan is None:
            plan = _PLANS[cls] = _plan(cls)
        template, factories = plan
        fields = {**template, **values}
        for name, factory in factories:
            if name not in values:
                fields[name] = factory()
        obj = _new(cls)
        _set_dict(obj, fields)
        _set_fields_set(obj, set(values))
        _set_extra(obj, None)
        _set_private(obj, None)
        return obj

    @classmethod
    def from_json(cls, data: str | bytes) -> Self:
        """Parse ProtoJSON text into this type (raises ``pydantic.ValidationError``)."""
        return cls.model_validate_json(data)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Validate already-decoded ProtoJSON data into this type."""
        return cls.model_validate(data)


def set_field(model: A2AModel, name: str, value: Any) -> None:
    """``model.<name> = value``, minus pydantic's ``BaseModel.__setattr__``: what its handler for a plain field does
    (the value in ``__dict__``, the name in the fields set), without the Python-level dispatch in front of it.

    For hot paths that assign a field a value that already is what validation would make of it (A2A models validate
    no assignment, have no private attributes and are not frozen). tests/test_trusted.py checks it against setattr.
    """
    model.__dict__[name] = value
    model.__pydantic_fields_set__.add(name)


def _slot_setter(name: str) -> Any:
    """The setter of one of BaseModel's instance slots (its descriptor's ``__set__``: cheaper than setattr)."""
    setter = getattr(vars(BaseModel).get(name), "__set__", None)
    if setter is None:  # pragma: no cover - a pydantic without that slot descriptor
        return lambda obj, value: object.__setattr__(obj, name, value)
    return setter


_new = object.__new__
_set_dict = _slot_setter("__dict__")
_set_fields_set = _slot_setter("__pydantic_fields_set__")
_set_extra = _slot_setter("__pydantic_extra__")
_set_private = _slot_setter("__pydantic_private__")
# Per model class: the field template (every field in order, holding its default) and its default factories.
_PLANS: dict[type[A2AModel], tuple[dict[str, Any], tuple[tuple[str, Any], ...]]] = {}


def _plan(cls: type[A2AModel]) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    template: dict[str, Any] = {}
    factories: list[tuple[str, Any]] = []
    for name, field in cls.model_fields.items():
        if field.default_factory is not None:
            factories.append((name, field.default_factory))  # A2A models' factories take no arguments (list)
            template[name] = None
        else:
            template[name] = None if field.is_required() else field.default
    return template, tuple(factories)


class Encoded:
    """A response that is already ProtoJSON bytes (e.g. a task as just persisted): bindings send it as is."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def to_json(self) -> bytes:
        """The bytes, unchanged."""
        return self.data


# --- bytes -------------------------------------------------------------------------------------------------

_B64_URLSAFE = str.maketrans("-_", "+/")


def _decode_base64(value: Any) -> Any:
    # Python callers hand us bytes; JSON callers a base64 string. ProtoJSON parsers must take both alphabets,
    # padded or not (digest §2), so normalise to the standard alphabet and re-pad before decoding.
    if isinstance(value, str):
        text = value.translate(_B64_URLSAFE)
        text += "=" * (-len(text) % 4)
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("not valid base64") from exc
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _encode_base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


Base64Bytes = Annotated[
    bytes,
    BeforeValidator(_decode_base64),
    PlainSerializer(_encode_base64, return_type=str, when_used="json"),
]

# --- timestamps --------------------------------------------------------------------------------------------

# Python's datetime holds microseconds; RFC 3339 senders may use nanoseconds. Trim digits past six before parsing.
_LONG_FRACTION = re.compile(r"(\.\d{6})\d+")


def _parse_timestamp(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) > 27:
            value = _LONG_FRACTION.sub(r"\1", value, count=1)
        return value
    return value


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if value.utcoffset():
        return value.astimezone(UTC)
    return value


@functools.lru_cache(maxsize=4096)
def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with milliseconds and ``Z``: ``2026-01-02T03:04:05.678Z``.

    Cached: a task's status timestamp is encoded several times (store, stream, response), always the same value.
    """
    value = _to_utc(value)
    # %-formatting: the same text as the equivalent f-string at half its cost (a miss is the common case: every
    # status change stamps a new millisecond).
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (  # noqa: UP031
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond // 1000,
    )


def utc_now() -> datetime:
    """The current time, timezone-aware UTC, truncated to the millisecond.

    The wire carries milliseconds; stamping at that precision keeps the stored order (ListTasks) identical to the
    order a client sees, with ties broken by id as documented rather than by an invisible microsecond.
    """
    # Whole milliseconds from the same clock as ``datetime.now``, made a datetime in one call (``replace`` costs
    # more than the clock read). Exact: a whole number of ms as a float is within 0.2 µs of the true value for
    # any date before 2200, and ``fromtimestamp`` rounds to the nearest microsecond.
    return datetime.fromtimestamp(time.time_ns() // 1_000_000 / 1000, UTC)


def _after_timestamp(value: datetime) -> datetime:
    return _to_utc(value)


Timestamp = Annotated[
    datetime,
    BeforeValidator(_parse_timestamp),
    AfterValidator(_after_timestamp),
    PlainSerializer(format_timestamp, return_type=str, when_used="json"),
]

# --- ids -------------------------------------------------------------------------------------------------------

# Generous for every id scheme in use (a UUID is 36 characters), small enough that an id costs nothing to index,
# log or compare. Documented in docs/limits.md.
MAX_ID_LENGTH = 1024


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL (\\u0000)")
    return value


# The length check runs in pydantic-core before the NUL scan, so an oversize id is refused without being scanned.
Id = Annotated[str, StringConstraints(max_length=MAX_ID_LENGTH), AfterValidator(_no_nul)]

# google.protobuf.Struct: a JSON object.
Struct = dict[str, Any]
