"""Wire fidelity against the official a2a-sdk 1.3.0: every A2A object, both directions.

SDK → relaykit: each object is built with the SDK's protobuf classes (``lf.a2a.v1``), put on the wire the way the SDK
itself does it (``google.protobuf.json_format.MessageToDict`` + ``json.dumps``; ListTasks responses through the SDK's
``serialize_list_tasks_response``), parsed with ``relaykit.types.X.from_json``, re-emitted with ``to_json`` and
compared with the SDK's JSON after dropping default-valued implicit-presence fields. The re-emitted JSON must also
parse (strictly) back into exactly the object the SDK started from.

relaykit → SDK: the same object is built with relaykit's constructors, emitted with ``to_json``, parsed with the SDK's
strict ``json_format.Parse`` (no unknown fields allowed), re-emitted by the SDK and compared; the parsed proto must
equal the SDK-built one, so both builders provably describe the same object.

How the comparison works (``walk``): it follows the proto descriptor of the object, so it knows each field's presence
rules. Implicit-presence fields (plain scalars, enums, repeated, maps) holding their default (``""``, ``false``,
``0``, ``*_UNSPECIFIED``, ``[]``, ``{}``) are dropped from the SDK side; presence-tracked fields (proto ``optional``
such as ``historyLength``, oneof members such as ``{"text": ""}``, and every message-typed field) are kept even when
empty. Free-form JSON (``Struct``/``Value``: ``metadata``, ``params``, ``header``, ``Part.data``) is never walked into.
On relaykit's side nothing is dropped: any default-valued implicit field it emits is a failure, except the REQUIRED
fields relaykit deliberately always emits (all four of ListTasksResponse; the required AgentCard fields).

Timestamps are compared as instants (seconds, nanos). Why: protobuf emits 0, 3, 6 or 9 fractional digits depending on
the value (``…:05Z`` for whole seconds, ``…:05.678Z`` for milliseconds), while relaykit always emits exactly three
(``…:05.000Z``). Both are valid RFC 3339 for the same instant. Separately, every timestamp relaykit emits must match
``YYYY-MM-DDTHH:MM:SS.mmmZ``, and when the SDK's value has millisecond precision the strings are identical (checked in
``test_millisecond_timestamps_are_byte_identical``). Leaves are compared type-tagged, so ``true`` never equals ``1``,
while ``1`` equals ``1.0`` (protobuf's ``Value`` stores every number as a double).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import serialize_list_tasks_response
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as ProtoMessage
from pydantic import ValidationError

from relaykit import types as rk

pytestmark = pytest.mark.interop

# --- comparison machinery ----------------------------------------------------------------------------------

_FREE_JSON = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})
_TIMESTAMP = "google.protobuf.Timestamp"
_MS_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def _is_map(f: FieldDescriptor) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _holds_default(f: FieldDescriptor, value: Any) -> bool:
    """True when an implicit-presence field holds its proto default (so ProtoJSON would leave it out)."""
    if _is_map(f):
        return value == {}
    if f.is_repeated:
        return value == []
    if f.message_type is not None:
        return False
    if f.enum_type is not None:
        return value in (f.enum_type.values_by_number[0].name, 0)
    if f.type == FieldDescriptor.TYPE_BOOL:
        return value is False
    if f.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return value == ""
    return value == 0 and not isinstance(value, bool)


@dataclass
class Walked:
    canonical: Any
    defaults: list[str] = field(default_factory=list)  # JSON paths of implicit fields holding their default
    timestamps: list[str] = field(default_factory=list)  # every raw timestamp string seen


def walk(data: Any, desc: Descriptor, *, drop: bool) -> Walked:
    """Check ``data`` against the proto schema, optionally dropping default-valued implicit-presence fields.

    Fails on keys that are not fields of the message. Timestamps become ``("instant", seconds, nanos)``.
    """
    result = Walked(None)

    def message(obj: Any, d: Descriptor, path: str) -> dict[str, Any]:
        assert isinstance(obj, dict), f"{path}: expected a JSON object for {d.full_name}, got {obj!r}"
        by_json = {f.json_name: f for f in d.fields}
        out: dict[str, Any] = {}
        for key, value in obj.items():
            f = by_json.get(key)
            where = f"{path}.{key}"
            assert f is not None, f"{where}: not a field of {d.full_name}"
            if not f.has_presence and _holds_default(f, value):
                result.defaults.append(where)
                if drop:
                    continue
            out[key] = field_value(f, value, where)
        return out

    def field_value(f: FieldDescriptor, value: Any, where: str) -> Any:
        if _is_map(f):
            value_field = f.message_type.fields_by_name["value"]
            return {k: single(value_field, v, f"{where}[{k!r}]") for k, v in value.items()}
        if f.is_repeated:
            assert isinstance(value, list), f"{where}: expected a JSON array, got {value!r}"
            return [single(f, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return single(f, value, where)

    def single(f: FieldDescriptor, value: Any, where: str) -> Any:
        mt = f.message_type
        if mt is None or mt.full_name in _FREE_JSON:
            return value
        if mt.full_name == _TIMESTAMP:
            result.timestamps.append(value)
            stamp = timestamp_pb2.Timestamp()
            stamp.FromJsonString(value)
            return ("instant", stamp.seconds, stamp.nanos)
        return message(value, mt, where)

    result.canonical = message(data, desc, "$")
    return result


def _tagged(value: Any) -> Any:
    """Type-tag JSON leaves so that ``true != 1`` while ``1 == 1.0`` (protobuf Value numbers are doubles)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, dict):
        return {k: _tagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    return value


def expected_wire(sdk_json: dict[str, Any], desc: Descriptor, always: dict[str, Any]) -> Any:
    """The SDK's JSON with defaults dropped, plus the fields relaykit deliberately always emits."""
    out = walk(sdk_json, desc, drop=True).canonical
    for key, default in always.items():
        out.setdefault(key, default)
    return _tagged(out)


def relaykit_wire(text: bytes, desc: Descriptor, always: dict[str, Any]) -> Any:
    """relaykit's JSON, checked for stray defaults and timestamp format, in comparable form."""
    walked = walk(json.loads(text), desc, drop=False)
    stray = [p for p in walked.defaults if p.removeprefix("$.") not in always]
    assert not stray, f"relaykit emitted default-valued implicit-presence fields: {stray}"
    odd = [s for s in walked.timestamps if not _MS_TIMESTAMP.match(s)]
    assert not odd, f"relaykit timestamps must be UTC with milliseconds and Z: {odd}"
    return _tagged(walked.canonical)


def sdk_wire(msg: ProtoMessage) -> dict[str, Any]:
    """What the SDK's transports and dispatchers put on the wire for a message."""
    return json_format.MessageToDict(msg)


def sdk_list_tasks_wire(msg: ProtoMessage) -> dict[str, Any]:
    """The SDK serves ListTasks with ``always_print_fields_with_no_presence`` (it emits defaults)."""
    assert isinstance(msg, pb.ListTasksResponse)
    return serialize_list_tasks_response(msg, include_artifacts=True)


# --- building the same object on both sides ----------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """One value as the SDK spells it and as relaykit spells it."""

    sdk: Any
    rk: Any


def _side(value: Any, which: str) -> Any:
    if isinstance(value, Pair):
        return getattr(value, which)
    if isinstance(value, list):
        return [_side(v, which) for v in value]
    if isinstance(value, dict) and any(isinstance(v, Pair) for v in value.values()):
        return {k: _side(v, which) for k, v in value.items()}
    return value


def build(type_name: str, **fields: Any) -> Pair:
    """Construct ``type_name`` with the SDK's proto class and with relaykit's model from the same field values."""
    sdk_obj = getattr(pb, type_name)(**{k: _side(v, "sdk") for k, v in fields.items()})
    rk_obj = getattr(rk, type_name)(**{k: _side(v, "rk") for k, v in fields.items()})
    return Pair(sdk_obj, rk_obj)


def _pb_timestamp(text: str) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromJsonString(text)
    return stamp


def ts(text: str) -> Pair:
    return Pair(_pb_timestamp(text), datetime.fromisoformat(text))


def data(value: Any) -> Pair:
    proto_value = struct_pb2.Value()
    json_format.ParseDict(value, proto_value)
    return Pair(proto_value, value)


def state(name: str) -> Pair:
    return Pair(pb.TaskState.Value(f"TASK_STATE_{name}"), rk.TaskState[name])


USER = Pair(pb.ROLE_USER, rk.Role.USER)
AGENT = Pair(pb.ROLE_AGENT, rk.Role.AGENT)
STATES = [n for n in pb.TaskState.keys() if n != "TASK_STATE_UNSPECIFIED"]  # noqa: SIM118 (proto enum wrapper)

# Non-ASCII bytes chosen so standard base64 has '+', '/' and padding: "+/+/PgCA/+KCrA==".
RAW = bytes([0xFB, 0xFF, 0xBF, 0x3E, 0x00, 0x80, 0xFF]) + "€".encode()
TS_MS = "2026-01-02T03:04:05.678Z"
TS_MS_LEADING_ZERO = "2026-05-06T07:08:09.010Z"
TS_WHOLE = "2026-03-04T05:06:07Z"
METADATA = {
    "trace": "abc-123",
    "nested": {"list": [1, "two", None, True, 2.5], "empty": {}, "emptyList": [], "zero": 0, "blank": ""},
    "flag": False,
    "nothing": None,
    "unicode": 'héllo ✓ "q" \\ </script>',
}

PARTS: dict[str, Pair] = {
    "text": build("Part", text='héllo ✓ "q"\n', filename="note.txt", media_type="text/plain", metadata={"lang": "fr"}),
    "text-empty": build("Part", text=""),
    "raw": build("Part", raw=RAW, filename="blob €.bin", media_type="application/octet-stream", metadata={"sha": "x"}),
    "raw-empty": build("Part", raw=b""),
    "url": build(
        "Part",
        url="https://files.example/report.pdf?x=1&y=%20",
        filename="report.pdf",
        media_type="application/pdf",
        metadata={"size": 1234},
    ),
    "data-object": build(
        "Part",
        data=data({"k": 1, "nested": {"a": [1, 2]}, "s": "x", "none": None, "b": True, "e": {}}),
        media_type="application/json",
        filename="data.json",
        metadata={"schema": "v1"},
    ),
    "data-array": build("Part", data=data([1, "two", None, False, {"x": []}, [3]])),
    "data-number": build("Part", data=data(42.5)),
    "data-integer": build("Part", data=data(7)),
    "data-zero": build("Part", data=data(0)),
    "data-string": build("Part", data=data("just a string")),
    "data-string-empty": build("Part", data=data("")),
    "data-true": build("Part", data=data(True)),
    "data-false": build("Part", data=data(False)),
    "data-null": build("Part", data=data(None), media_type="application/json"),
    "data-empty-object": build("Part", data=data({})),
    "data-empty-array": build("Part", data=data([])),
}

MESSAGE_USER = build(
    "Message",
    message_id="msg-user-1",
    context_id="ctx-1",
    task_id="task-1",
    role=USER,
    parts=[PARTS["text"], PARTS["raw"], PARTS["url"]],
    metadata=METADATA,
    extensions=["https://ext.example/a", "urn:ext:b"],
    reference_task_ids=["task-0", "task-00"],
)
MESSAGE_AGENT = build(
    "Message",
    message_id="msg-agent-1",
    context_id="ctx-1",
    task_id="task-1",
    role=AGENT,
    parts=[PARTS["data-object"], PARTS["data-null"], PARTS["text-empty"]],
    metadata={"step": 2},
    extensions=["https://ext.example/a"],
)
MESSAGE_MINIMAL = build("Message", message_id="m", role=USER, parts=[build("Part", text="hi")])

ARTIFACT = build(
    "Artifact",
    artifact_id="art-1",
    name="report",
    description="The full report",
    parts=list(PARTS.values()),
    metadata={"origin": "tool", "n": 3},
    extensions=["https://ext.example/a"],
)
ARTIFACT_MINIMAL = build("Artifact", artifact_id="art-2", parts=[build("Part", text="chunk")])

STATUS_FULL = build("TaskStatus", state=state("WORKING"), message=MESSAGE_AGENT, timestamp=ts(TS_MS))

TASK_FULL = build(
    "Task",
    id="task-1",
    context_id="ctx-1",
    status=build("TaskStatus", state=state("INPUT_REQUIRED"), message=MESSAGE_AGENT, timestamp=ts(TS_MS)),
    artifacts=[ARTIFACT, ARTIFACT_MINIMAL],
    history=[MESSAGE_USER, MESSAGE_AGENT],
    metadata=METADATA,
)
TASK_MINIMAL = build("Task", id="task-2", status=build("TaskStatus", state=state("SUBMITTED")))
TASK_DONE = build(
    "Task",
    id="task-3",
    context_id="ctx-3",
    status=build("TaskStatus", state=state("COMPLETED"), timestamp=ts(TS_WHOLE)),
    artifacts=[ARTIFACT_MINIMAL],
)

STATUS_EVENT = build(
    "TaskStatusUpdateEvent",
    task_id="task-1",
    context_id="ctx-1",
    status=STATUS_FULL,
    metadata={"seq": 4},
)


def artifact_event(append: bool, last_chunk: bool) -> Pair:
    return build(
        "TaskArtifactUpdateEvent",
        task_id="task-1",
        context_id="ctx-1",
        artifact=ARTIFACT,
        append=append,
        last_chunk=last_chunk,
        metadata={"chunk": 1},
    )


AUTH = build("AuthenticationInfo", scheme="Bearer", credentials="tok-€/+=")
PUSH_CONFIG_FULL = build(
    "TaskPushNotificationConfig",
    tenant="acme",
    id="cfg-1",
    task_id="task-1",
    url="https://hooks.example/a2a?x=1",
    token="opaque-token",
    authentication=AUTH,
)
PUSH_CONFIG_MINIMAL = build(
    "TaskPushNotificationConfig",
    url="https://hooks.example/b",
    authentication=build("AuthenticationInfo", scheme="Basic"),
)


def send_message_request(history_length: int | None, return_immediately: bool) -> Pair:
    config: dict[str, Any] = {
        "accepted_output_modes": ["text/plain", "application/json"],
        "task_push_notification_config": PUSH_CONFIG_FULL,
        "return_immediately": return_immediately,
    }
    if history_length is not None:
        config["history_length"] = history_length
    return build(
        "SendMessageRequest",
        tenant="acme",
        message=MESSAGE_USER,
        configuration=build("SendMessageConfiguration", **config),
        metadata={"request": "r-1"},
    )


def get_task_request(history_length: int | None) -> Pair:
    if history_length is None:
        return build("GetTaskRequest", tenant="acme", id="task-1")
    return build("GetTaskRequest", tenant="acme", id="task-1", history_length=history_length)


def list_tasks_request(include_artifacts: bool, status: str) -> Pair:
    return build(
        "ListTasksRequest",
        tenant="acme",
        context_id="ctx-1",
        status=state(status),
        page_size=25,
        page_token="cursor-2",
        history_length=0,
        status_timestamp_after=ts(TS_MS_LEADING_ZERO),
        include_artifacts=include_artifacts,
    )


# --- agent card --------------------------------------------------------------------------------------------

SCHEMES: dict[str, Pair] = {
    "apiKey": build(
        "SecurityScheme",
        api_key_security_scheme=build(
            "APIKeySecurityScheme", description="key in header", location="header", name="X-API-Key"
        ),
    ),
    "httpAuth": build(
        "SecurityScheme",
        http_auth_security_scheme=build(
            "HTTPAuthSecurityScheme", description="bearer", scheme="Bearer", bearer_format="JWT"
        ),
    ),
    "oauth2-authorizationCode": build(
        "SecurityScheme",
        oauth2_security_scheme=build(
            "OAuth2SecurityScheme",
            description="auth code with PKCE",
            oauth2_metadata_url="https://auth.example/.well-known/oauth-authorization-server",
            flows=build(
                "OAuthFlows",
                authorization_code=build(
                    "AuthorizationCodeOAuthFlow",
                    authorization_url="https://auth.example/authorize",
                    token_url="https://auth.example/token",
                    refresh_url="https://auth.example/refresh",
                    scopes={"read": "Read things", "write": "Write things"},
                    pkce_required=True,
                ),
            ),
        ),
    ),
    "oauth2-clientCredentials": build(
        "SecurityScheme",
        oauth2_security_scheme=build(
            "OAuth2SecurityScheme",
            flows=build(
                "OAuthFlows",
                client_credentials=build(
                    "ClientCredentialsOAuthFlow",
                    token_url="https://auth.example/token",
                    refresh_url="https://auth.example/refresh",
                    scopes={"svc": "Service access"},
                ),
            ),
        ),
    ),
    "oauth2-deviceCode": build(
        "SecurityScheme",
        oauth2_security_scheme=build(
            "OAuth2SecurityScheme",
            flows=build(
                "OAuthFlows",
                device_code=build(
                    "DeviceCodeOAuthFlow",
                    device_authorization_url="https://auth.example/device",
                    token_url="https://auth.example/token",
                    scopes={"read": "Read things"},
                ),
            ),
        ),
    ),
    "oauth2-implicit": build(
        "SecurityScheme",
        oauth2_security_scheme=build(
            "OAuth2SecurityScheme",
            flows=build(
                "OAuthFlows",
                implicit=build(
                    "ImplicitOAuthFlow",
                    authorization_url="https://auth.example/authorize",
                    refresh_url="https://auth.example/refresh",
                    scopes={"read": "Read things"},
                ),
            ),
        ),
    ),
    "oauth2-password": build(
        "SecurityScheme",
        oauth2_security_scheme=build(
            "OAuth2SecurityScheme",
            flows=build(
                "OAuthFlows",
                password=build(
                    "PasswordOAuthFlow",
                    token_url="https://auth.example/token",
                    refresh_url="https://auth.example/refresh",
                    scopes={"read": "Read things"},
                ),
            ),
        ),
    ),
    "openIdConnect": build(
        "SecurityScheme",
        open_id_connect_security_scheme=build(
            "OpenIdConnectSecurityScheme",
            description="OIDC",
            open_id_connect_url="https://auth.example/.well-known/openid-configuration",
        ),
    ),
    "mtls": build("SecurityScheme", mtls_security_scheme=build("MutualTlsSecurityScheme", description="mTLS")),
    # A oneof member that is set is emitted even when empty: {"mtlsSecurityScheme": {}}.
    "mtls-empty": build("SecurityScheme", mtls_security_scheme=build("MutualTlsSecurityScheme")),
}

REQ_WITH_SCOPES = build(
    "SecurityRequirement",
    schemes={"oauth2-authorizationCode": build("StringList", list=["read", "write"]), "mtls": build("StringList")},
)
REQ_NO_SCOPES = build("SecurityRequirement", schemes={"httpAuth": build("StringList")})

# relaykit always emits the AgentCard's REQUIRED fields, even when empty (see AgentCard._required_always).
CARD_ALWAYS: dict[str, Any] = {
    "description": "",
    "supportedInterfaces": [],
    "version": "",
    "capabilities": {},
    "defaultInputModes": [],
    "defaultOutputModes": [],
    "skills": [],
}
# relaykit always emits all four (REQUIRED) fields of ListTasksResponse.
LIST_TASKS_ALWAYS: dict[str, Any] = {"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0}


def agent_card_full(protocol_version: str) -> Pair:
    return build(
        "AgentCard",
        name="Relay Agent ✓",
        description="Does relay things",
        supported_interfaces=[
            build(
                "AgentInterface",
                url="https://agent.example/a2a",
                protocol_binding="JSONRPC",
                protocol_version=protocol_version,
            ),
            build(
                "AgentInterface",
                url="https://agent.example/rest",
                protocol_binding="HTTP+JSON",
                tenant="acme",
                protocol_version=protocol_version,
            ),
            build(
                "AgentInterface",
                url="agent.example:443",
                protocol_binding="GRPC",
                tenant="acme",
                protocol_version=protocol_version,
            ),
        ],
        provider=build("AgentProvider", url="https://provider.example", organization="Provider Inc."),
        version="2.1.0",
        documentation_url="https://agent.example/docs",
        capabilities=build(
            "AgentCapabilities",
            streaming=True,
            push_notifications=False,
            extended_agent_card=True,
            extensions=[
                build(
                    "AgentExtension",
                    uri="https://ext.example/a",
                    description="Required extension",
                    required=True,
                    params={"level": 2, "modes": ["x", "y"], "off": False},
                ),
                build("AgentExtension", uri="urn:ext:b"),
            ],
        ),
        security_schemes=dict(SCHEMES),
        security_requirements=[REQ_WITH_SCOPES, REQ_NO_SCOPES],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "image/png"],
        skills=[
            build(
                "AgentSkill",
                id="relay",
                name="Relay",
                description="Relays messages",
                tags=["util", "relay"],
                examples=["relay hello", "relay ✓"],
                input_modes=["text/plain"],
                output_modes=["application/json"],
                security_requirements=[REQ_NO_SCOPES, REQ_WITH_SCOPES],
            ),
            build("AgentSkill", id="echo", name="Echo", description="Echoes", tags=["util"]),
        ],
        signatures=[
            build(
                "AgentCardSignature",
                protected="eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0",
                signature="c2lnbmF0dXJl",
                header={"kid": "k1", "x5t": None, "n": 1},
            ),
            build("AgentCardSignature", protected="eyJhbGciOiJFZERTQSJ9", signature="c2ln"),
        ],
        icon_url="https://agent.example/icon.png",
    )


def agent_card_minimal(protocol_version: str) -> Pair:
    # Empty description and skills: relaykit still emits them (REQUIRED), the SDK leaves them out.
    return build(
        "AgentCard",
        name="Min",
        supported_interfaces=[
            build(
                "AgentInterface",
                url="https://min.example/a2a",
                protocol_binding="JSONRPC",
                protocol_version=protocol_version,
            )
        ],
        version="0.0.1",
        capabilities=build("AgentCapabilities"),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )


# --- the cases ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    pair: Pair
    dump: Callable[[ProtoMessage], dict[str, Any]] = sdk_wire
    always: dict[str, Any] = field(default_factory=dict)
    xfail: str = ""


def _cases() -> list[Case]:
    cases = [Case(f"Part-{name}", pair) for name, pair in PARTS.items()]
    cases += [
        Case("Message-user", MESSAGE_USER),
        Case("Message-agent", MESSAGE_AGENT),
        Case("Message-minimal", MESSAGE_MINIMAL),
        Case("Artifact-full", ARTIFACT),
        Case("Artifact-minimal", ARTIFACT_MINIMAL),
    ]
    for name in STATES:
        short = name.removeprefix("TASK_STATE_")
        cases.append(
            Case(
                f"TaskStatus-{name}",
                build("TaskStatus", state=state(short), message=MESSAGE_AGENT, timestamp=ts(TS_MS)),
            )
        )
        cases.append(Case(f"TaskStatus-bare-{name}", build("TaskStatus", state=state(short))))
    cases += [
        Case("TaskStatus-whole-second", build("TaskStatus", state=state("COMPLETED"), timestamp=ts(TS_WHOLE))),
        Case("Task-full", TASK_FULL),
        Case("Task-minimal", TASK_MINIMAL),
        Case("Task-done", TASK_DONE),
        Case("TaskStatusUpdateEvent", STATUS_EVENT),
        Case(
            "TaskStatusUpdateEvent-minimal",
            build(
                "TaskStatusUpdateEvent",
                task_id="t",
                context_id="c",
                status=build("TaskStatus", state=state("FAILED")),
            ),
        ),
    ]
    for append in (False, True):
        for last_chunk in (False, True):
            cases.append(
                Case(f"TaskArtifactUpdateEvent-append={append}-last={last_chunk}", artifact_event(append, last_chunk))
            )
    cases += [
        Case("StreamResponse-task", build("StreamResponse", task=TASK_FULL)),
        Case("StreamResponse-message", build("StreamResponse", message=MESSAGE_AGENT)),
        Case("StreamResponse-statusUpdate", build("StreamResponse", status_update=STATUS_EVENT)),
        Case("StreamResponse-artifactUpdate", build("StreamResponse", artifact_update=artifact_event(True, False))),
    ]
    for history_length in (0, None, 5):
        for return_immediately in (True, False):
            cases.append(
                Case(
                    f"SendMessageRequest-historyLength={history_length}-returnImmediately={return_immediately}",
                    send_message_request(history_length, return_immediately),
                )
            )
    cases += [
        Case("SendMessageRequest-minimal", build("SendMessageRequest", message=MESSAGE_MINIMAL)),
        Case(
            "SendMessageRequest-empty-configuration",
            build("SendMessageRequest", message=MESSAGE_MINIMAL, configuration=build("SendMessageConfiguration")),
        ),
        Case("SendMessageResponse-task", build("SendMessageResponse", task=TASK_FULL)),
        Case("SendMessageResponse-message", build("SendMessageResponse", message=MESSAGE_AGENT)),
    ]
    cases += [Case(f"GetTaskRequest-historyLength={n}", get_task_request(n)) for n in (0, None, 3)]
    cases += [Case("GetTaskRequest-minimal", build("GetTaskRequest", id="task-1"))]
    cases += [
        Case(f"ListTasksRequest-includeArtifacts={inc}-{st}", list_tasks_request(inc, st))
        for inc, st in ((False, "WORKING"), (True, "COMPLETED"), (False, "AUTH_REQUIRED"))
    ]
    cases += [
        Case("ListTasksRequest-empty", build("ListTasksRequest")),
        Case("ListTasksRequest-historyLength=7", build("ListTasksRequest", history_length=7, page_size=1)),
        Case(
            "ListTasksResponse-page",
            build(
                "ListTasksResponse",
                tasks=[TASK_FULL, TASK_MINIMAL],
                next_page_token="cursor-3",
                page_size=2,
                total_size=5,
            ),
            dump=sdk_list_tasks_wire,
            always=LIST_TASKS_ALWAYS,
        ),
        Case(
            "ListTasksResponse-last-page",
            build("ListTasksResponse", tasks=[TASK_DONE], next_page_token="", page_size=2, total_size=5),
            dump=sdk_list_tasks_wire,
            always=LIST_TASKS_ALWAYS,
        ),
        Case(
            "ListTasksResponse-empty",
            build("ListTasksResponse", page_size=50, total_size=0),
            dump=sdk_list_tasks_wire,
            always=LIST_TASKS_ALWAYS,
        ),
        Case("CancelTaskRequest", build("CancelTaskRequest", tenant="acme", id="task-1", metadata={"why": "user"})),
        Case("CancelTaskRequest-minimal", build("CancelTaskRequest", id="task-1")),
        Case("SubscribeToTaskRequest", build("SubscribeToTaskRequest", tenant="acme", id="task-1")),
        Case("SubscribeToTaskRequest-minimal", build("SubscribeToTaskRequest", id="task-1")),
        Case("TaskPushNotificationConfig-full", PUSH_CONFIG_FULL),
        Case("TaskPushNotificationConfig-minimal", PUSH_CONFIG_MINIMAL),
        Case("AuthenticationInfo", AUTH),
        Case(
            "GetTaskPushNotificationConfigRequest",
            build("GetTaskPushNotificationConfigRequest", tenant="acme", task_id="task-1", id="cfg-1"),
        ),
        Case(
            "GetTaskPushNotificationConfigRequest-minimal",
            build("GetTaskPushNotificationConfigRequest", task_id="task-1", id="cfg-1"),
        ),
        Case(
            "DeleteTaskPushNotificationConfigRequest",
            build("DeleteTaskPushNotificationConfigRequest", tenant="acme", task_id="task-1", id="cfg-1"),
        ),
        Case(
            "ListTaskPushNotificationConfigsRequest",
            build(
                "ListTaskPushNotificationConfigsRequest",
                tenant="acme",
                task_id="task-1",
                page_size=10,
                page_token="p2",
            ),
        ),
        Case(
            "ListTaskPushNotificationConfigsRequest-minimal",
            build("ListTaskPushNotificationConfigsRequest", task_id="task-1"),
        ),
        Case(
            "ListTaskPushNotificationConfigsResponse",
            build(
                "ListTaskPushNotificationConfigsResponse",
                configs=[PUSH_CONFIG_FULL, PUSH_CONFIG_MINIMAL],
                next_page_token="p3",
            ),
        ),
        Case("ListTaskPushNotificationConfigsResponse-empty", build("ListTaskPushNotificationConfigsResponse")),
        Case("GetExtendedAgentCardRequest", build("GetExtendedAgentCardRequest", tenant="acme")),
        Case("GetExtendedAgentCardRequest-empty", build("GetExtendedAgentCardRequest")),
    ]
    cases += [Case(f"SecurityScheme-{name}", pair) for name, pair in SCHEMES.items()]
    cases += [
        Case("SecurityRequirement-scopes", REQ_WITH_SCOPES),
        Case("SecurityRequirement-no-scopes", REQ_NO_SCOPES),
    ]
    for version in ("1.0", "0.3"):
        cases += [
            Case(f"AgentCard-full-v{version}", agent_card_full(version), always=CARD_ALWAYS),
            Case(f"AgentCard-minimal-v{version}", agent_card_minimal(version), always=CARD_ALWAYS),
        ]
    return cases


CASES = _cases()
CASE_PARAMS = [
    pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []) for c in CASES
]


def test_case_ids_are_unique_and_cover_every_type() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    covered = {type(c.pair.sdk).__name__ for c in CASES}
    wanted = {
        "Task", "TaskStatus", "Message", "Part", "Artifact", "TaskStatusUpdateEvent", "TaskArtifactUpdateEvent",
        "StreamResponse", "SendMessageRequest", "SendMessageResponse", "GetTaskRequest", "ListTasksRequest",
        "ListTasksResponse", "CancelTaskRequest", "SubscribeToTaskRequest", "TaskPushNotificationConfig",
        "GetTaskPushNotificationConfigRequest", "DeleteTaskPushNotificationConfigRequest",
        "ListTaskPushNotificationConfigsRequest", "ListTaskPushNotificationConfigsResponse",
        "GetExtendedAgentCardRequest", "AgentCard", "SecurityScheme", "SecurityRequirement", "AuthenticationInfo",
    }  # fmt: skip
    assert wanted <= covered
    # Every TaskState except UNSPECIFIED, every Part kind, every SecurityScheme and OAuth flow variant.
    assert {c.pair.sdk.state for c in CASES if isinstance(c.pair.sdk, pb.TaskStatus)} == set(range(1, 9))
    kinds = {c.pair.sdk.WhichOneof("content") for c in CASES if isinstance(c.pair.sdk, pb.Part)}
    assert kinds == {"text", "raw", "url", "data"}
    schemes = [c.pair.sdk for c in CASES if isinstance(c.pair.sdk, pb.SecurityScheme)]
    assert {s.WhichOneof("scheme") for s in schemes} == {f.name for f in pb.SecurityScheme.DESCRIPTOR.fields}
    flows = {s.oauth2_security_scheme.flows.WhichOneof("flow") for s in schemes if s.HasField("oauth2_security_scheme")}
    assert flows == {f.name for f in pb.OAuthFlows.DESCRIPTOR.fields}
    assert set(STATES) == {f"TASK_STATE_{s.name}" for s in rk.TaskState if s is not rk.TaskState.UNSPECIFIED}


def test_raw_fixture_needs_the_full_base64_alphabet() -> None:
    encoded = json_format.MessageToDict(PARTS["raw"].sdk)["raw"]
    assert "+" in encoded
    assert "/" in encoded
    assert encoded.endswith("==")


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_sdk_to_relaykit_to_json(case: Case) -> None:
    sdk_msg = case.pair.sdk
    desc = sdk_msg.DESCRIPTOR
    sdk_json = case.dump(sdk_msg)
    rk_type = type(case.pair.rk)

    parsed = rk_type.from_json(json.dumps(sdk_json))
    out = parsed.to_json()

    assert relaykit_wire(out, desc, case.always) == expected_wire(sdk_json, desc, case.always)
    # relaykit read the same object relaykit's own constructors build.
    assert parsed.model_dump() == case.pair.rk.model_dump()
    # And nothing was lost: relaykit's output parses (strictly) back into the very object the SDK started from.
    back = json_format.Parse(out, type(sdk_msg)())
    assert json_format.MessageToDict(back) == json_format.MessageToDict(sdk_msg)
    assert back == sdk_msg


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_relaykit_to_sdk(case: Case) -> None:
    sdk_type = type(case.pair.sdk)
    desc = sdk_type.DESCRIPTOR
    out = case.pair.rk.to_json()

    parsed = json_format.Parse(out, sdk_type())  # strict: an unknown field raises ParseError
    sdk_json = case.dump(parsed)

    assert expected_wire(sdk_json, desc, case.always) == relaykit_wire(out, desc, case.always)
    # relaykit's constructors built exactly the object the SDK's constructors built.
    assert json_format.MessageToDict(parsed) == json_format.MessageToDict(case.pair.sdk)
    assert parsed == case.pair.sdk


@pytest.mark.parametrize(
    "version",
    ["1.0", "0.3"],
)
def test_card_as_served_by_sdk_parses(version: str) -> None:
    """The SDK serves cards through ``agent_card_to_dict``, which merges 0.3 compatibility keys in; relaykit must
    ignore those and read the 1.0 card."""
    card = agent_card_full(version)
    served = agent_card_to_dict(card.sdk)
    parsed = rk.AgentCard.from_json(json.dumps(served))
    desc = pb.AgentCard.DESCRIPTOR
    assert relaykit_wire(parsed.to_json(), desc, CARD_ALWAYS) == expected_wire(sdk_wire(card.sdk), desc, CARD_ALWAYS)


# --- targeted wire rules -----------------------------------------------------------------------------------


def test_agent_interface_protocol_version_1_0_is_emitted() -> None:
    interface = rk.AgentInterface(url="https://a.example/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
    assert json.loads(interface.to_json()) == {
        "url": "https://a.example/a2a",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }


def test_millisecond_timestamps_are_byte_identical() -> None:
    for stamp in (TS_MS, TS_MS_LEADING_ZERO, "2026-12-31T23:59:59.999Z", "2026-01-02T03:04:05.100Z"):
        sdk_msg = pb.TaskStatus(state=pb.TASK_STATE_WORKING, timestamp=_pb_timestamp(stamp))
        sdk_json = json_format.MessageToDict(sdk_msg)
        assert sdk_json["timestamp"] == stamp
        assert json.loads(rk.TaskStatus.from_json(json.dumps(sdk_json)).to_json())["timestamp"] == stamp


def test_whole_second_timestamps_differ_only_in_spelling() -> None:
    # protobuf drops a zero fraction; relaykit always writes milliseconds. Same instant, both valid RFC 3339.
    sdk_msg = pb.TaskStatus(state=pb.TASK_STATE_WORKING, timestamp=_pb_timestamp(TS_WHOLE))
    assert json_format.MessageToDict(sdk_msg)["timestamp"] == "2026-03-04T05:06:07Z"
    out = rk.TaskStatus.from_json(json_format.MessageToJson(sdk_msg)).to_json()
    assert json.loads(out)["timestamp"] == "2026-03-04T05:06:07.000Z"
    assert json_format.Parse(out, pb.TaskStatus()) == sdk_msg


@pytest.mark.parametrize(
    ("text", "instant", "emitted"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02T03:04:05.000Z"),
        ("2026-01-02T03:04:05.678Z", datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC), "2026-01-02T03:04:05.678Z"),
        (
            "2026-01-02T03:04:05.678912Z",
            datetime(2026, 1, 2, 3, 4, 5, 678912, tzinfo=UTC),
            "2026-01-02T03:04:05.678Z",
        ),
        (
            "2026-01-02T03:04:05.678912345Z",
            datetime(2026, 1, 2, 3, 4, 5, 678912, tzinfo=UTC),
            "2026-01-02T03:04:05.678Z",
        ),
        ("2026-01-02T05:04:05+02:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02T03:04:05.000Z"),
        (
            "2026-01-02T05:04:05.678+02:00",
            datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
            "2026-01-02T03:04:05.678Z",
        ),
        (
            "2026-01-02T01:04:05.678912+02:00",
            datetime(2026, 1, 1, 23, 4, 5, 678912, tzinfo=UTC),
            "2026-01-01T23:04:05.678Z",
        ),
        (
            "2026-01-02T01:04:05.678912345+02:00",
            datetime(2026, 1, 1, 23, 4, 5, 678912, tzinfo=UTC),
            "2026-01-01T23:04:05.678Z",
        ),
        (
            "2025-12-31T22:00:00.999-05:30",
            datetime(2026, 1, 1, 3, 30, 0, 999000, tzinfo=UTC),
            "2026-01-01T03:30:00.999Z",
        ),
    ],
)
def test_timestamp_parsing(text: str, instant: datetime, emitted: str) -> None:
    body = json.dumps({"state": "TASK_STATE_WORKING", "timestamp": text})
    status = rk.TaskStatus.from_json(body)
    assert status.timestamp == instant
    assert status.timestamp is not None
    assert status.timestamp.utcoffset() == timedelta(0)
    # Emitted in UTC with 'Z' and exactly milliseconds (sub-millisecond digits are truncated, not rounded).
    assert json.loads(status.to_json())["timestamp"] == emitted
    # The SDK reads the same instant from the same text.
    sdk = json_format.Parse(body, pb.TaskStatus())
    assert sdk.timestamp.ToMicroseconds() == (instant - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("rk_type", "sdk_type", "base"),
    [
        (rk.GetTaskRequest, pb.GetTaskRequest, {"id": "task-1"}),
        (rk.SendMessageConfiguration, pb.SendMessageConfiguration, {}),
        (rk.ListTasksRequest, pb.ListTasksRequest, {"contextId": "ctx-1"}),
    ],
)
def test_history_length_zero_is_emitted_and_unset_is_omitted(
    rk_type: type[rk.A2AModel], sdk_type: type[ProtoMessage], base: dict[str, Any]
) -> None:
    zero = {**base, "historyLength": 0}
    unset = dict(base)

    rk_zero = rk_type.from_json(json.dumps(zero))
    rk_unset = rk_type.from_json(json.dumps(unset))
    assert rk_zero.history_length == 0  # type: ignore[attr-defined]
    assert rk_unset.history_length is None  # type: ignore[attr-defined]
    assert json.loads(rk_zero.to_json()) == zero
    assert json.loads(rk_unset.to_json()) == unset
    built = rk_type(**{**base, "history_length": 0})
    assert json.loads(built.to_json()) == zero

    sdk_zero = json_format.Parse(json.dumps(zero), sdk_type())
    sdk_unset = json_format.Parse(json.dumps(unset), sdk_type())
    assert sdk_zero.HasField("history_length")
    assert not sdk_unset.HasField("history_length")
    assert json_format.MessageToDict(sdk_zero) == zero
    assert json_format.MessageToDict(sdk_unset) == unset


def test_presence_tracked_false_is_emitted() -> None:
    request = rk.ListTasksRequest(include_artifacts=False, page_size=1)
    assert json.loads(request.to_json()) == {"includeArtifacts": False, "pageSize": 1}
    caps = rk.AgentCapabilities(streaming=False, push_notifications=False, extended_agent_card=False)
    assert json.loads(caps.to_json()) == {"streaming": False, "pushNotifications": False, "extendedAgentCard": False}
    sdk_caps = pb.AgentCapabilities(streaming=False, push_notifications=False, extended_agent_card=False)
    assert json_format.MessageToDict(sdk_caps) == json.loads(caps.to_json())
    assert json.loads(rk.AgentCapabilities().to_json()) == {}


def test_list_page_with_artifacts_included_lists_them_as_the_sdk_does() -> None:
    """With includeArtifacts (the handler sets ``artifacts_included``) a task without artifacts carries
    ``"artifacts": []``, as the SDK's own ListTasks serializer writes it (which also writes every other default), and a
    strict ProtoJSON parser reads it as the same page; without it the page is plain ProtoJSON, unchanged."""
    page = build("ListTasksResponse", tasks=[TASK_FULL, TASK_MINIMAL], page_size=2, total_size=2)
    included = json.loads(page.rk.model_copy(update={"artifacts_included": True}).to_json())
    sdk = serialize_list_tasks_response(page.sdk, include_artifacts=True)
    assert all("artifacts" in t for t in included["tasks"])
    assert included["tasks"][1]["artifacts"] == sdk["tasks"][1]["artifacts"] == []
    assert json_format.Parse(json.dumps(included), pb.ListTasksResponse()) == page.sdk
    plain = json.loads(page.rk.to_json())
    assert "artifacts" not in plain["tasks"][1]
    assert {k: v for k, v in included["tasks"][1].items() if k != "artifacts"} == plain["tasks"][1]
    assert "relaykitArtifactsIncluded" not in included


@pytest.mark.parametrize(
    "encoded",
    [
        "+/+/PgCA/+KCrA==",  # standard, padded (what both sides emit)
        "+/+/PgCA/+KCrA",  # standard, unpadded
        "-_-_PgCA_-KCrA==",  # URL-safe, padded
        "-_-_PgCA_-KCrA",  # URL-safe, unpadded
    ],
)
def test_base64_alphabets_and_padding_accepted(encoded: str) -> None:
    body = json.dumps({"raw": encoded})
    part = rk.Part.from_json(body)
    assert part.raw == RAW
    assert json.loads(part.to_json()) == {"raw": "+/+/PgCA/+KCrA=="}
    assert json_format.Parse(body, pb.Part()).raw == RAW  # the SDK accepts the same spellings


@pytest.mark.parametrize("encoded", ["!!!!", "+/+/Pg=A"])
def test_invalid_base64_rejected(encoded: str) -> None:
    with pytest.raises(ValidationError):
        rk.Part.from_json(json.dumps({"raw": encoded}))


@pytest.mark.parametrize("number", range(1, 9))
def test_task_state_integers_accepted(number: int) -> None:
    body = json.dumps({"state": number})
    status = rk.TaskStatus.from_json(body)
    name = pb.TaskState.Name(number)
    assert status.state.value == name
    assert json.loads(status.to_json()) == {"state": name}
    assert json_format.Parse(body, pb.TaskStatus()).state == number


@pytest.mark.parametrize(("number", "role"), [(1, rk.Role.USER), (2, rk.Role.AGENT)])
def test_role_integers_accepted(number: int, role: rk.Role) -> None:
    body = json.dumps({"messageId": "m", "role": number, "parts": [{"text": "x"}]})
    message = rk.Message.from_json(body)
    assert message.role is role
    assert json.loads(message.to_json())["role"] == pb.Role.Name(number)
    assert json_format.Parse(body, pb.Message()).role == number


def test_enum_integers_in_requests_accepted() -> None:
    request = rk.ListTasksRequest.from_json('{"status": 6}')
    assert request.status is rk.TaskState.INPUT_REQUIRED
    assert json.loads(request.to_json()) == {"status": "TASK_STATE_INPUT_REQUIRED"}


def test_numeric_strings_accepted_for_int32() -> None:
    body = '{"id": "t", "historyLength": "5"}'
    assert rk.GetTaskRequest.from_json(body).history_length == 5
    assert json_format.Parse(body, pb.GetTaskRequest()).history_length == 5


@pytest.mark.parametrize(
    ("rk_type", "with_unknown", "without"),
    [
        (rk.Part, {"text": "hi", "kind": "text", "future": {"x": 1}}, {"text": "hi"}),
        (
            rk.Message,
            {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a", "x-extra": 1}], "newField": [1]},
            {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a"}]},
        ),
        (
            rk.Task,
            {"id": "t", "status": {"state": "TASK_STATE_WORKING", "final": True}, "kind": "task"},
            {"id": "t", "status": {"state": "TASK_STATE_WORKING"}},
        ),
        (
            rk.SecurityScheme,
            {"httpAuthSecurityScheme": {"scheme": "Bearer", "type": "http"}, "type": "http"},
            {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
        ),
        (
            rk.SendMessageRequest,
            {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a"}]},
                "configuration": {"blocking": True, "historyLength": 0},
                "extra": None,
            },
            {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a"}]},
                "configuration": {"historyLength": 0},
            },
        ),
    ],
)
def test_unknown_fields_ignored(
    rk_type: type[rk.A2AModel], with_unknown: dict[str, Any], without: dict[str, Any]
) -> None:
    parsed = rk_type.from_json(json.dumps(with_unknown))
    assert parsed == rk_type.from_json(json.dumps(without))
    assert json.loads(parsed.to_json()) == without


@pytest.mark.parametrize(
    ("rk_type", "sdk_type", "body"),
    [
        (rk.Part, pb.Part, {"text": "a", "url": "https://x.example"}),
        (rk.Part, pb.Part, {"text": "a", "raw": "AA=="}),
        (rk.Part, pb.Part, {"url": "https://x.example", "data": {}}),
        (rk.Part, pb.Part, {"text": "", "data": {}}),
        (rk.Part, pb.Part, {"raw": "AA==", "data": 1}),
        (
            rk.StreamResponse,
            pb.StreamResponse,
            {
                "task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"}},
                "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "a"}]},
            },
        ),
        (
            rk.SendMessageResponse,
            pb.SendMessageResponse,
            {
                "task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"}},
                "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "a"}]},
            },
        ),
        (
            rk.SecurityScheme,
            pb.SecurityScheme,
            {"mtlsSecurityScheme": {}, "httpAuthSecurityScheme": {"scheme": "Bearer"}},
        ),
        (
            rk.OAuthFlows,
            pb.OAuthFlows,
            {"clientCredentials": {"tokenUrl": "https://t"}, "password": {"tokenUrl": "https://t"}},
        ),
    ],
)
def test_two_oneof_members_rejected(
    rk_type: type[rk.A2AModel], sdk_type: type[ProtoMessage], body: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        rk_type.from_json(json.dumps(body))
    with pytest.raises(json_format.ParseError):  # the SDK refuses it too
        json_format.Parse(json.dumps(body), sdk_type())


@pytest.mark.parametrize("body", [{"text": "", "data": None}, {"data": None, "url": "https://x.example"}])
def test_part_with_null_data_and_another_kind_rejected(body: dict[str, Any]) -> None:
    # relaykit is stricter than the SDK here: protobuf's Python parser misses a duplicate oneof member when one of
    # them is JSON null and silently keeps the last one, but a Part with two keys of text|raw|url|data is invalid.
    with pytest.raises(ValidationError):
        rk.Part.from_json(json.dumps(body))


@pytest.mark.parametrize("body", [{}, {"filename": "a.txt", "mediaType": "text/plain"}, {"metadata": {}}])
def test_part_without_content_rejected(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        rk.Part.from_json(json.dumps(body))


def test_part_with_two_kinds_rejected_in_python() -> None:
    with pytest.raises(ValidationError):
        rk.Part(text="a", url="https://x.example")
    with pytest.raises(ValidationError):
        rk.Part(raw=b"x", data=None)


def test_null_data_part_round_trips() -> None:
    part = rk.Part.from_json('{"data": null}')
    assert part.kind == "data"
    assert json.loads(part.to_json()) == {"data": None}
    assert json_format.Parse(part.to_json(), pb.Part()).WhichOneof("content") == "data"


def test_sdk_list_tasks_output_has_defaults_relaykit_does_not() -> None:
    # The point of drop_defaults: the SDK's ListTasks serialiser prints implicit defaults, relaykit never does.
    sdk_json = sdk_list_tasks_wire(pb.ListTasksResponse(tasks=[TASK_DONE.sdk]))
    sdk_part = sdk_json["tasks"][0]["artifacts"][0]["parts"][0]
    assert sdk_part == {"text": "chunk", "filename": "", "mediaType": ""}
    out = json.loads(rk.ListTasksResponse.from_json(json.dumps(sdk_json)).to_json())
    assert out["tasks"][0]["artifacts"][0]["parts"][0] == {"text": "chunk"}
    assert {k: out[k] for k in ("nextPageToken", "pageSize", "totalSize")} == {
        "nextPageToken": "",
        "pageSize": 0,
        "totalSize": 0,
    }


def test_relaykit_defaults_never_emitted_for_python_built_objects() -> None:
    message = rk.Message(message_id="m", role=rk.Role.AGENT, parts=[rk.Part(text="x")])
    assert json.loads(message.to_json()) == {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}
    event = rk.TaskArtifactUpdateEvent(
        task_id="t", context_id="c", artifact=rk.Artifact(artifact_id="a", parts=[rk.Part(url="u")])
    )
    assert json.loads(event.to_json()) == {
        "taskId": "t",
        "contextId": "c",
        "artifact": {"artifactId": "a", "parts": [{"url": "u"}]},
    }
    assert json.loads(rk.ListTasksRequest().to_json()) == {}
    assert base64.b64decode(json.loads(rk.Part(raw=RAW).to_json())["raw"]) == RAW
