"""The HTTP+JSON binding of A2A 0.3: its ``/v1/…`` routes mapped onto the one operation table, bodies translated
(``_pjson``), errors in 0.3's form.

Routes (spec v0.3.0 §3.5.6 and the proto's HTTP annotations): ``POST /v1/message:send``, ``POST /v1/message:stream``,
``GET /v1/tasks/{id}``, ``GET /v1/tasks`` (list: in the spec's method table, not in the proto),
``POST /v1/tasks/{id}:cancel``, ``GET|POST /v1/tasks/{id}:subscribe``,
``POST|GET /v1/tasks/{id}/pushNotificationConfigs``, ``GET|DELETE /v1/tasks/{id}/pushNotificationConfigs/{configId}``,
``GET /v1/card``. Path variables win over the body.

Errors: the status 0.3 servers used (404 not found, 409 not cancelable, 501 push or operation unsupported,
415 content type, 422 invalid params, 502 invalid agent response, 404 for ``/v1/card`` on an agent without an
extended card: ``error_out``) with a JSON body ``{"code", "message", "data"}``: the JSON-RPC error object, so a
client can tell the error classes apart beyond the status. A streaming route's errors before its first event are
plain HTTP errors: a 0.3 REST client checks the status before it reads the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic_core

from relaykit._card import AgentCard
from relaykit._errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InvalidAgentResponseError,
    InvalidParamsError,
    MethodNotFoundError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    error_from_jsonrpc,
)
from relaykit._methods import OPERATIONS_BY_NAME, Operation
from relaykit._model import A2AModel
from relaykit._types import StreamResponse
from relaykit._v03 import _pjson as pj
from relaykit._v03._card import card_in, card_json, error_out
from relaykit._v03._json import STATE_IN, STATE_OUT, as_dict, history_in
from relaykit._v03._json import decode as decode_json

__all__ = [
    "ROUTES",
    "Route03",
    "decode_error",
    "decode_event",
    "decode_request",
    "decode_response",
    "encode_event",
    "encode_result",
    "error_out",
    "error_response",
    "request_target",
    "status_for",
]

Json = dict[str, Any]
MARK = "relaykitProtocolVersion"


class Route03:
    """One 0.3 route: verb, path template, the operation, and how its params become the 1.0 request dict."""

    __slots__ = ("body", "decode", "method", "op", "path")

    def __init__(self, method: str, path: str, op: str, body: bool, decode: Callable[[Json, Json], Json]) -> None:
        self.method = method
        self.path = path
        self.op: Operation = OPERATIONS_BY_NAME[op]
        self.body = body
        self.decode = decode  # (body or query params, path params) -> 1.0 request dict


def _send(params: Json, path: Json) -> Json:
    out = pj.send_request_in(params)
    push = (out.get("configuration") or {}).get("taskPushNotificationConfig")
    if push is not None:
        push[MARK] = "0.3"
    return out


def _history(params: Json) -> Any:
    # A query value is text: a number becomes one (0.3's 0 = "all"); anything else, a negative number included,
    # goes on as it is for the 1.0 validator to refuse (InvalidParams), rather than being silently ignored.
    value = params.get("historyLength", params.get("history_length"))
    if value in (None, ""):
        return None
    try:
        return history_in(int(value))
    except (TypeError, ValueError):
        return value


def _get_task(params: Json, path: Json) -> Json:
    return {"id": path["id"], "historyLength": _history(params)}


# The 0.3 list takes no parameters and answers a bare ``[Task]`` (spec v0.3.0 "tasks/list", REST only): the filters
# and cursor of 1.0 are accepted when given (both spellings), and without a page size one answer holds the most
# one 1.0 page can (100) rather than the 1.0 default, since a 0.3 client has no way to ask for the next page.
LIST_PAGE = 100


def _list_tasks(params: Json, path: Json) -> Json:
    out: Json = {"pageSize": LIST_PAGE}
    for name, alias in (("contextId", "context_id"), ("pageToken", "page_token"), ("pageSize", "page_size")):
        value = params.get(name, params.get(alias))
        if value not in (None, ""):
            out[name] = value
    state = params.get("status")
    if isinstance(state, str) and state:
        out["status"] = pj.state_in(STATE_IN.get(state, state))
    history = _history(params)
    if history is not None:
        out["historyLength"] = history
    return out


def _create_config(params: Json, path: Json) -> Json:
    # Body: CreateTaskPushNotificationConfigRequest {parent, configId, config}; a bare config is accepted too.
    config = params.get("config", params)
    # A configId that is not text goes on as it is: the 1.0 validator refuses it as the config's id.
    config_id = params.get("configId") or params.get("config_id") or ""
    at = ("config",) if "config" in params else ()
    return {**pj.config_in(config, task_id=path["id"], config_id=config_id, at=at), "taskId": path["id"], MARK: "0.3"}


ROUTES: tuple[Route03, ...] = (
    Route03("POST", "/v1/message:send", "SendMessage", True, _send),
    Route03("POST", "/v1/message:stream", "SendStreamingMessage", True, _send),
    Route03("POST", "/v1/tasks/{id}:cancel", "CancelTask", True, lambda p, path: {"id": path["id"]}),
    Route03("GET", "/v1/tasks/{id}:subscribe", "SubscribeToTask", False, lambda p, path: {"id": path["id"]}),
    Route03("POST", "/v1/tasks/{id}:subscribe", "SubscribeToTask", True, lambda p, path: {"id": path["id"]}),
    Route03("GET", "/v1/tasks/{id}", "GetTask", False, _get_task),
    Route03("GET", "/v1/tasks", "ListTasks", False, _list_tasks),
    Route03("POST", "/v1/tasks/{id}/pushNotificationConfigs", "CreateTaskPushNotificationConfig", True, _create_config),
    Route03(
        "GET",
        "/v1/tasks/{id}/pushNotificationConfigs",
        "ListTaskPushNotificationConfigs",
        False,
        lambda p, path: {"taskId": path["id"]},
    ),
    Route03(
        "GET",
        "/v1/tasks/{id}/pushNotificationConfigs/{configId}",
        "GetTaskPushNotificationConfig",
        False,
        lambda p, path: {"taskId": path["id"], "id": path["configId"]},
    ),
    Route03(
        "DELETE",
        "/v1/tasks/{id}/pushNotificationConfigs/{configId}",
        "DeleteTaskPushNotificationConfig",
        False,
        lambda p, path: {"taskId": path["id"], "id": path["configId"]},
    ),
    Route03("GET", "/v1/card", "GetExtendedAgentCard", False, lambda p, path: {}),
)


def encode_result(op: str, result: Any) -> bytes:
    """The 0.3 ProtoJSON body for a handler result of operation ``op``."""
    if op == "GetExtendedAgentCard" and isinstance(result, AgentCard):
        return card_json(result)
    data = as_dict(result)
    out: Any
    if op == "SendMessage":
        out = pj.stream_out(data)
    elif op in ("GetTask", "CancelTask"):
        out = pj.task_out(data)
    elif op in ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig"):
        out = pj.config_out(data)
    elif op == "ListTasks":
        out = [pj.task_out(t) for t in data.get("tasks", ())]
    elif op == "ListTaskPushNotificationConfigs":
        out = {"configs": [pj.config_out(c) for c in data.get("configs", ())]}
    else:
        out = data if data is not None else {}
    return pydantic_core.to_json(out)


def encode_event(data: bytes) -> bytes:
    """One stream event: the 1.0 StreamResponse JSON in, the 0.3 StreamResponse JSON out."""
    return pydantic_core.to_json(pj.stream_out(pydantic_core.from_json(data)))


_STATUS = {-32001: 404, -32002: 409, -32003: 501, -32004: 501, -32005: 415, -32006: 502, -32007: 404, -32602: 422}


def status_for(exc: A2AError) -> int:
    """The HTTP status of an error on the 0.3 REST binding."""
    return _STATUS.get(exc.code, exc.http_status)


def error_response(exc: A2AError) -> tuple[int, bytes]:
    """Status and body of an error on the 0.3 REST binding."""
    return status_for(exc), pydantic_core.to_json(exc.to_jsonrpc())


# --- client ------------------------------------------------------------------------------------------------


def request_target(op: str, request: A2AModel) -> tuple[str, str, bytes | None, dict[str, str]]:
    """The verb, path (under the interface URL), body and query of a 1.0 request on the 0.3 REST binding."""
    data = request.to_dict()
    if op in ("SendMessage", "SendStreamingMessage"):
        verb = "send" if op == "SendMessage" else "stream"
        return "POST", f"/v1/message:{verb}", pydantic_core.to_json(pj.send_request_out(data)), {}
    if op == "GetTask":
        query = {"historyLength": str(data["historyLength"] or 1)} if data.get("historyLength") is not None else {}
        return "GET", f"/v1/tasks/{data['id']}", None, query
    if op == "ListTasks":
        return "GET", "/v1/tasks", None, _list_query(data)
    if op == "CancelTask":
        return "POST", f"/v1/tasks/{data['id']}:cancel", pydantic_core.to_json({"name": f"tasks/{data['id']}"}), {}
    if op == "SubscribeToTask":
        return "GET", f"/v1/tasks/{data['id']}:subscribe", None, {}  # what 0.3 servers serve (the SDK: GET only)
    if op == "CreateTaskPushNotificationConfig":
        body = {"parent": f"tasks/{data['taskId']}", "configId": data.get("id", ""), "config": pj.config_out(data)}
        return "POST", f"/v1/tasks/{data['taskId']}/pushNotificationConfigs", pydantic_core.to_json(body), {}
    if op == "ListTaskPushNotificationConfigs":
        return "GET", f"/v1/tasks/{data['taskId']}/pushNotificationConfigs", None, {}
    if op in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        verb = "GET" if op == "GetTaskPushNotificationConfig" else "DELETE"
        return verb, f"/v1/tasks/{data['taskId']}/pushNotificationConfigs/{data['id']}", None, {}
    if op == "GetExtendedAgentCard":
        return "GET", "/v1/card", None, {}
    raise MethodNotFoundError(f"{op} has no A2A 0.3 REST route", method=op)


def _list_query(data: Json) -> dict[str, str]:
    # A 0.3 server needs none of these; relaykit's /v1/tasks honours them, the SDK's ignores them.
    query = {k: str(data[k]) for k in ("contextId", "pageSize", "pageToken") if data.get(k)}
    if data.get("status") not in (None, "", "TASK_STATE_UNSPECIFIED"):
        query["status"] = STATE_OUT.get(str(data["status"]), str(data["status"]))
    if data.get("historyLength") is not None:
        query["historyLength"] = str(data["historyLength"] or 1)  # 0.3's 0 means "all": 1 is the nearest
    return query


def decode_request(op: Operation, decode: Callable[[Json, Json], Json], params: Json, path: Json) -> A2AModel:
    """A 0.3 route's params (body or query) and path params as the validated 1.0 request of ``op``
    (``ValidationError`` as for 1.0; a 0.3 peer's ``null`` members read as absent: ``_json.decode``)."""
    return decode_json(op.request, lambda p: decode(p, path), params)


def _object(payload: Any) -> Json:
    return payload if isinstance(payload, dict) else {}


def _tasks_in(payload: Any) -> Json:
    tasks = [pj.task_in(t) for t in (payload if isinstance(payload, list) else _object(payload).get("tasks", []))]
    return {"tasks": tasks, "pageSize": len(tasks), "totalSize": len(tasks)}


def _configs_in(payload: Any) -> Json:
    items = payload if isinstance(payload, list) else _object(payload).get("configs", [])
    return {"configs": [pj.config_in(c) for c in items]}


# Operation ⇒ how its 0.3 body becomes the 1.0 response dict (any other: a push config).
_RESPONSES: dict[str, Callable[[Any], Any]] = {
    "SendMessage": lambda p: pj.stream_in(_object(p)),
    "GetTask": lambda p: pj.task_in(_object(p)),
    "CancelTask": lambda p: pj.task_in(_object(p)),
    "ListTasks": _tasks_in,
    "ListTaskPushNotificationConfigs": _configs_in,
    "GetExtendedAgentCard": lambda p: card_in(_object(p)),
}


def decode_response(op: Operation, payload: Any) -> Any:
    """A 0.3 REST response body as the 1.0 response model of ``op`` (``None`` for Empty; ``ValidationError`` when
    malformed); ``null`` members read as absent."""
    if op.response is None:
        return None
    return decode_json(op.response, _RESPONSES.get(op.name, lambda p: pj.config_in(_object(p))), payload)


def decode_event(payload: Any) -> StreamResponse:
    """One 0.3 REST stream event as the 1.0 StreamResponse (``null`` members read as absent)."""
    try:
        return decode_json(StreamResponse, lambda p: pj.stream_in(_object(p)), payload)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidAgentResponseError(f"malformed 0.3 stream event: {exc}") from None


_BY_STATUS: dict[int, type[A2AError]] = {
    404: TaskNotFoundError,
    409: TaskNotCancelableError,
    501: UnsupportedOperationError,
    415: ContentTypeNotSupportedError,
    422: InvalidParamsError,
    502: InvalidAgentResponseError,
}


def decode_error(status: int, payload: Any) -> A2AError | None:
    """A 0.3 REST error answer as its class: the JSON-RPC error object relaykit sends, else the status 0.3 servers
    used (their bodies carry only ``message``). ``None``: not a 0.3 error body (the caller decides)."""
    if isinstance(payload, dict) and isinstance(payload.get("code"), int):
        return error_from_jsonrpc(payload)
    if isinstance(payload, dict) and "message" in payload and status in _BY_STATUS:
        return _BY_STATUS[status](str(payload["message"]))
    return None
