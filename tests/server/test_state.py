"""The task lifecycle table and ``apply``, the one fold of events into a Task (``relaykit._state``)."""

from __future__ import annotations

import pytest

from relaykit._enums import TaskState
from relaykit._errors import InvalidAgentResponseError
from relaykit._state import ACTIVE, INTERRUPTED, TERMINAL, IllegalTransitionError, apply, can_transition
from relaykit._types import Artifact, Message, Part, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent

ALL = list(TaskState)
TARGETS = [s for s in ALL if s is not TaskState.UNSPECIFIED]


def _task(state: TaskState = TaskState.WORKING) -> Task:
    return Task(id="t", context_id="c", status=TaskStatus(state=state))


def _status(state: TaskState, text: str | None = None, *, task_id: str = "t") -> TaskStatusUpdateEvent:
    message = Message.agent(text, task_id=task_id, context_id="c") if text is not None else None
    return TaskStatusUpdateEvent(task_id=task_id, context_id="c", status=TaskStatus(state=state, message=message))


def _chunk(
    text: str,
    *,
    artifact_id: str = "a",
    append: bool = False,
    metadata: dict[str, object] | None = None,
    name: str = "",
) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id="t",
        context_id="c",
        artifact=Artifact.of(text, artifact_id=artifact_id, metadata=metadata, name=name),
        append=append,
    )


# --- the transition table ---------------------------------------------------------------------------------


def test_state_sets_partition_the_lifecycle() -> None:
    assert {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED} == TERMINAL
    assert {TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED} == INTERRUPTED
    assert {TaskState.SUBMITTED, TaskState.WORKING} == ACTIVE
    assert not (TERMINAL & INTERRUPTED)
    assert not (TERMINAL & ACTIVE)
    assert not (INTERRUPTED & ACTIVE)


@pytest.mark.parametrize("current", sorted(TERMINAL))
@pytest.mark.parametrize("new", ALL)
def test_terminal_states_have_no_exits(current: TaskState, new: TaskState) -> None:
    assert not can_transition(current, new)
    task = _task(current)
    with pytest.raises(IllegalTransitionError):
        apply(task, _status(new))
    assert task.status.state is current


@pytest.mark.parametrize("current", ALL)
def test_unspecified_is_never_a_target(current: TaskState) -> None:
    assert not can_transition(current, TaskState.UNSPECIFIED)


@pytest.mark.parametrize("current", sorted(INTERRUPTED))
def test_interrupted_states_may_resume_working(current: TaskState) -> None:
    assert can_transition(current, TaskState.WORKING)
    task = _task(current)
    apply(task, _status(TaskState.WORKING))
    assert task.status.state is TaskState.WORKING


@pytest.mark.parametrize("current", sorted(ACTIVE | INTERRUPTED))
@pytest.mark.parametrize("new", TARGETS)
def test_live_states_reach_every_real_state_but_working_never_resubmits(current: TaskState, new: TaskState) -> None:
    expected = not (current is TaskState.WORKING and new is TaskState.SUBMITTED)
    assert can_transition(current, new) is expected


def test_repeating_working_is_legal_and_carries_progress() -> None:
    task = _task(TaskState.WORKING)
    apply(task, _status(TaskState.WORKING, "step 1"))
    apply(task, _status(TaskState.WORKING, "step 2"))
    assert [m.text for m in task.history] == ["step 1", "step 2"]


def test_a_task_event_is_checked_like_a_status_event() -> None:
    task = _task(TaskState.COMPLETED)
    with pytest.raises(IllegalTransitionError):
        apply(task, Task(id="t", context_id="c", status=TaskStatus(state=TaskState.WORKING)))
    replacement = Task(
        id="t",
        context_id="c",
        status=TaskStatus(state=TaskState.COMPLETED),
        artifacts=[Artifact.text("x", artifact_id="a")],
    )
    live = _task(TaskState.WORKING)
    apply(live, replacement)
    assert live.status.state is TaskState.COMPLETED
    assert live.artifacts[0].text_content == "x"


def test_events_of_another_task_and_bare_messages_are_refused() -> None:
    task = _task()
    with pytest.raises(InvalidAgentResponseError):
        apply(task, _status(TaskState.COMPLETED, task_id="other"))
    with pytest.raises(InvalidAgentResponseError):
        apply(task, Message.agent("hello", task_id="t"))
    assert task.status.state is TaskState.WORKING


# --- artifacts -------------------------------------------------------------------------------------------


def test_append_extends_the_existing_artifact() -> None:
    task = _task()
    apply(task, _chunk("a"))
    apply(task, _chunk("b", append=True))
    apply(task, _chunk("c", append=True))
    assert len(task.artifacts) == 1
    assert [p.text for p in task.artifacts[0].parts] == ["a", "b", "c"]


def test_append_false_replaces_the_artifact_with_the_same_id() -> None:
    task = _task()
    apply(task, _chunk("old"))
    apply(task, _chunk("other", artifact_id="b"))
    apply(task, _chunk("new"))
    assert [(a.artifact_id, a.text_content) for a in task.artifacts] == [("a", "new"), ("b", "other")]


def test_append_to_an_unknown_artifact_is_an_agent_error() -> None:
    task = _task()
    with pytest.raises(InvalidAgentResponseError):
        apply(task, _chunk("x", artifact_id="nope", append=True))
    assert task.artifacts == []


def test_artifact_updates_on_a_terminal_task_are_refused() -> None:
    task = _task(TaskState.COMPLETED)
    with pytest.raises(IllegalTransitionError):
        apply(task, _chunk("late"))
    assert task.artifacts == []


def test_append_merges_metadata_and_fills_a_missing_name() -> None:
    task = _task()
    apply(task, _chunk("a", metadata={"k1": 1, "k2": "x"}))
    apply(task, _chunk("b", append=True, metadata={"k2": "y", "k3": True}, name="late name"))
    art = task.artifacts[0]
    assert art.metadata == {"k1": 1, "k2": "y", "k3": True}
    assert art.name == "late name"
    apply(task, _chunk("c", append=True, name="ignored"))
    assert task.artifacts[0].name == "late name"
    assert task.artifacts[0].metadata == {"k1": 1, "k2": "y", "k3": True}


def test_stored_artifact_parts_are_not_shared_with_the_event() -> None:
    task = _task()
    first = _chunk("a")
    apply(task, first)
    apply(task, _chunk("b", append=True))
    # The first event was published to subscribers as is; later chunks must not change it under them.
    assert [p.text for p in first.artifact.parts] == ["a"]
    assert first.artifact.parts is not task.artifacts[0].parts
    replacing = _chunk("r")
    apply(task, replacing)
    apply(task, _chunk("s", append=True))
    assert [p.text for p in replacing.artifact.parts] == ["r"]
    assert [p.text for p in task.artifacts[0].parts] == ["r", "s"]


@pytest.mark.parametrize(
    "artifact",
    [
        Artifact.text("x", artifact_id="a"),
        Artifact(
            artifact_id="b",
            name="n",
            description="d",
            parts=[Part(text="p"), Part(data={"k": 1})],
            metadata={"m": [1, 2]},
            extensions=["urn:x"],
        ),
        Artifact.model_validate({"artifactId": "c", "parts": [{"url": "https://x/y"}], "unknown": 1}),
    ],
)
def test_own_copy_is_model_copy_with_its_own_parts(artifact: Artifact) -> None:
    from relaykit._state import _own_copy

    reference = artifact.model_copy(update={"parts": list(artifact.parts)})
    own = _own_copy(artifact)
    assert type(own) is type(reference)
    assert own == reference
    assert own.__dict__ == reference.__dict__
    assert own.__pydantic_fields_set__ == reference.__pydantic_fields_set__
    assert own.__pydantic_extra__ == reference.__pydantic_extra__
    assert own.__pydantic_private__ == reference.__pydantic_private__
    assert own.to_json() == artifact.to_json()
    assert own.parts is not artifact.parts
    assert own.__pydantic_fields_set__ is not artifact.__pydantic_fields_set__
    own.parts.append(Part(text="more"))
    own.name = "renamed"
    assert len(artifact.parts) == len(reference.parts)
    assert artifact.name != "renamed"


# --- history ---------------------------------------------------------------------------------------------


def test_status_messages_are_recorded_in_history_in_order() -> None:
    user = Message.user("hi", task_id="t", context_id="c")
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.SUBMITTED), history=[user])
    apply(task, _status(TaskState.WORKING))  # no message: nothing recorded
    apply(task, _status(TaskState.INPUT_REQUIRED, "your name?"))
    apply(task, _status(TaskState.WORKING, "thanks"))
    apply(task, _status(TaskState.COMPLETED, "done"))
    assert [(m.role.name, m.text) for m in task.history] == [
        ("USER", "hi"),
        ("AGENT", "your name?"),
        ("AGENT", "thanks"),
        ("AGENT", "done"),
    ]
    assert task.status.message is not None
    assert task.status.message.text == "done"


def test_history_is_untouched_by_artifacts() -> None:
    task = _task()
    apply(task, _chunk("a"))
    assert task.history == []


def test_parts_helper_sanity() -> None:
    # Guards the helper above: a chunk carries exactly the part it was built from.
    assert _chunk("z").artifact.parts == [Part(text="z")]
