"""A2A 0.3 protobuf shapes, as ProtoJSON dicts, to and from A2A 1.0 ProtoJSON dicts: the HTTP+JSON binding of 0.3
(its bodies are the ProtoJSON of the 0.3 proto, package ``a2a.v1``) and, through ``json_format``, its gRPC binding.

Where the 0.3 proto differs from 1.0 (digest §8): a message's parts are ``content``; a part is ``text`` |
``file{fileWithUri|fileWithBytes, mimeType, name}`` | ``data{data}``, with ``metadata`` beside (part metadata and
file name are in the 0.3 JSON schema but not in the v0.3.0 proto: relaykit's 0.3 proto has them as a2a-sdk 0.3's
does); ``TASK_STATE_CANCELLED``; a status update carries ``final``; the send configuration has ``pushNotification`` and
``blocking`` (proto3: absent means false, so a configuration without it asks for an immediate answer); push
configs are resources named ``tasks/{id}/pushNotificationConfigs/{configId}`` whose authentication lists
``schemes``; requests name tasks as ``tasks/{id}``. Inputs accept the ProtoJSON field names and the proto names.
A ``null`` member means absent (``relaykit._v03._json.decode``; gRPC's messages never hold one).
"""

from __future__ import annotations

from typing import Any

from relaykit._v03._json import FINAL_STATES, as_object, auth_in, history_in

__all__ = [
    "config_in",
    "config_out",
    "message_in",
    "message_out",
    "resource_id",
    "send_request_in",
    "send_request_out",
    "state_in",
    "stream_in",
    "stream_out",
    "task_in",
    "task_out",
]

Json = dict[str, Any]
_CANCELED, _CANCELLED = "TASK_STATE_CANCELED", "TASK_STATE_CANCELLED"


def _get(data: Json, *names: str) -> Any:
    for name in names:
        if name in data:
            return data[name]
    return None


# --- 1.0 ⇒ 0.3 ---------------------------------------------------------------------------------------------


def part_out(part: Json) -> Json:
    out: Json
    if "text" in part:
        out = {"text": part["text"]}
    elif "raw" in part or "url" in part:
        file: Json = {"fileWithBytes": part["raw"]} if "raw" in part else {"fileWithUri": part["url"]}
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {"file": file}
    else:
        data = part.get("data")
        out = {"data": {"data": data if isinstance(data, dict) else {"value": data}}}
    if part.get("metadata") is not None:
        out["metadata"] = part["metadata"]
    return out


def message_out(message: Json) -> Json:
    out = {k: v for k, v in message.items() if k not in ("parts", "referenceTaskIds")}
    out["content"] = [part_out(p) for p in message.get("parts", ())]
    return out


def _artifact_out(artifact: Json) -> Json:
    out = dict(artifact)
    out["parts"] = [part_out(p) for p in artifact.get("parts", ())]
    return out


def _status_out(status: Json) -> Json:
    out = dict(status)
    if status.get("state") == _CANCELED:
        out["state"] = _CANCELLED
    if status.get("message") is not None:
        out["message"] = message_out(status["message"])
    return out


def task_out(task: Json) -> Json:
    out = dict(task)
    out["status"] = _status_out(task["status"])
    if "artifacts" in task:
        out["artifacts"] = [_artifact_out(a) for a in task["artifacts"]]
    if "history" in task:
        out["history"] = [message_out(m) for m in task["history"]]
    return out


def stream_out(response: Json) -> Json:
    """A 1.0 StreamResponse / SendMessageResponse dict as the 0.3 one (``final`` on status updates)."""
    if "artifactUpdate" in response:
        event = dict(response["artifactUpdate"])
        event["artifact"] = _artifact_out(event["artifact"])
        return {"artifactUpdate": event}
    if "statusUpdate" in response:
        event = dict(response["statusUpdate"])
        event["final"] = event["status"].get("state") in FINAL_STATES
        event["status"] = _status_out(event["status"])
        return {"statusUpdate": event}
    if "task" in response:
        return {"task": task_out(response["task"])}
    return {"message": message_out(response["message"])}


def config_out(config: Json) -> Json:
    """A 1.0 TaskPushNotificationConfig as the 0.3 resource."""
    inner: Json = {"url": config.get("url", "")}
    for key in ("id", "token"):
        if config.get(key):
            inner[key] = config[key]
    auth = config.get("authentication")
    if auth:
        inner["authentication"] = {"schemes": [auth["scheme"]] if auth.get("scheme") else []}
        if auth.get("credentials"):
            inner["authentication"]["credentials"] = auth["credentials"]
    name = f"tasks/{config.get('taskId', '')}/pushNotificationConfigs/{config.get('id', '')}"
    return {"name": name, "pushNotificationConfig": inner}


def send_request_out(request: Json) -> Json:
    """A 1.0 SendMessageRequest dict as the 0.3 one (client side)."""
    out: Json = {"message": message_out(request["message"])}
    config = request.get("configuration") or {}
    conf: Json = {"blocking": not config.get("returnImmediately", False)}
    if config.get("acceptedOutputModes"):
        conf["acceptedOutputModes"] = config["acceptedOutputModes"]
    if config.get("historyLength"):
        conf["historyLength"] = config["historyLength"]
    if config.get("taskPushNotificationConfig"):
        conf["pushNotification"] = config_out(config["taskPushNotificationConfig"])["pushNotificationConfig"]
    out["configuration"] = conf
    if request.get("metadata") is not None:
        out["metadata"] = request["metadata"]
    return out


# --- 0.3 ⇒ 1.0 ---------------------------------------------------------------------------------------------


def part_in(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    out: Json
    if "text" in part:
        out = {"text": part["text"]}
    elif "file" in part:
        file = as_object(part["file"])
        raw = _get(file, "fileWithBytes", "file_with_bytes")
        out = {"raw": raw} if raw is not None else {"url": _get(file, "fileWithUri", "file_with_uri")}
        mime = _get(file, "mimeType", "mime_type")
        if mime:
            out["mediaType"] = mime
        name = file.get("name")
        if name:
            out["filename"] = name
    elif "data" in part:
        out = {"data": as_object(part["data"]).get("data", {})}
    else:
        out = {}  # no member set: the 1.0 Part validator names the problem
    if part.get("metadata") is not None:
        out["metadata"] = part["metadata"]
    return out


def message_in(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out: Json = {}
    for key, value in message.items():
        if key in ("content", "parts"):
            out["parts"] = [part_in(p) for p in value] if isinstance(value, list) else value
        elif key in ("message_id", "context_id", "task_id"):
            out[{"message_id": "messageId", "context_id": "contextId", "task_id": "taskId"}[key]] = value
        else:
            out[key] = value
    return out


def state_in(state: Any) -> Any:
    """A 0.3 ProtoJSON task state (its ``CANCELLED`` spelling included) as the 1.0 name."""
    return _CANCELED if state == _CANCELLED else state


def _status_in(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    out = {k: v for k, v in status.items() if k != "update"}
    if "state" in out:
        out["state"] = state_in(out["state"])
    message = _get(status, "message", "update")
    if message is not None:
        out["message"] = message_in(message)
    return out


def _artifact_in(artifact: Any) -> Any:
    if not isinstance(artifact, dict):
        return artifact
    out = dict(artifact)
    if isinstance(artifact.get("parts"), list):
        out["parts"] = [part_in(p) for p in artifact["parts"]]
    return out


def task_in(task: Any) -> Any:
    if not isinstance(task, dict):
        return task
    out = dict(task)
    out["status"] = _status_in(task.get("status"))
    if isinstance(task.get("artifacts"), list):
        out["artifacts"] = [_artifact_in(a) for a in task["artifacts"]]
    if isinstance(task.get("history"), list):
        out["history"] = [message_in(m) for m in task["history"]]
    return out


def _default_context(event: Json) -> None:
    if "contextId" not in event and "context_id" not in event:
        event["contextId"] = ""


def stream_in(response: Json) -> Json:
    """A 0.3 StreamResponse / SendMessageResponse dict as the 1.0 one."""
    update = _get(response, "statusUpdate", "status_update")
    if update is not None:
        event = {k: v for k, v in as_object(update).items() if k != "final"}
        event["status"] = _status_in(event.get("status"))
        # A proto3 string left empty is not sent (ProtoJSON, and gRPC decoded to it): @a2a-js/sdk 0.3's update on a
        # cancel carries no contextId. Absent is "", the field's default, not a malformed event.
        _default_context(event)
        return {"statusUpdate": event}
    update = _get(response, "artifactUpdate", "artifact_update")
    if update is not None:
        event = dict(as_object(update))
        event["artifact"] = _artifact_in(event.get("artifact"))
        _default_context(event)
        return {"artifactUpdate": event}
    message = _get(response, "message", "msg")
    if message is not None:
        return {"message": message_in(message)}
    return {"task": task_in(response.get("task"))}


def resource_id(name: Any, collection: str = "tasks") -> str:
    """The id in a resource name: ``tasks/abc`` ⇒ ``abc`` (a bare id is returned unchanged)."""
    text = str(name or "")
    prefix = collection + "/"
    return text[len(prefix) :] if text.startswith(prefix) else text


def config_in(config: Any, task_id: str = "", config_id: Any = "", at: tuple[str, ...] = ()) -> Json:
    """A 0.3 TaskPushNotificationConfig resource (or bare PushNotificationConfig; ``at`` where it sits in the request)
    as the 1.0 config."""
    data = as_object(config)
    wrapped = "name" in data or ("pushNotificationConfig" in data or "push_notification_config" in data)
    inner = as_object(_get(data, "pushNotificationConfig", "push_notification_config")) if wrapped else data
    at = (*at, "pushNotificationConfig") if wrapped else at
    name = str(data.get("name") or "")
    if name.startswith("tasks/"):
        parts = name.split("/")
        task_id = task_id or parts[1]
        if len(parts) >= 4:
            config_id = config_id or parts[3]
    out: Json = {"taskId": task_id, "url": inner.get("url")}
    out["id"] = inner.get("id") or config_id or task_id
    if inner.get("token"):
        out["token"] = inner["token"]
    auth = auth_in(inner.get("authentication"), (*at, "authentication"))
    if auth is not None:
        out["authentication"] = auth
    return out


def send_request_in(body: Json) -> Json:
    """A 0.3 SendMessageRequest dict as the 1.0 one (``blocking`` absent in a configuration means false)."""
    out: Json = {"message": message_in(_get(body, "message", "request"))}
    config = body.get("configuration")
    if isinstance(config, dict):
        conf: Json = {"returnImmediately": not config.get("blocking", False)}
        modes = _get(config, "acceptedOutputModes", "accepted_output_modes")
        if modes:
            conf["acceptedOutputModes"] = modes
        history = history_in(_get(config, "historyLength", "history_length"))
        if history is not None:
            conf["historyLength"] = history
        push = _get(config, "pushNotification", "push_notification")
        if isinstance(push, dict) and push.get("url"):
            conf["taskPushNotificationConfig"] = config_in(push, at=("configuration", "pushNotification"))
        out["configuration"] = conf
    if body.get("metadata") is not None:
        out["metadata"] = body["metadata"]
    return out
