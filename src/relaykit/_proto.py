"""The gRPC wire, shared by the gRPC binding (``relaykit.grpc``) and the gRPC client transport: the names both ends
use, and conversion between relaykit's pydantic models and the ``lf.a2a.v1`` protobuf messages.

Wire names: ``SERVICE_NAME`` (the service every rpc is under); a stream's initial metadata ``FIRST_EVENT_ID`` (the
event id of its first message; message *k* has that id + *k*) and trailing metadata ``LAST_EVENT_ID``; SubscribeToTask's
request metadata ``RESUME_FROM`` (resume after that event id).

Conversion:

Two implementations, one contract:

* ``to_proto_json`` / ``from_proto_json``: the reference, through ProtoJSON (``model.to_json()`` parsed by
  ``json_format.Parse``; ``json_format.MessageToDict`` validated back into the model). Obviously right, and slow:
  json_format walks descriptors in Python for every field (measured in tests/grpc/test_convert.py and
  bench/grpc_convert.py: 10-20x the cost of the compiled path on a streamed artifact chunk).
* ``to_proto`` / ``from_proto``: what the binding uses. One plan per message type, compiled once from the descriptor
  and the model's fields, turns a model into nested constructor keywords (upb builds the whole tree in C) and a
  message back into the dict ProtoJSON would give (default values left out, so the model validates exactly as it
  does for JSON input: a missing REQUIRED field is the same ``ValidationError``).

The tests check that both give identical results for every message type, both ways.

Value mapping (the ProtoJSON rules, digest §2): enums by name; ``bytes`` as bytes; Timestamp as an aware UTC
datetime; Struct / Value as plain JSON data (protobuf numbers are doubles: integral ones within 2**53 come back as
``int``, as a JSON reader would see them); proto3 implicit-presence fields omitted at their default, ``optional`` and
oneof members by presence. ``Part.data`` holding JSON null is ``JSON_NULL`` on the model, ``null_value`` in protobuf.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message as ProtoMessage

from relaykit import _card, _requests, _types
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit._model import A2AModel
from relaykit._types import JSON_NULL

__all__ = [
    "FIRST_EVENT_ID",
    "LAST_EVENT_ID",
    "POOL",
    "RESUME_FROM",
    "SERVICE_NAME",
    "decoder",
    "encode_event",
    "encoder",
    "from_proto",
    "from_proto_json",
    "model_class",
    "proto_class",
    "to_proto",
    "to_proto_json",
]

M = TypeVar("M", bound=A2AModel)

SERVICE_NAME = "lf.a2a.v1.A2AService"
FIRST_EVENT_ID = "a2a-first-event-id"  # initial metadata of a stream: the id of its first message
LAST_EVENT_ID = "a2a-last-event-id"  # trailing metadata of a stream: the id of its last message
RESUME_FROM = "last-event-id"  # request metadata of SubscribeToTask: resume after this event id

POOL = pb.POOL
_MAX_EXACT = 2**53

# Field kinds of a compiled plan.
_SCALAR, _ENUM, _MESSAGE, _STRUCT, _VALUE, _TIMESTAMP = range(6)
_REPEATED_SCALAR, _REPEATED_MESSAGE, _MAP_SCALAR, _MAP_MESSAGE = range(6, 10)
_WKT = {"google.protobuf.Struct": _STRUCT, "google.protobuf.Value": _VALUE, "google.protobuf.Timestamp": _TIMESTAMP}


def _models() -> dict[str, type[A2AModel]]:
    found: dict[str, type[A2AModel]] = {}
    for module in (_types, _requests, _card):
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, A2AModel) and obj is not A2AModel:
                found[name] = obj
    return found


_MODELS = _models()


def proto_class(model: type[A2AModel]) -> type[ProtoMessage]:
    """The protobuf message class (in relaykit's private pool) for a model class, e.g. ``Task`` ⇒ ``lf.a2a.v1.Task``."""
    cls: type[ProtoMessage] = getattr(pb, model.__name__)
    return cls


def model_class(message: type[ProtoMessage] | ProtoMessage) -> type[A2AModel]:
    """The model class for a protobuf message (class or instance) of ``lf.a2a.v1``."""
    return _MODELS[message.DESCRIPTOR.name]


# --- JSON values ---------------------------------------------------------------------------------------------


def _number(value: float) -> float | int:
    if value.is_integer() and -_MAX_EXACT < value < _MAX_EXACT:
        return int(value)
    if not math.isfinite(value):
        # JSON has no NaN or Infinity: as in the JSON bindings, such a value is refused, not stored as null.
        raise ValueError(f"{value!r} is not a JSON number (no NaN or Infinity)")
    return value


def _from_value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return _number(value.number_value)
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return _from_struct(value.struct_value)
    if kind == "list_value":
        return [_from_value(item) for item in value.list_value.values]
    return None


def _from_struct(struct: Any) -> dict[str, Any]:
    return {key: _from_value(item) for key, item in struct.fields.items()}


def _to_value(value: Any) -> dict[str, Any]:
    # Constructor keywords for a google.protobuf.Value (upb turns dicts and lists under struct_value/list_value
    # into Struct/ListValue itself).
    if value is None or value is JSON_NULL:
        return {"null_value": 0}
    if isinstance(value, str):
        return {"string_value": value}
    if isinstance(value, bool):
        return {"bool_value": value}
    if isinstance(value, int | float):
        return {"number_value": value}
    if isinstance(value, dict):
        return {"struct_value": value}
    if isinstance(value, list | tuple):
        return {"list_value": list(value)}
    raise TypeError(f"{type(value).__name__} is not a JSON value")


# --- compiled plans ------------------------------------------------------------------------------------------


class _Plan:
    """How one message type maps: (proto name, model attribute, kind, sub-plan or enum table, has presence). For a
    repeated message field the last is instead how many items are decoded at most: the model field's
    ``max_length`` + 1 (the model then refuses the list exactly as for JSON input, naming the field, without the
    items it would never look at being converted first), or 0 when the field has no cap."""

    __slots__ = ("fields", "model", "proto")

    def __init__(self, model: type[A2AModel], proto: type[ProtoMessage]) -> None:
        self.model = model
        self.proto = proto
        self.fields: list[tuple[str, str, int, Any, bool | int]] = []


_PLANS: dict[str, _Plan] = {}


def _attribute(model: type[A2AModel], proto_name: str) -> str:
    for name, info in model.model_fields.items():
        if proto_name in (name, info.alias):
            return name
    raise LookupError(f"{model.__name__} has no field for proto field {proto_name!r}")


def _plan(descriptor: Descriptor) -> _Plan:
    plan = _PLANS.get(descriptor.full_name)
    if plan is not None:
        return plan
    model = _MODELS[descriptor.name]
    plan = _PLANS[descriptor.full_name] = _Plan(model, getattr(pb, descriptor.name))
    for field in descriptor.fields:
        attr = _attribute(model, field.name)
        sub: Any = None
        presence: bool | int = field.has_presence
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            value_field = message_type.fields_by_name["value"]
            if value_field.message_type is not None:
                kind, sub = _MAP_MESSAGE, _plan(value_field.message_type)
            else:
                kind = _MAP_SCALAR
        elif message_type is not None:
            wkt = _WKT.get(message_type.full_name)
            if wkt is not None:
                kind = wkt
            else:
                kind, sub = _MESSAGE, _plan(message_type)
            if field.is_repeated:
                if wkt is not None:
                    raise TypeError(f"repeated {message_type.full_name} is not supported")
                kind = _REPEATED_MESSAGE
                presence = _most_items(model, attr)
        elif field.enum_type is not None:
            kind = _ENUM
            sub = (
                {number: value.name for number, value in field.enum_type.values_by_number.items()},
                {value.name: number for number, value in field.enum_type.values_by_number.items()},
            )
        elif field.is_repeated:
            kind = _REPEATED_SCALAR
        else:
            kind = _SCALAR
        plan.fields.append((field.name, attr, kind, sub, presence))
    return plan


def _most_items(model: type[A2AModel], attr: str) -> int:
    for constraint in model.model_fields[attr].metadata:
        cap = getattr(constraint, "max_length", None)
        if cap is not None:
            return int(cap) + 1
    return 0


def _encode(plan: _Plan, model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, attr, kind, sub, presence in plan.fields:
        value = getattr(model, attr)
        if value is None:
            continue
        if kind == _SCALAR:
            if value or presence:
                out[name] = value
        elif kind == _MESSAGE:
            out[name] = _encode(sub, value)
        elif kind == _REPEATED_MESSAGE:
            if value:
                out[name] = [_encode(sub, item) for item in value]
        elif kind == _ENUM:
            number = sub[1][value.value]
            if number:
                out[name] = number
        elif kind in (_REPEATED_SCALAR, _MAP_SCALAR):
            if value:
                out[name] = value
        elif kind == _STRUCT:
            out[name] = value
        elif kind == _TIMESTAMP:
            # Milliseconds, as on every relaykit binding (the JSON encoder writes ``.mmmZ``).
            out[name] = value.replace(microsecond=value.microsecond - value.microsecond % 1000)
        elif kind == _VALUE:
            out[name] = _to_value(value)
        elif kind == _MAP_MESSAGE and value:
            out[name] = {key: _encode(sub, item) for key, item in value.items()}
    return out


def _decode(plan: _Plan, message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, attr, kind, sub, presence in plan.fields:
        if kind == _SCALAR:
            if presence:
                if message.HasField(name):
                    out[attr] = getattr(message, name)
            else:
                value = getattr(message, name)
                if value:
                    out[attr] = value
        elif kind == _MESSAGE:
            if message.HasField(name):
                out[attr] = _decode(sub, getattr(message, name))
        elif kind == _REPEATED_MESSAGE:
            items = getattr(message, name)
            if items:
                if presence and len(items) > presence:  # over the model's cap: one past it shows that
                    items = items[:presence]
                out[attr] = [_decode(sub, item) for item in items]
        elif kind == _ENUM:
            number = getattr(message, name)
            if number:
                out[attr] = sub[0].get(number, number)
        elif kind == _REPEATED_SCALAR:
            items = getattr(message, name)
            if items:
                out[attr] = list(items)
        elif kind == _STRUCT:
            if message.HasField(name):
                out[attr] = _from_struct(getattr(message, name))
        elif kind == _TIMESTAMP:
            if message.HasField(name):
                out[attr] = getattr(message, name).ToDatetime(tzinfo=UTC)
        elif kind == _VALUE:
            if message.HasField(name):
                out[attr] = _from_value(getattr(message, name))
        elif kind == _MAP_SCALAR:
            entries = getattr(message, name)
            if entries:
                out[attr] = dict(entries)
        elif kind == _MAP_MESSAGE:
            entries = getattr(message, name)
            if entries:
                out[attr] = {key: _decode(sub, item) for key, item in entries.items()}
    return out


_BY_MODEL: dict[type, _Plan] = {}


def _plan_for_model(model: type[A2AModel]) -> _Plan:
    plan = _BY_MODEL.get(model)
    if plan is None:
        plan = _BY_MODEL[model] = _plan(proto_class(model).DESCRIPTOR)
    return plan


def to_proto(model: A2AModel) -> ProtoMessage:
    """The protobuf message for a model (``Task`` ⇒ ``lf.a2a.v1.Task``)."""
    plan = _plan_for_model(type(model))
    return plan.proto(**_encode(plan, model))


def from_proto(message: ProtoMessage, model: type[M]) -> M:
    """The model for a protobuf message; raises ``pydantic.ValidationError`` exactly as for the same ProtoJSON."""
    return model.model_validate(_decode(_plan(message.DESCRIPTOR), message))


def decoder(model: type[M]) -> Callable[[bytes], M]:
    """A function from serialized protobuf bytes to the model (parse + convert)."""
    plan = _plan_for_model(model)
    parse = plan.proto.FromString

    def decode(data: bytes) -> M:
        return model.model_validate(_decode(plan, parse(data)))

    return decode


def encoder(model: type[A2AModel]) -> Callable[[A2AModel], bytes]:
    """A function from a model of this type to serialized protobuf bytes."""
    plan = _plan_for_model(model)
    build = plan.proto

    def encode(value: A2AModel) -> bytes:
        data: bytes = build(**_encode(plan, value)).SerializeToString()
        return data

    return encode


_EVENT_KEYS: dict[type, str] = {
    _types.Task: "task",
    _types.Message: "message",
    _types.TaskStatusUpdateEvent: "status_update",
    _types.TaskArtifactUpdateEvent: "artifact_update",
}


def encode_event(event: A2AModel) -> bytes:
    """A stream event (Task, Message, status or artifact update) as serialized ``StreamResponse`` bytes."""
    key = _EVENT_KEYS[type(event)]
    data: bytes = pb.StreamResponse(**{key: _encode(_plan_for_model(type(event)), event)}).SerializeToString()
    return data


# --- the reference: ProtoJSON --------------------------------------------------------------------------------


def to_proto_json(model: A2AModel) -> ProtoMessage:
    """``to_proto`` through ProtoJSON (the reference implementation)."""
    message = proto_class(type(model))()
    json_format.Parse(model.to_json(), message)
    return message


def from_proto_json(message: ProtoMessage, model: type[M]) -> M:
    """``from_proto`` through ProtoJSON (the reference implementation)."""
    return model.model_validate(json_format.MessageToDict(message))
