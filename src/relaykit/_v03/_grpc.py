"""The gRPC binding of A2A 0.3: service ``a2a.v1.A2AService`` (relaykit's ``proto/a2a_v0_3.proto``), each rpc mapped
onto the one operation table, its messages translated through their ProtoJSON form (``_pjson``).

Request names are resources (``tasks/{id}``, ``tasks/{id}/pushNotificationConfigs/{configId}``); ``TaskSubscription``
is SubscribeToTask; ``GetAgentCard`` answers the extended card when the agent has one, else the public card (what
0.3 clients ask it for); ``ListTaskPushNotificationConfig`` is singular. The translation goes through
``json_format`` (message ⇄ ProtoJSON dict): correct for every field by construction, and slower than the compiled
plans of the 1.0 binding (``relaykit._proto``); see the issue note for the measured cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic_core
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from relaykit._card import AgentCard
from relaykit._errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit._grpc_gen import a2a_v0_3_pb2 as pb
from relaykit._methods import OPERATIONS_BY_NAME, Operation
from relaykit._model import A2AModel, Encoded
from relaykit._types import MAX_PARTS
from relaykit._v03 import _pjson as pj
from relaykit._v03._card import _merge, card_in, card_out
from relaykit._v03._json import history_in

__all__ = [
    "RPCS",
    "SERVICE_NAME",
    "Rpc03",
    "card_message",
    "decode_result",
    "encode_request",
    "error_in",
    "event_bytes",
]

SERVICE_NAME = "a2a.v1.A2AService"
MARK = "relaykitProtocolVersion"
Json = dict[str, Any]


def _dict(message: ProtoMessage) -> Json:
    try:
        out: Json = json_format.MessageToDict(message)
    except json_format.SerializeToJsonError as exc:
        # NaN or an infinity in a Struct (metadata, a data part), which JSON cannot carry: a ValueError, as from the
        # 1.0 codec (relaykit._proto), so the binding answers INVALID_ARGUMENT rather than INTERNAL.
        raise ValueError(str(exc)) from None
    return out


def _message(data: Any, cls: type[ProtoMessage]) -> ProtoMessage:
    return json_format.ParseDict(data, cls(), ignore_unknown_fields=True)


def _bytes(message: ProtoMessage) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _marked(config: Json) -> Json:
    return {**config, MARK: "0.3"}


def _send(d: Json) -> Json:
    out = pj.send_request_in(d)
    push = (out.get("configuration") or {}).get("taskPushNotificationConfig")
    if push is not None:
        push[MARK] = "0.3"
    return out


def _config_ref(d: Json) -> Json:
    parts = str(d.get("name", "")).split("/")
    return {"taskId": parts[1] if len(parts) > 1 else "", "id": parts[3] if len(parts) > 3 else ""}


def _get_config(d: Json) -> Json:
    # A name without a config part (``tasks/{id}``) asks for the task's default config, as in 0.3 JSON-RPC's
    # TaskIdParams form (the handler decides which).
    return _marked(_config_ref(d))


def _create(d: Json) -> Json:
    task_id = pj.resource_id(d.get("parent"))
    return _marked({**pj.config_in(d.get("config"), task_id, str(d.get("configId", ""))), "taskId": task_id})


def card_dict(card: AgentCard) -> Json:
    """The 0.3 proto form of a card (as a ProtoJSON dict): the hybrid card with ``security`` in the proto shape."""
    data = card.to_dict()
    extra = card_out(data) or {}
    merged = _merge(data, extra)
    merged["security"] = data.get("securityRequirements", [])
    for skill in merged.get("skills", []):
        skill["security"] = skill.get("securityRequirements", [])
    return merged


def card_message(card: AgentCard) -> ProtoMessage:
    """The ``a2a.v1.AgentCard`` message of a card."""
    return _message(card_dict(card), pb.AgentCard)


class Rpc03:
    """One 0.3 rpc: its name, the operation, the request/response messages and the request translation."""

    __slots__ = ("decode", "name", "op", "request", "response")

    def __init__(
        self,
        name: str,
        op: str,
        request: type[ProtoMessage],
        response: type[ProtoMessage] | None,
        decode: Callable[[Json], Json],
    ) -> None:
        self.name = name
        self.op: Operation = OPERATIONS_BY_NAME[op]
        self.request = request
        self.response = response
        self.decode = decode

    def decoder(self) -> Callable[[bytes], A2AModel]:
        """Serialized 0.3 request ⇒ the 1.0 request model (``ValidationError`` exactly as for 1.0 input)."""
        parse, translate, model = self.request.FromString, self.decode, self.op.request
        if "request" not in self.request.DESCRIPTOR.fields_by_name:

            def decode(data: bytes) -> A2AModel:
                return model.model_validate(translate(_dict(parse(data))))

            return decode

        def decode_send(data: bytes) -> A2AModel:
            message = parse(data)
            # json_format turns every part into a dict in Python (~3 µs each); the model refuses a message at its
            # first part over MAX_PARTS, so the parts past that one are dropped unread: the same error as for JSON.
            parts = message.request.content
            if len(parts) > MAX_PARTS:
                del parts[MAX_PARTS + 1 :]
            return model.model_validate(translate(_dict(message)))

        return decode_send

    def encoder(self) -> Callable[[Any], bytes] | None:
        """The handler's result ⇒ the serialized 0.3 response (``None``: google.protobuf.Empty)."""
        response = self.response
        if response is None:
            return None
        op = self.op.name

        def encode(result: Any) -> bytes:
            if isinstance(result, AgentCard):
                return _bytes(card_message(result))
            data = pydantic_core.from_json(result.data) if isinstance(result, Encoded) else result.to_dict()
            if op == "SendMessage":
                out: Any = pj.stream_out(data)
            elif op in ("GetTask", "CancelTask"):
                out = pj.task_out(data)
            elif op == "ListTaskPushNotificationConfigs":
                out = {"configs": [pj.config_out(c) for c in data.get("configs", ())]}
            else:
                out = pj.config_out(data)
            return _bytes(_message(out, response))

        return encode


RPCS: tuple[Rpc03, ...] = (
    Rpc03("SendMessage", "SendMessage", pb.SendMessageRequest, pb.SendMessageResponse, _send),
    Rpc03("SendStreamingMessage", "SendStreamingMessage", pb.SendMessageRequest, pb.StreamResponse, _send),
    Rpc03(
        "GetTask",
        "GetTask",
        pb.GetTaskRequest,
        pb.Task,
        lambda d: {"id": pj.resource_id(d.get("name")), "historyLength": history_in(d.get("historyLength"))},
    ),
    Rpc03("CancelTask", "CancelTask", pb.CancelTaskRequest, pb.Task, lambda d: {"id": pj.resource_id(d.get("name"))}),
    Rpc03(
        "TaskSubscription",
        "SubscribeToTask",
        pb.TaskSubscriptionRequest,
        pb.StreamResponse,
        lambda d: {"id": pj.resource_id(d.get("name"))},
    ),
    Rpc03(
        "CreateTaskPushNotificationConfig",
        "CreateTaskPushNotificationConfig",
        pb.CreateTaskPushNotificationConfigRequest,
        pb.TaskPushNotificationConfig,
        _create,
    ),
    Rpc03(
        "GetTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        pb.GetTaskPushNotificationConfigRequest,
        pb.TaskPushNotificationConfig,
        _get_config,
    ),
    Rpc03(
        "ListTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        pb.ListTaskPushNotificationConfigRequest,
        pb.ListTaskPushNotificationConfigResponse,
        lambda d: {"taskId": pj.resource_id(d.get("parent"))},
    ),
    Rpc03("GetAgentCard", "GetExtendedAgentCard", pb.GetAgentCardRequest, pb.AgentCard, lambda d: {}),
    Rpc03(
        "DeleteTaskPushNotificationConfig",
        "DeleteTaskPushNotificationConfig",
        pb.DeleteTaskPushNotificationConfigRequest,
        None,
        _config_ref,
    ),
)
RPCS_BY_OP: dict[str, Rpc03] = {rpc.op.name: rpc for rpc in RPCS}


def event_bytes(data: bytes) -> bytes:
    """One stream event: the 1.0 StreamResponse JSON in, the serialized 0.3 StreamResponse out."""
    return _bytes(_message(pj.stream_out(pydantic_core.from_json(data)), pb.StreamResponse))


# --- client ------------------------------------------------------------------------------------------------


def encode_request(op: str, request: A2AModel) -> tuple[str, bytes]:
    """The 0.3 rpc name and serialized request of a 1.0 request (client side)."""
    rpc = RPCS_BY_OP[op]
    data = request.to_dict()
    out: Json
    if op in ("SendMessage", "SendStreamingMessage"):
        out = pj.send_request_out(data)
    elif op == "GetTask":
        out = {"name": f"tasks/{data['id']}"}
        if data.get("historyLength") is not None:
            out["historyLength"] = data["historyLength"] or 1
    elif op in ("CancelTask", "SubscribeToTask"):
        out = {"name": f"tasks/{data['id']}"}
    elif op == "CreateTaskPushNotificationConfig":
        out = {"parent": f"tasks/{data['taskId']}", "configId": data.get("id", ""), "config": pj.config_out(data)}
    elif op in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        out = {"name": f"tasks/{data['taskId']}/pushNotificationConfigs/{data['id']}"}
    elif op == "ListTaskPushNotificationConfigs":
        out = {"parent": f"tasks/{data['taskId']}"}
    else:
        out = {}
    return rpc.name, _bytes(_message(out, rpc.request))


def decode_result(op: Operation, data: bytes) -> Any:
    """A serialized 0.3 response as the 1.0 response model of ``op``."""
    rpc = RPCS_BY_OP[op.name]
    if rpc.response is None or op.response is None:
        return None
    d = _dict(rpc.response.FromString(data))
    if op.name == "SendMessage":
        return op.response.model_validate(pj.stream_in(d))
    if op.name in ("GetTask", "CancelTask"):
        return op.response.model_validate(pj.task_in(d))
    if op.name == "ListTaskPushNotificationConfigs":
        return op.response.model_validate({"configs": [pj.config_in(c) for c in d.get("configs", ())]})
    if op.name == "GetExtendedAgentCard":
        for skill in d.get("skills", ()):
            skill.pop("security", None)
        d.pop("security", None)
        return op.response.model_validate(card_in(d))
    return op.response.model_validate(pj.config_in(d))


def decode_event(data: bytes) -> Json:
    """A serialized 0.3 StreamResponse as the 1.0 StreamResponse dict."""
    return pj.stream_in(_dict(pb.StreamResponse.FromString(data)))


# A 0.3 gRPC error carries no google.rpc.ErrorInfo, so the 1.0 reading (reason first, status code otherwise) misnames
# some, and the two 0.3 SDKs say which error it is in two different ways: a2a-sdk 0.3 puts the 0.3 class name before
# the message ("TaskNotCancelableError: ...") under a coarse status (UNIMPLEMENTED for TaskNotCancelable, which by
# code alone reads as UnsupportedOperation); @a2a-js/sdk 0.3 sends the bare message and means the error by the
# status for that rpc (FAILED_PRECONDITION on CancelTask is TaskNotCancelable, on GetAgentCard the unconfigured
# extended card; UNIMPLEMENTED on a push config rpc is PushNotificationNotSupported), as its own client reads it.
_NAMED: dict[str, type[A2AError]] = {
    cls.__name__: cls
    for cls in (
        ContentTypeNotSupportedError,
        InternalError,
        InvalidAgentResponseError,
        InvalidParamsError,
        InvalidRequestError,
        JSONParseError,
        MethodNotFoundError,
        PushNotificationNotSupportedError,
        TaskNotCancelableError,
        TaskNotFoundError,
        UnsupportedOperationError,
    )
}
_NAMED["AuthenticatedExtendedCardNotConfiguredError"] = ExtendedAgentCardNotConfiguredError  # its 0.3 name
_PUSH_OPS = ("Create", "Get", "Delete")
_BY_RPC_STATUS: dict[tuple[str, str], type[A2AError]] = {
    ("CancelTask", "FAILED_PRECONDITION"): TaskNotCancelableError,
    ("GetExtendedAgentCard", "FAILED_PRECONDITION"): ExtendedAgentCardNotConfiguredError,
    ("SubscribeToTask", "UNIMPLEMENTED"): UnsupportedOperationError,
    ("ListTaskPushNotificationConfigs", "UNIMPLEMENTED"): PushNotificationNotSupportedError,
    **{(f"{verb}TaskPushNotificationConfig", "UNIMPLEMENTED"): PushNotificationNotSupportedError for verb in _PUSH_OPS},
}


def error_in(op: str, status: str, message: str) -> A2AError | None:
    """The A2A error a 0.3 peer meant by a gRPC ``status`` (its name) and ``message`` on the rpc of operation ``op``,
    or ``None`` when neither convention names one (the caller then reads the status code as in 1.0)."""
    name, sep, rest = message.partition(": ")
    named = _NAMED.get(name) if sep else None
    if named is not None:
        return named(rest)
    cls = _BY_RPC_STATUS.get((op, status))
    return cls(message) if cls is not None else None
