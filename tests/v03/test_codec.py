"""The 0.3 codec's translations, checked against the 1.0 models both ways (no server)."""

from __future__ import annotations

import pydantic_core
import pytest
from pydantic import ValidationError

from relaykit import Artifact, Message, Part, Task, TaskState
from relaykit._errors import (
    ExtendedAgentCardNotConfiguredError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit._grpc_gen import a2a_v0_3_pb2 as pb03
from relaykit._methods import OPERATIONS_BY_NAME
from relaykit._requests import GetTaskPushNotificationConfigRequest, SendMessageRequest
from relaykit._types import StreamResponse, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent
from relaykit._v03 import _card as card03
from relaykit._v03 import _grpc as grpc03
from relaykit._v03 import _json as j
from relaykit._v03 import _pjson as pj
from relaykit._v03 import _rest as rest03
from relaykit._v03 import _rpc

EVENTS = [
    TaskArtifactUpdateEvent(task_id="t", context_id="c", artifact=Artifact.text('x {"text": 1}', artifact_id="a")),
    TaskArtifactUpdateEvent(
        task_id="t",
        context_id="c",
        artifact=Artifact.of([Part(text="a"), Part(text="b")], artifact_id="a"),
        append=True,
    ),
    TaskArtifactUpdateEvent(
        task_id="t", context_id="c", artifact=Artifact.of(Part.from_data({"text": 1}), artifact_id="a"), last_chunk=True
    ),
    TaskArtifactUpdateEvent(
        task_id="t", context_id="c", artifact=Artifact.text("m", artifact_id="a"), metadata={"text": "x"}
    ),
    TaskStatusUpdateEvent(task_id="t", context_id="c", status=TaskStatus(state=TaskState.INPUT_REQUIRED)),
]


@pytest.mark.parametrize("event", EVENTS)
def test_fast_event_path_agrees_with_the_general_one(event: TaskArtifactUpdateEvent | TaskStatusUpdateEvent) -> None:
    data = StreamResponse.of(event).to_json()
    general = j.event_out(pydantic_core.from_json(data))
    assert pydantic_core.from_json(_rpc.encode_event(data)) == general


def _task() -> Task:
    return Task(
        id="t",
        context_id="c",
        status=TaskStatus(state=TaskState.CANCELED, message=Message.agent("bye", message_id="s")),
        artifacts=[
            Artifact.of(
                [
                    Part(text="t", metadata={"m": "text"}),
                    Part(raw=b"\x00\x01", media_type="application/octet-stream", filename="f", metadata={"n": None}),
                    Part.from_url("https://x/y", media_type="text/plain", filename="y"),
                    Part.from_data({"k": [1]}),
                ],
                artifact_id="a",
            )
        ],
        history=[Message.user("hi", message_id="m", task_id="t", context_id="c")],
    )


def test_jsonrpc_task_round_trip() -> None:
    task = _task()
    out = j.task_out(task.to_dict())
    assert out["kind"] == "task"
    assert out["status"]["state"] == "canceled"
    assert [p["kind"] for p in out["artifacts"][0]["parts"]] == ["text", "file", "file", "data"]
    assert out["history"][0]["role"] == "user"
    assert Task.model_validate(j.task_in(out)) == task


def test_protojson_task_round_trip() -> None:
    task = _task()
    out = pj.task_out(task.to_dict())
    assert out["status"]["state"] == "TASK_STATE_CANCELLED"
    assert "content" in out["history"][0]
    assert out["artifacts"][0]["parts"][1] == {
        "file": {"fileWithBytes": "AAE=", "mimeType": "application/octet-stream", "name": "f"},
        "metadata": {"n": None},
    }
    assert Task.model_validate(pj.task_in(out)) == task


def test_grpc_task_round_trip_keeps_file_names_and_part_metadata() -> None:
    """Through the 0.3 proto's bytes: ``FilePart.name`` and ``Part.metadata`` (fields 4, as in a2a-sdk 0.3's proto,
    which tests/v03/test_sdk03_edges.py speaks to on the wire) are not dropped."""
    assert pb03.Part.DESCRIPTOR.fields_by_name["metadata"].number == 4
    assert pb03.FilePart.DESCRIPTOR.fields_by_name["name"].number == 4
    task = _task()
    wire = grpc03._message(pj.task_out(task.to_dict()), pb03.Task).SerializeToString()
    back = Task.model_validate(pj.task_in(grpc03._dict(pb03.Task.FromString(wire))))
    assert back == task


def test_history_length_zero_means_no_limit_in_0_3() -> None:
    assert j.history_in(0) is None
    assert j.history_in(3) == 3


def test_push_config_without_id_takes_the_task_id() -> None:
    auth = {"schemes": ["Bearer"], "credentials": "k"}
    config = j.config_in({"taskId": "t", "pushNotificationConfig": {"url": "https://h", "authentication": auth}})
    expected = {
        "taskId": "t",
        "url": "https://h",
        "id": "t",
        "authentication": {"scheme": "Bearer", "credentials": "k"},
    }
    assert config == expected
    assert j.config_out(config)["pushNotificationConfig"]["authentication"] == auth


@pytest.mark.parametrize(
    ("op", "status", "message", "cls", "text"),
    [
        # a2a-sdk 0.3: the 0.3 class name before the message, under a status that alone means something else
        ("CancelTask", "UNIMPLEMENTED", "TaskNotCancelableError: done", TaskNotCancelableError, "done"),
        (
            "GetExtendedAgentCard",
            "UNIMPLEMENTED",
            "AuthenticatedExtendedCardNotConfiguredError: no",
            ExtendedAgentCardNotConfiguredError,
            "no",
        ),
        # @a2a-js/sdk 0.3: the bare message; the status on that rpc names the error
        ("CancelTask", "FAILED_PRECONDITION", "Task not cancelable: t1", TaskNotCancelableError, None),
        ("GetExtendedAgentCard", "FAILED_PRECONDITION", "x", ExtendedAgentCardNotConfiguredError, None),
        ("ListTaskPushNotificationConfigs", "UNIMPLEMENTED", "x", PushNotificationNotSupportedError, None),
        ("GetTask", "FAILED_PRECONDITION", "Task: whatever", None, None),  # neither: the caller's 1.0 reading
    ],
)
def test_0_3_grpc_errors_are_read_as_each_sdk_means_them(
    op: str, status: str, message: str, cls: type[Exception] | None, text: str | None
) -> None:
    err = grpc03.error_in(op, status, message)
    assert (type(err) if err is not None else None) is cls
    if err is not None:
        assert err.message == (text if text is not None else message)


# --- push config get by task (0.3's TaskIdParams form) ------------------------------------------------------


def test_push_config_get_by_task_only_asks_for_the_tasks_default() -> None:
    op, request = _rpc.decode_request("tasks/pushNotificationConfig/get", {"id": "t"})
    assert op.name == "GetTaskPushNotificationConfig"
    assert isinstance(request, GetTaskPushNotificationConfigRequest)
    assert (request.task_id, request.id, request.protocol_version) == ("t", "", "0.3")
    _, named = _rpc.decode_request("tasks/pushNotificationConfig/get", {"id": "t", "pushNotificationConfigId": "c"})
    assert (named.task_id, named.id) == ("t", "c")  # type: ignore[attr-defined]
    rpc = grpc03.RPCS_BY_OP["GetTaskPushNotificationConfig"]
    decode = rpc.decoder()
    bare = decode(pb03.GetTaskPushNotificationConfigRequest(name="tasks/t").SerializeToString())
    assert (bare.task_id, bare.id, bare.protocol_version) == ("t", "", "0.3")  # type: ignore[attr-defined]
    # the marker is nobody's business on the wire, nor in the OpenAPI document
    assert request.to_dict() == {"taskId": "t", "id": ""}
    assert (
        "relaykitProtocolVersion"
        not in GetTaskPushNotificationConfigRequest.model_json_schema(by_alias=True)["properties"]
    )


# --- errors -------------------------------------------------------------------------------------------------


def test_no_extended_card_is_0_3s_not_configured_error() -> None:
    out = card03.error_out("GetExtendedAgentCard", UnsupportedOperationError("none"))
    assert isinstance(out, ExtendedAgentCardNotConfiguredError)
    assert out.code == -32007
    assert rest03.status_for(out) == 404
    other = UnsupportedOperationError("none")
    assert card03.error_out("CancelTask", other) is other  # only the card's case changes
    missing = TaskNotFoundError("x")
    assert card03.error_out("GetExtendedAgentCard", missing) is missing


# --- nulls ----------------------------------------------------------------------------------------------------

NULLS = {"contextId": None, "taskId": None, "referenceTaskIds": None, "extensions": None}


def _message03(**members: object) -> dict[str, object]:
    return {"kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}], **members}


def test_null_members_read_as_absent_in_requests() -> None:
    params = {"message": _message03(**NULLS, metadata={"k": None}), "configuration": None, "metadata": None}
    _, request = _rpc.decode_request("message/send", params)
    assert isinstance(request, SendMessageRequest)
    assert (request.message.context_id, request.message.task_id, request.message.extensions) == ("", "", [])
    assert request.message.metadata == {"k": None}  # content: kept
    assert request.configuration is None
    rest_params = {"message": {"messageId": "m", "role": "ROLE_USER", "content": [{"text": "hi"}], **NULLS}}
    route = next(r for r in rest03.ROUTES if r.path == "/v1/message:send")
    rest = rest03.decode_request(route.op, route.decode, rest_params, {})
    assert isinstance(rest, SendMessageRequest)
    assert rest.message.context_id == ""


def test_null_members_read_as_absent_in_results() -> None:
    task = {
        "kind": "task",
        "id": "t",
        "contextId": None,
        "status": {"state": "completed", "message": None, "timestamp": None},
        "artifacts": None,
        "history": None,
        "metadata": {"k": None},
    }
    read = _rpc.decode_result(OPERATIONS_BY_NAME["GetTask"], task)
    assert isinstance(read, Task)
    assert (read.context_id, read.artifacts, read.history, read.metadata) == ("", [], [], {"k": None})
    event = {"kind": "artifact-update", "taskId": "t", "contextId": "c", "append": None, "lastChunk": None}
    update = _rpc.decode_event({**event, "artifact": {"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]}})
    assert update.artifact_update is not None
    assert update.artifact_update.append is False
    rest_task = {
        "id": "t",
        "contextId": None,
        "status": {"state": "TASK_STATE_WORKING", "update": None},
        "history": None,
    }
    assert rest03.decode_response(OPERATIONS_BY_NAME["GetTask"], rest_task).context_id == ""


def test_a_null_is_dropped_only_where_validation_needs_it() -> None:
    # The common input is validated once, as it is (a null the 1.0 model accepts is no reason to walk it).
    calls: list[object] = []

    def translate(value: object) -> object:
        calls.append(value)
        return j.message_in(value)

    plain = _message03(metadata={"k": None})
    assert j.decode(Message, translate, plain).metadata == {"k": None}
    assert calls == [plain]
    calls.clear()
    j.decode(Message, translate, _message03(contextId=None))
    assert len(calls) == 2  # refused on the null, then read without it
    # a real error is reported as itself, without the null beside it
    with pytest.raises(ValidationError) as caught:
        j.decode(Message, j.message_in, _message03(contextId=None, parts="x"))
    assert [e["loc"] for e in caught.value.errors()] == [("parts",)]
    # a null where a value is required stays an error
    with pytest.raises(ValidationError):
        j.decode(Message, j.message_in, _message03(messageId=None))


def test_the_grpc_card_carries_its_icon() -> None:
    # a2a-sdk 0.3.26's proto has AgentCard.icon_url = 18 (the 0.3 JSON card's iconUrl); v0.3.0's had not.
    from relaykit._v03._grpc import card_message
    from relaykit.types import AgentCard

    card = AgentCard(name="n", description="d", version="1", icon_url="https://agent.example/icon.png")
    wire = card_message(card).SerializeToString()
    assert pb03.AgentCard.FromString(wire).icon_url == "https://agent.example/icon.png"


def test_a_0_3_oauth_flow_always_has_its_scopes() -> None:
    # 0.3's OAuth flows require "scopes" (an object, possibly empty); 1.0's ProtoJSON omits an empty map.
    from relaykit.types import (
        AgentCard,
        AgentInterface,
        ClientCredentialsOAuthFlow,
        OAuth2SecurityScheme,
        OAuthFlows,
        SecurityScheme,
    )

    flows = OAuthFlows(client_credentials=ClientCredentialsOAuthFlow(token_url="https://idp.example/token"))
    card = AgentCard(
        name="n",
        description="d",
        version="1",
        supported_interfaces=[AgentInterface(url="http://a/", protocol_binding="JSONRPC", protocol_version="0.3")],
        security_schemes={"oauth": SecurityScheme(oauth2_security_scheme=OAuth2SecurityScheme(flows=flows))},
    )
    out = card03.card_out(card.to_dict())
    assert out is not None
    flow = out["securitySchemes"]["oauth"]["flows"]["clientCredentials"]
    assert flow == {"tokenUrl": "https://idp.example/token", "scopes": {}}
