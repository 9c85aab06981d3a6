"""The JSON-RPC binding of A2A 0.3: its method names mapped onto the one operation table, and each operation's
params and result translated (server: 0.3 in, 1.0 model to the handler, 0.3 out; client: the reverse).

Method table (spec v0.3.0 §3.5.6): ``message/send`` SendMessage, ``message/stream`` SendStreamingMessage,
``tasks/get`` GetTask, ``tasks/cancel`` CancelTask, ``tasks/resubscribe`` SubscribeToTask,
``tasks/pushNotificationConfig/{set,get,list,delete}`` the push-config operations,
``agent/getAuthenticatedExtendedCard`` GetExtendedAgentCard. 0.3 has no JSON-RPC ListTasks.

Results: SendMessage answers the Task or Message itself (not the 1.0 wrapper); the push-config list is a bare array;
delete answers ``null``; the extended card is the hybrid card. Errors keep the 1.0 codes, which 0.3 shares for
-32001…-32007 (-32007 was named AuthenticatedExtendedCardNotConfigured, and is what an agent without an extended
card answers here: ``error_out``; -32008/-32009 lie in the server range 0.3 leaves to implementations). The
streaming methods' errors travel as SSE (``relaykit.http._jsonrpc``). Extensions are activated, and echoed, with
0.3's ``X-A2A-Extensions`` header (0.3 docs/topics/extensions.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pydantic_core

from relaykit._card import AgentCard
from relaykit._errors import InvalidAgentResponseError, MethodNotFoundError
from relaykit._methods import OPERATIONS_BY_NAME, Operation
from relaykit._model import A2AModel
from relaykit._types import StreamResponse
from relaykit._v03 import _json as j
from relaykit._v03._card import card_in, card_json, error_out

__all__ = [
    "EXTENSIONS_HEADER",
    "MARK",
    "METHODS",
    "STREAMING_METHODS",
    "decode_event",
    "decode_request",
    "decode_result",
    "encode_event",
    "encode_request",
    "encode_result",
    "error_out",
    "method_name",
]

Json = dict[str, Any]
# The key of the note on a push config that it was registered over 0.3 (``TaskPushNotificationConfig``).
MARK = "relaykitProtocolVersion"
VERSION = "0.3"


def _str(value: Any) -> Any:
    return value if value is not None else ""


def _get_task(p: Json) -> Json:
    return {"id": p.get("id"), "historyLength": j.history_in(p.get("historyLength"))}


def _task_id(p: Json) -> Json:
    out: Json = {"id": p.get("id")}
    if p.get("metadata") is not None:
        out["metadata"] = p["metadata"]
    return out


def _set_config(p: Json) -> Json:
    return {**j.config_in(p), MARK: VERSION}


def _send(p: Json) -> Json:
    out = j.send_params_in(p)
    push = (out.get("configuration") or {}).get("taskPushNotificationConfig")
    if push is not None:
        push[MARK] = VERSION
    return out


def _config_ref(p: Json) -> Json:
    return {"taskId": p.get("id"), "id": p.get("pushNotificationConfigId") or p.get("id")}


def _get_config(p: Json) -> Json:
    # Params are GetTaskPushNotificationConfigParams or, deprecated but valid in 0.3, TaskIdParams (the task only):
    # then ``id`` stays empty and the handler answers the task's default config, as 0.3 servers did.
    return {"taskId": p.get("id"), "id": p.get("pushNotificationConfigId") or "", MARK: VERSION}


# 0.3 method ⇒ (1.0 operation name, params translator)
METHODS: dict[str, tuple[str, Callable[[Json], Json]]] = {
    "message/send": ("SendMessage", _send),
    "message/stream": ("SendStreamingMessage", _send),
    "tasks/get": ("GetTask", _get_task),
    "tasks/cancel": ("CancelTask", _task_id),
    "tasks/resubscribe": ("SubscribeToTask", lambda p: {"id": p.get("id")}),
    "tasks/pushNotificationConfig/set": ("CreateTaskPushNotificationConfig", _set_config),
    "tasks/pushNotificationConfig/get": ("GetTaskPushNotificationConfig", _get_config),
    "tasks/pushNotificationConfig/list": ("ListTaskPushNotificationConfigs", lambda p: {"taskId": p.get("id")}),
    "tasks/pushNotificationConfig/delete": ("DeleteTaskPushNotificationConfig", _config_ref),
    "agent/getAuthenticatedExtendedCard": ("GetExtendedAgentCard", lambda p: {}),
}
_NAMES: dict[str, str] = {op: method for method, (op, _) in METHODS.items()}
# The methods a 0.3 client reads the answer of as SSE only, errors included.
STREAMING_METHODS = frozenset(m for m, (op, _) in METHODS.items() if OPERATIONS_BY_NAME[op].streaming)
# 0.3's name of the extensions header (1.0: A2A-Extensions); relaykit reads either, and echoes both to a 0.3 caller.
EXTENSIONS_HEADER = "X-A2A-Extensions"


# --- server ------------------------------------------------------------------------------------------------


def decode_request(method: str, params: Json) -> tuple[Operation, A2AModel]:
    """The operation a 0.3 method names and its params as the validated 1.0 request (``ValidationError`` as for a
    1.0 request; a 0.3 peer's ``null`` members read as absent: ``_json.decode``)."""
    entry = METHODS.get(method)
    if entry is None:
        raise MethodNotFoundError(f"unknown A2A 0.3 method {method!r}", method=method)
    name, translate = entry
    op = OPERATIONS_BY_NAME[name]
    return op, j.decode(op.request, translate, params)


def encode_result(op: str, result: Any) -> bytes:
    """The 0.3 JSON-RPC ``result`` for a handler result of operation ``op``."""
    if op == "GetExtendedAgentCard" and isinstance(result, AgentCard):
        return card_json(result)
    data = j.as_dict(result)
    out: Any
    if op == "SendMessage":
        out = j.event_out(data)
    elif op in ("GetTask", "CancelTask"):
        out = j.task_out(data)
    elif op in ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig"):
        out = j.config_out(data)
    elif op == "ListTaskPushNotificationConfigs":
        out = [j.config_out(c) for c in data.get("configs", ())]
    elif op == "DeleteTaskPushNotificationConfig":
        out = None
    else:
        out = data
    return pydantic_core.to_json(out)


_ARTIFACT = b'{"artifactUpdate":'
# Structural keys that need more than the text-part rewrite (an unescaped ``"key":`` only occurs as JSON structure:
# inside strings quotes are escaped).
# One regex pass: half the cost of four substring scans, per chunk of a long stream (bench/v03_bench.py).
_NOT_PLAIN = re.compile(rb'"(?:metadata|raw|url|data)":')


def encode_event(data: bytes) -> bytes:
    """One stream event: the 1.0 StreamResponse JSON in, the 0.3 ``result`` JSON out.

    The hot case, an artifact chunk of text parts without metadata, is rewritten as bytes (every part gains
    ``"kind":"text"``, the event ``"kind":"artifact-update"``); tests/v03/test_codec.py checks it against the general
    path, which decodes, converts and re-encodes.
    """
    if data.startswith(_ARTIFACT) and _NOT_PLAIN.search(data) is None:
        body = data[len(_ARTIFACT) : -2].replace(b'{"text":', b'{"kind":"text","text":')
        return body + b',"kind":"artifact-update"}'
    return pydantic_core.to_json(j.event_out(pydantic_core.from_json(data)))


def push_body(task: A2AModel) -> bytes:
    """What a 0.3 webhook receives for every event: the task as it stands (spec v0.3.0 §9.5)."""
    return pydantic_core.to_json(j.task_out(task.to_dict()))


# --- client ------------------------------------------------------------------------------------------------


def method_name(op: str) -> str:
    """The 0.3 method of a 1.0 operation (``A2AInvalidCardError``-worthy ones raise ``MethodNotFoundError``)."""
    name = _NAMES.get(op)
    if name is None:
        raise MethodNotFoundError(f"{op} has no A2A 0.3 equivalent", method=op)
    return name


def encode_request(op: str, request: A2AModel) -> Json:
    """The 0.3 params of a 1.0 request model."""
    data = request.to_dict()
    if op in ("SendMessage", "SendStreamingMessage"):
        return j.send_params_out(data)
    if op == "GetTask":
        out: Json = {"id": data["id"]}
        if data.get("historyLength") is not None:
            # 1.0 "0 = no history" has no 0.3 spelling (0 meant no limit there): ask for the smallest history.
            out["historyLength"] = data["historyLength"] or 1
        return out
    if op in ("CancelTask", "SubscribeToTask"):
        return {k: v for k, v in data.items() if k in ("id", "metadata")}
    if op == "CreateTaskPushNotificationConfig":
        return j.config_out(data)
    if op in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        return {"id": data["taskId"], "pushNotificationConfigId": data["id"]}
    if op == "ListTaskPushNotificationConfigs":
        return {"id": data["taskId"]}
    return {}


def _configs_in(result: Any) -> Json:
    return {"configs": [j.config_in(c) for c in (result if isinstance(result, list) else [])]}


def _card_in(result: Any) -> Any:
    return card_in(result if isinstance(result, dict) else {})


# Operation ⇒ how its 0.3 result becomes the 1.0 response dict (the rest are the same on both sides).
_RESULTS: dict[str, Callable[[Any], Any]] = {
    "SendMessage": j.event_in,
    "GetTask": j.task_in,
    "CancelTask": j.task_in,
    "CreateTaskPushNotificationConfig": j.config_in,
    "GetTaskPushNotificationConfig": j.config_in,
    "ListTaskPushNotificationConfigs": _configs_in,
    "GetExtendedAgentCard": _card_in,
}


def _same(result: Any) -> Any:
    return result


def decode_result(op: Operation, result: Any) -> Any:
    """A 0.3 ``result`` as the 1.0 response model of ``op`` (``None`` for Empty); ``null`` members read as absent
    (``_json.decode``)."""
    if op.response is None:
        return None
    try:
        return j.decode(op.response, _RESULTS.get(op.name, _same), result)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidAgentResponseError(f"the agent's 0.3 {op.name} response is malformed: {exc}") from None


def decode_event(result: Any) -> StreamResponse:
    """One 0.3 stream ``result`` as a 1.0 StreamResponse (``null`` members read as absent)."""
    try:
        return j.decode(StreamResponse, j.event_in, result)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidAgentResponseError(f"malformed 0.3 stream event: {exc}") from None
