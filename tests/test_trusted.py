"""``A2AModel._trusted``: hot paths build objects without validation; each must be what validation builds."""

from __future__ import annotations

from typing import Any

import pytest

from relaykit._enums import Role, TaskState
from relaykit._model import A2AModel, set_field, utc_now
from relaykit._types import Artifact, Message, Part, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent
from relaykit.server import EventQueue, RequestContext, TaskUpdater


def same(built: A2AModel, validated: A2AModel) -> None:
    assert type(built) is type(validated)
    assert list(built.__dict__.items()) == list(validated.__dict__.items())  # values and field order
    assert built.__pydantic_fields_set__ == validated.__pydantic_fields_set__
    assert built.__pydantic_extra__ == validated.__pydantic_extra__
    assert built.__pydantic_private__ == validated.__pydantic_private__
    assert built == validated
    assert repr(built) == repr(validated)
    assert built.to_json() == validated.to_json()
    assert built.model_dump() == validated.model_dump()
    for name, field in type(built).model_fields.items():
        if field.default_factory is not None:  # a fresh default per instance, as validation makes
            assert getattr(built, name) is not getattr(validated, name)


@pytest.mark.parametrize("text", ["", "hello", "ünï", "x" * 1000])
def test_text_part(text: str) -> None:
    same(Part._trusted(text=text), Part(text=text))


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"artifact_id": "a-1"}, {"name": "n"}, {"name": "n", "description": "d", "artifact_id": "x"}],
)
def test_text_artifact(kwargs: dict[str, Any]) -> None:
    built = Artifact.of("content", **kwargs)
    validated = Artifact(
        artifact_id=built.artifact_id,
        parts=[Part(text="content")],
        name=kwargs.get("name", ""),
        description=kwargs.get("description", ""),
        metadata=None,
    )
    same(built, validated)
    assert built.parts[0].__pydantic_fields_set__ == {"text"}
    if "artifact_id" in kwargs:
        assert built.artifact_id == kwargs["artifact_id"]


def test_other_artifacts_are_validated() -> None:
    with pytest.raises(ValueError, match="at least one part"):
        Artifact.of([])
    meta = {"k": 1}
    built = Artifact.of("x", metadata=meta)
    assert built.metadata == meta
    assert built.metadata is not meta  # validation copies the dict, as before


class _Sink:
    def __init__(self) -> None:
        self.events: list[Any] = []

    async def __call__(self, event: Any) -> None:
        self.events.append(event)


def _updater() -> tuple[TaskUpdater, _Sink]:
    sink = _Sink()
    context = RequestContext(task_id="t-1", context_id="c-1", message=None)
    return TaskUpdater(EventQueue(sink), context), sink


@pytest.mark.parametrize("state", list(TaskState))
@pytest.mark.parametrize("with_message", [False, True])
async def test_status_events(state: TaskState, with_message: bool) -> None:
    updater, sink = _updater()
    await updater.update(state, "why" if with_message else None)
    (event,) = sink.events
    message = event.status.message
    if with_message:
        same(
            message,
            Message(
                message_id=message.message_id,
                role=Role.AGENT,
                parts=[Part(text="why")],
                task_id="t-1",
                context_id="c-1",
                metadata=None,
            ),
        )
    same(event.status, TaskStatus(state=state, message=message))
    same(event, TaskStatusUpdateEvent(task_id="t-1", context_id="c-1", status=event.status))


@pytest.mark.parametrize(("append", "last_chunk"), [(False, False), (True, False), (False, True), (True, True)])
async def test_artifact_events(append: bool, last_chunk: bool) -> None:
    updater, sink = _updater()
    await updater.artifact("chunk", artifact_id="a", append=append, last_chunk=last_chunk)
    (event,) = sink.events
    same(
        event,
        TaskArtifactUpdateEvent(
            task_id="t-1",
            context_id="c-1",
            artifact=event.artifact,
            append=append,
            last_chunk=last_chunk,
        ),
    )


async def test_inexact_values_are_still_validated() -> None:
    updater, sink = _updater()
    await updater.update("TASK_STATE_WORKING")  # type: ignore[arg-type]  # a name, as JSON would carry it
    await updater.artifact("x", append=1)  # type: ignore[arg-type]
    status, chunk = sink.events
    assert status.status.state is TaskState.WORKING
    assert chunk.append is True
    assert updater.message("hi", k=1).metadata == {"k": 1}


def test_new_task_as_the_engine_builds_it() -> None:
    from relaykit._model import utc_now
    from relaykit._types import Task

    now = utc_now()
    message = Message.user("hi", task_id="t-1", context_id="c-1")
    same(
        TaskStatus._trusted(state=TaskState.SUBMITTED, timestamp=now),
        TaskStatus(state=TaskState.SUBMITTED, timestamp=now),
    )
    same(
        Task._trusted(
            id="t-1",
            context_id="c-1",
            status=TaskStatus._trusted(state=TaskState.SUBMITTED, timestamp=now),
            history=[message],
        ),
        Task(
            id="t-1", context_id="c-1", status=TaskStatus(state=TaskState.SUBMITTED, timestamp=now), history=[message]
        ),
    )


@pytest.mark.parametrize(
    ("model", "name", "value"),
    [
        (Message(message_id="m", role=Role.USER, parts=[Part(text="hi")]), "context_id", "ctx-1"),
        (Message(message_id="m", role=Role.USER, parts=[Part(text="hi")], task_id="old"), "task_id", "t-2"),
        (TaskStatus(state=TaskState.WORKING), "timestamp", utc_now()),
        (
            TaskStatusUpdateEvent(task_id="t", context_id="c", status=TaskStatus(state=TaskState.WORKING)),
            "status",
            TaskStatus(state=TaskState.COMPLETED),
        ),
    ],
)
def test_set_field_is_what_setattr_does(model: A2AModel, name: str, value: Any) -> None:
    # The same start twice: one assigned through pydantic's __setattr__, one through the hot paths' set_field.
    assigned = model.model_copy(deep=True)
    setattr(assigned, name, value)
    fast = model.model_copy(deep=True)
    set_field(fast, name, value)
    same(fast, assigned)
    assert getattr(fast, name) is value
