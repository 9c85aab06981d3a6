"""The 0.3 codec's translations, checked against the 1.0 models both ways (no server)."""

from __future__ import annotations

import pydantic_core
import pytest

from relaykit import Artifact, Message, Part, Task, TaskState
from relaykit._errors import (
    ExtendedAgentCardNotConfiguredError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
)
from relaykit._types import StreamResponse, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent
from relaykit._v03 import _grpc as grpc03
from relaykit._v03 import _json as j
from relaykit._v03 import _pjson as pj
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
                    Part(text="t"),
                    Part.from_bytes(b"\x00\x01", media_type="application/octet-stream", filename="f"),
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


def test_protojson_task_round_trip_keeps_what_0_3_can_carry() -> None:
    task = _task()
    out = pj.task_out(task.to_dict())
    assert out["status"]["state"] == "TASK_STATE_CANCELLED"
    assert "content" in out["history"][0]
    back = Task.model_validate(pj.task_in(out))
    assert back.status.state is TaskState.CANCELED
    # 0.3's proto has no file names: everything else survives
    assert [p.kind for p in back.artifacts[0].parts] == ["text", "raw", "url", "data"]
    assert back.artifacts[0].parts[1].raw == b"\x00\x01"
    assert back.history == task.history


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
