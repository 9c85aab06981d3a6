"""A2A 0.3 JSON objects (the JSON-RPC binding's ``kind``-tagged shapes) to and from A2A 1.0 ProtoJSON dicts.

Both sides are plain decoded JSON (``dict``/``list``/scalars): the 1.0 side is exactly what ``A2AModel.to_dict()``
gives and what the 1.0 models validate, so the codec never builds a model of its own and the 1.0 models stay the one
place that checks content. Rules (spec v0.3.0 §6 against the 1.0 digest §8):

* ``kind`` discriminators out (``task``, ``message``, ``status-update``, ``artifact-update``, ``text``, ``file``,
  ``data``); on the way in the discriminator is read, and inferred from the members when a peer left it out.
* Enums: ``TASK_STATE_INPUT_REQUIRED`` ⇄ ``input-required``, ``ROLE_USER`` ⇄ ``user``; UNSPECIFIED ⇄ ``unknown``.
* Parts: 1.0 ``raw``/``url`` + ``mediaType`` + ``filename`` ⇄ 0.3 ``{"kind":"file","file":{"bytes"|"uri",
  "mimeType","name"}}``. A 0.3 data part holds an object: a 1.0 data part holding anything else travels as
  ``{"value": X}`` (the one lossy corner, documented in the module and the issue note).
* ``final`` on a status update is true when the state is terminal or interrupted: the two points where 1.0 closes a
  SendStreamingMessage stream.
* Push configs: 0.3 ``{taskId, pushNotificationConfig:{id,url,token,authentication:{schemes,credentials}}}`` ⇄ the
  flat 1.0 config with one ``scheme``. A 0.3 config without an id gets the task id (what 0.3 servers did), so a 0.3
  ``get`` naming only the task finds it.
* ``historyLength: 0`` meant "no limit" in 0.3 and means "no history" in 1.0: a 0.3 zero is sent on as unset.
* ``null`` for a member (``contextId``, ``taskId``, ``referenceTaskIds``, ``extensions``, ``metadata``,
  ``artifacts``, ``history``, …) means absent, as 0.3 peers (a2a-sdk among them) read it, where the 1.0 models refuse
  ``null`` for a string or a list. ``decode`` (every 0.3 JSON decoder, server and client, validates through it)
  translates and validates as usual; only when validation fails on a ``null`` does it drop the null members (never
  inside ``metadata``, a data part's ``data`` or an extension's ``params``: those are content) and try once more.
  Input without nulls, the common case, pays nothing: no scan, no walk, no copy beyond the translation's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pydantic_core
from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from relaykit._model import A2AModel, Encoded

__all__ = [
    "STATE_IN",
    "STATE_OUT",
    "artifact_in",
    "artifact_out",
    "auth_in",
    "config_in",
    "config_out",
    "decode",
    "event_in",
    "event_out",
    "history_in",
    "message_in",
    "message_out",
    "part_in",
    "part_out",
    "send_params_in",
    "send_params_out",
    "status_in",
    "status_out",
    "task_in",
    "task_out",
]

Json = dict[str, Any]
M = TypeVar("M", bound=A2AModel)

STATE_OUT: dict[str, str] = {
    "TASK_STATE_UNSPECIFIED": "unknown",
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
STATE_IN: dict[str, str] = {v: k for k, v in STATE_OUT.items()}
_ROLE_OUT = {"ROLE_USER": "user", "ROLE_AGENT": "agent", "ROLE_UNSPECIFIED": "unknown"}
_ROLE_IN = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
# States that end a 0.3 stream's interaction: terminal or interrupted (0.3 ``final: true``).
FINAL_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)


def _enum_in(table: dict[str, str], value: Any) -> Any:
    # Unknown text goes on unchanged: the 1.0 enum's own tolerant parser (numbers, 1.0 names) or its error decides.
    return table.get(value, value) if isinstance(value, str) else value


# --- 1.0 ⇒ 0.3 ---------------------------------------------------------------------------------------------


def part_out(part: Json) -> Json:
    """A 1.0 Part as a 0.3 TextPart / FilePart / DataPart."""
    if "text" in part:
        out: Json = {"kind": "text", "text": part["text"]}
    elif "raw" in part or "url" in part:
        file: Json = {"bytes": part["raw"]} if "raw" in part else {"uri": part["url"]}
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {"kind": "file", "file": file}
    else:
        data = part.get("data")
        out = {"kind": "data", "data": data if isinstance(data, dict) else {"value": data}}
    if part.get("metadata") is not None:
        out["metadata"] = part["metadata"]
    return out


def message_out(message: Json) -> Json:
    """A 1.0 Message as a 0.3 Message (``kind: "message"``)."""
    out = dict(message)
    out["kind"] = "message"
    out["role"] = _ROLE_OUT.get(message.get("role", ""), "unknown")
    out["parts"] = [part_out(p) for p in message.get("parts", ())]
    return out


def artifact_out(artifact: Json) -> Json:
    """A 1.0 Artifact as a 0.3 Artifact (same members; its parts converted)."""
    out = dict(artifact)
    out["parts"] = [part_out(p) for p in artifact.get("parts", ())]
    return out


def status_out(status: Json) -> Json:
    """A 1.0 TaskStatus as a 0.3 TaskStatus (lower-case state)."""
    out = dict(status)
    out["state"] = STATE_OUT.get(status.get("state", ""), "unknown")
    message = status.get("message")
    if message is not None:
        out["message"] = message_out(message)
    return out


def task_out(task: Json) -> Json:
    """A 1.0 Task as a 0.3 Task (``kind: "task"``; ``contextId`` always present, as 0.3 requires)."""
    out = dict(task)
    out["kind"] = "task"
    out.setdefault("contextId", "")
    out["status"] = status_out(task["status"])
    if "artifacts" in task:
        out["artifacts"] = [artifact_out(a) for a in task["artifacts"]]
    if "history" in task:
        out["history"] = [message_out(m) for m in task["history"]]
    return out


def event_out(response: Json) -> Json:
    """A 1.0 StreamResponse (or SendMessageResponse) as the 0.3 object it carries, with its ``kind``."""
    if "artifactUpdate" in response:
        event = response["artifactUpdate"]
        out = dict(event)
        out["kind"] = "artifact-update"
        out["artifact"] = artifact_out(event["artifact"])
        return out
    if "statusUpdate" in response:
        event = response["statusUpdate"]
        out = dict(event)
        out["kind"] = "status-update"
        out["status"] = status_out(event["status"])
        out["final"] = event["status"].get("state") in FINAL_STATES
        return out
    if "task" in response:
        return task_out(response["task"])
    return message_out(response["message"])


def config_out(config: Json) -> Json:
    """A 1.0 TaskPushNotificationConfig as the 0.3 one (``{taskId, pushNotificationConfig}``)."""
    inner: Json = {"url": config.get("url", "")}
    if config.get("id"):
        inner["id"] = config["id"]
    if config.get("token"):
        inner["token"] = config["token"]
    auth = config.get("authentication")
    if auth:
        inner["authentication"] = {"schemes": [auth["scheme"]] if auth.get("scheme") else []}
        if auth.get("credentials"):
            inner["authentication"]["credentials"] = auth["credentials"]
    return {"taskId": config.get("taskId", ""), "pushNotificationConfig": inner}


def send_params_out(request: Json) -> Json:
    """A 1.0 SendMessageRequest as 0.3 MessageSendParams (client side)."""
    out: Json = {"message": message_out(request["message"])}
    config = request.get("configuration")
    if config:
        conf: Json = {"blocking": not config.get("returnImmediately", False)}
        if config.get("acceptedOutputModes"):
            conf["acceptedOutputModes"] = config["acceptedOutputModes"]
        if config.get("historyLength") is not None:
            conf["historyLength"] = config["historyLength"]
        push = config.get("taskPushNotificationConfig")
        if push:
            conf["pushNotificationConfig"] = config_out(push)["pushNotificationConfig"]
        out["configuration"] = conf
    if request.get("metadata") is not None:
        out["metadata"] = request["metadata"]
    return out


# --- 0.3 ⇒ 1.0 ---------------------------------------------------------------------------------------------


def as_object(value: Any) -> Json:
    """``value`` if it is a JSON object, else ``{}``."""
    # Anything but an object is left for the 1.0 validator to reject with a field-level message.
    return value if isinstance(value, dict) else {}


def auth_in(auth: Any, at: tuple[str, ...]) -> Any:
    """0.3 push ``authentication`` (``{schemes: [name, …], credentials}``, at ``at`` in the request) as 1.0's
    (``{scheme, credentials}``: the first scheme, "" for none); ``None`` when absent.

    ``schemes`` of another JSON type than a list is refused as validation refuses a field (``ValidationError``
    naming it): its "first" entry would be a key, a letter or a crash. An ``authentication`` that is not an object
    goes on as it is, for the 1.0 validator to refuse.
    """
    if not isinstance(auth, dict):
        return auth
    schemes = auth.get("schemes")
    if schemes is None:
        schemes = []
    elif not isinstance(schemes, list):
        line: InitErrorDetails = {"type": "list_type", "loc": (*at, "schemes"), "input": schemes}
        raise ValidationError.from_exception_data("authentication", [line], hide_input=True)
    out: Json = {"scheme": schemes[0] if schemes else ""}
    if auth.get("credentials"):
        out["credentials"] = auth["credentials"]
    return out


# Members whose value is content, not A2A structure: a null in them is kept (any metadata, a 0.3 data part's object,
# a card extension's params).
_CONTENT = frozenset({"metadata", "data", "params"})


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v if k in _CONTENT else _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(item) for item in value]
    return value


def decode(model: type[M], translate: Callable[[Any], Any], value: Any) -> M:
    """``model`` validated from ``translate(value)``: decoded 0.3 JSON in, the 1.0 model out (``ValidationError`` as
    for 1.0 input). A validation that fails on a ``null`` is tried once more with the null members dropped (module
    docstring), so a 0.3 peer's ``"contextId": null`` reads as absent while the common input is validated once.

    >>> from relaykit import Message
    >>> sent = {"messageId": "m", "role": "user", "parts": [{"text": "hi"}], "taskId": None}
    >>> decode(Message, message_in, sent).task_id
    ''
    """
    validator = model.__pydantic_validator__
    try:
        first: M = validator.validate_python(translate(value))
        return first
    except ValidationError as exc:
        if not any(error["input"] is None for error in exc.errors(include_url=False)):
            raise
    again: M = validator.validate_python(translate(_drop_nulls(value)))
    return again


def as_dict(result: Any) -> Any:
    """A handler result (encoded bytes, a model, or plain data) as JSON data, for the 0.3 encoders (RPC and REST)."""
    if isinstance(result, Encoded):
        return pydantic_core.from_json(result.data)
    if isinstance(result, A2AModel):
        return result.to_dict()
    return result


def part_in(part: Any) -> Any:
    """A 0.3 Part (by ``kind``, or by its members when ``kind`` is missing) as a 1.0 Part."""
    if not isinstance(part, dict):
        return part
    kind = part.get("kind") or ("text" if "text" in part else "file" if "file" in part else "data")
    out: Json
    if kind == "text":
        out = {"text": part.get("text")}
    elif kind == "file":
        file = as_object(part.get("file"))
        out = {"raw": file["bytes"]} if "bytes" in file else {"url": file.get("uri")}
        if file.get("mimeType"):
            out["mediaType"] = file["mimeType"]
        if file.get("name"):
            out["filename"] = file["name"]
    elif kind == "data":
        out = {"data": part.get("data")}
    else:
        out = {}  # an unknown kind: no member set, so the 1.0 Part validator names the problem
    if part.get("metadata") is not None:
        out["metadata"] = part["metadata"]
    return out


def message_in(message: Any) -> Any:
    """A 0.3 Message as a 1.0 Message."""
    if not isinstance(message, dict):
        return message
    out = dict(message)
    out.pop("kind", None)
    if "role" in message:
        out["role"] = _enum_in(_ROLE_IN, message["role"])
    parts = message.get("parts")
    if isinstance(parts, list):
        out["parts"] = [part_in(p) for p in parts]
    return out


def artifact_in(artifact: Any) -> Any:
    """A 0.3 Artifact as a 1.0 Artifact."""
    if not isinstance(artifact, dict):
        return artifact
    out = dict(artifact)
    parts = artifact.get("parts")
    if isinstance(parts, list):
        out["parts"] = [part_in(p) for p in parts]
    return out


def status_in(status: Any) -> Any:
    """A 0.3 TaskStatus as a 1.0 TaskStatus."""
    if not isinstance(status, dict):
        return status
    out = dict(status)
    if "state" in status:
        out["state"] = _enum_in(STATE_IN, status["state"])
    if status.get("message") is not None:
        out["message"] = message_in(status["message"])
    return out


def task_in(task: Any) -> Any:
    """A 0.3 Task as a 1.0 Task."""
    if not isinstance(task, dict):
        return task
    out = dict(task)
    out.pop("kind", None)
    out["status"] = status_in(task.get("status"))
    if isinstance(task.get("artifacts"), list):
        out["artifacts"] = [artifact_in(a) for a in task["artifacts"]]
    if isinstance(task.get("history"), list):
        out["history"] = [message_in(m) for m in task["history"]]
    return out


def event_in(event: Any) -> Json:
    """A 0.3 stream/send result (Task, Message or an update event, by ``kind``) as a 1.0 StreamResponse dict."""
    data = as_object(event)
    kind = data.get("kind")
    if kind == "status-update" or (kind is None and "final" in data):
        out = dict(data)
        out.pop("kind", None)
        out.pop("final", None)
        out["status"] = status_in(data.get("status"))
        return {"statusUpdate": out}
    if kind == "artifact-update" or (kind is None and "artifact" in data):
        out = dict(data)
        out.pop("kind", None)
        out["artifact"] = artifact_in(data.get("artifact"))
        return {"artifactUpdate": out}
    if kind == "message" or (kind is None and "messageId" in data):
        return {"message": message_in(data)}
    return {"task": task_in(data)}


def config_in(config: Any, task_id: str = "", at: tuple[str, ...] = ()) -> Json:
    """A 0.3 TaskPushNotificationConfig (or a bare PushNotificationConfig with ``task_id``; ``at`` where it sits in
    the request) as the 1.0 one."""
    data = as_object(config)
    wrapped = "pushNotificationConfig" in data
    inner = as_object(data.get("pushNotificationConfig")) if wrapped else data
    at = (*at, "pushNotificationConfig") if wrapped else at
    task_id = data.get("taskId", task_id) if wrapped else task_id
    out: Json = {"taskId": task_id, "url": inner.get("url")}
    out["id"] = inner.get("id") or task_id
    if inner.get("token"):
        out["token"] = inner["token"]
    auth = auth_in(inner.get("authentication"), (*at, "authentication"))
    if auth is not None:
        out["authentication"] = auth
    return out


def history_in(value: Any) -> Any:
    """0.3 ``historyLength``: 0 (or absent) is "no limit", which 1.0 spells as unset."""
    return None if value == 0 else value


def send_params_in(params: Json) -> Json:
    """0.3 MessageSendParams as a 1.0 SendMessageRequest dict (blocking unless ``blocking: false``)."""
    out: Json = {"message": message_in(params.get("message"))}
    config = params.get("configuration")
    if isinstance(config, dict):
        conf: Json = {"returnImmediately": config.get("blocking") is False}
        if config.get("acceptedOutputModes") is not None:
            conf["acceptedOutputModes"] = config["acceptedOutputModes"]
        history = history_in(config.get("historyLength"))
        if history is not None:
            conf["historyLength"] = history
        push = config.get("pushNotificationConfig")
        if push is not None:
            conf["taskPushNotificationConfig"] = config_in(push, at=("configuration", "pushNotificationConfig"))
        out["configuration"] = conf
    if params.get("metadata") is not None:
        out["metadata"] = params["metadata"]
    return out
