"""The task lifecycle as a transition table, and ``apply(task, event)``, the one fold of events into a Task.

Rules (digest §5.1, §4.3):

* ``TERMINAL`` = COMPLETED, FAILED, CANCELED, REJECTED: a terminal task never changes again.
* ``INTERRUPTED`` = INPUT_REQUIRED, AUTH_REQUIRED: the task waits for the client and may return to WORKING.
* UNSPECIFIED is never a valid state to move to.
* Repeating a non-terminal state is legal (WORKING → WORKING carries progress messages).
* Artifact updates: ``append=false`` adds a new artifact or replaces the one with the same id; ``append=true`` extends
  the parts of an earlier artifact with that id (metadata merged) and is an agent error when there is none.
* A status message is recorded in the history; the engine records the user's messages there too.

No I/O here: the engine calls ``apply`` and persists/publishes what it returns.
"""

from __future__ import annotations

from relaykit._enums import TaskState
from relaykit._errors import InvalidAgentResponseError
from relaykit._model import set_field
from relaykit._types import Artifact, Message, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

__all__ = ["ACTIVE", "INTERRUPTED", "TERMINAL", "IllegalTransitionError", "apply", "can_transition"]

TERMINAL: frozenset[TaskState] = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
INTERRUPTED: frozenset[TaskState] = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})
ACTIVE: frozenset[TaskState] = frozenset({TaskState.SUBMITTED, TaskState.WORKING})

_ANY_NEXT = frozenset(TaskState) - {TaskState.UNSPECIFIED}
_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.UNSPECIFIED: _ANY_NEXT,
    TaskState.SUBMITTED: _ANY_NEXT,
    # Once work has started it is never "submitted" again, except when a paused task takes a new message.
    TaskState.WORKING: _ANY_NEXT - {TaskState.SUBMITTED},
    TaskState.INPUT_REQUIRED: _ANY_NEXT,
    TaskState.AUTH_REQUIRED: _ANY_NEXT,
    TaskState.COMPLETED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.CANCELED: frozenset(),
    TaskState.REJECTED: frozenset(),
}


class IllegalTransitionError(InvalidAgentResponseError):
    """The agent tried to move a task along a transition the lifecycle forbids."""


def can_transition(current: TaskState, new: TaskState) -> bool:
    """Whether a task in ``current`` may move to ``new``.

    >>> can_transition(TaskState.WORKING, TaskState.COMPLETED)
    True
    >>> can_transition(TaskState.COMPLETED, TaskState.WORKING)
    False
    """
    return new in _TRANSITIONS[current]


def _check(task: Task, new: TaskState) -> None:
    current = task.status.state
    if new not in _TRANSITIONS[current]:
        raise IllegalTransitionError(
            f"illegal transition {current.name} -> {new.name} for task {task.id}", task_id=task.id
        )


def apply(task: Task, event: Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> Task:
    """Fold one event into ``task`` (mutated in place and returned).

    A ``Task`` event replaces the snapshot (the transition is still checked); a ``Message`` is not a task event and
    raises ``InvalidAgentResponseError``.

    >>> from relaykit import Task, TaskStatus, TaskStatusUpdateEvent
    >>> t = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.SUBMITTED))
    >>> apply(t, TaskStatusUpdateEvent(task_id="t", context_id="c",
    ...                                status=TaskStatus(state=TaskState.WORKING))).status.state.name
    'WORKING'
    """
    # (A status event is tested by exact type first: an isinstance against a model class that fails costs more.)
    if type(event) is not TaskStatusUpdateEvent and isinstance(event, TaskArtifactUpdateEvent):
        _check_owner(task, event.task_id)
        if task.status.state in TERMINAL:
            raise IllegalTransitionError(
                f"artifact update for task {task.id}, which is already {task.status.state.name}",
                task_id=task.id,
            )
        _apply_artifact(task, event)
        return task
    if isinstance(event, TaskStatusUpdateEvent):
        _check_owner(task, event.task_id)
        _check(task, event.status.state)
        set_field(task, "status", event.status)
        if event.status.message is not None:
            task.history.append(event.status.message)
        return task
    if isinstance(event, Task):
        _check_owner(task, event.id)
        if event is not task:
            _check(task, event.status.state)
            task.status = event.status
            task.artifacts = event.artifacts
            if event.history:
                task.history = event.history
            if event.metadata is not None:
                task.metadata = event.metadata
        return task
    raise InvalidAgentResponseError(
        f"agent sent a Message for task {task.id}; once a task exists, replies are task events",
        task_id=task.id,
    )


def _check_owner(task: Task, task_id: str) -> None:
    if task_id != task.id:
        raise InvalidAgentResponseError(f"event for task {task_id!r} published on task {task.id!r}", task_id=task.id)


def _apply_artifact(task: Task, event: TaskArtifactUpdateEvent) -> None:
    new = event.artifact
    artifacts = task.artifacts
    # The newest artifact of that id. A plain loop, not ``next(<genexpr>)``: a generator left unfinished is closed
    # when freed (a GeneratorExit raised in its frame), which cost more than the search itself on every chunk.
    index = len(artifacts) - 1
    artifact_id = new.artifact_id
    while index >= 0 and artifacts[index].artifact_id != artifact_id:
        index -= 1
    if not event.append:
        # The stored artifact owns its parts list (shallow copy, once per artifact): later chunks extend it in
        # place, and the event object that subscribers still hold must not change under them.
        own = _own_copy(new)
        if index < 0:
            artifacts.append(own)
        else:
            artifacts[index] = own
        return
    if index < 0:
        raise InvalidAgentResponseError(
            f"append to unknown artifact {new.artifact_id!r} of task {task.id}", task_id=task.id
        )
    existing = artifacts[index]
    existing.parts.extend(new.parts)
    if new.metadata:
        existing.metadata = {**(existing.metadata or {}), **new.metadata}
    if new.name and not existing.name:
        existing.name = new.name
    if new.description and not existing.description:
        existing.description = new.description


_set = object.__setattr__


def _own_copy(artifact: Artifact) -> Artifact:
    """``artifact.model_copy(update={"parts": list(artifact.parts)})``, minus pydantic's generic copy path.

    Every artifact gets one (per task, the first event that names it), so it is on the path of every reply. A2A
    models have no private attributes and no extras (``extra="ignore"``); tests/server/test_state.py checks the copy
    against ``model_copy`` field for field.
    """
    values = artifact.__dict__.copy()
    values["parts"] = list(values["parts"])
    cls = type(artifact)
    own = cls.__new__(cls)
    _set(own, "__dict__", values)
    _set(own, "__pydantic_fields_set__", set(artifact.__pydantic_fields_set__))
    _set(own, "__pydantic_extra__", artifact.__pydantic_extra__)
    _set(own, "__pydantic_private__", artifact.__pydantic_private__)
    return own
