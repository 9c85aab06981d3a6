"""What the application has seen of one task's stream, so a resumed stream shows it every event exactly once.

``Client`` feeds each stream response through a ``StreamView``: messages are de-duplicated by id, artifact chunks by
position, and a snapshot received on resume becomes exactly the chunks and status the application has not seen. The
view also says when the stream is over (terminal, or interrupted when the caller stops there).
"""

from __future__ import annotations

from relaykit._enums import TaskState
from relaykit._types import (
    Message,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatus,
    TaskStatusUpdateEvent,
)

__all__ = ["Event", "StreamView", "same_status"]

Event = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent

_TERMINAL = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
_INTERRUPTED = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


def same_status(a: TaskStatus, b: TaskStatus) -> bool:
    """Whether two reads of a task show the same status: its state, message and time (a task interrupted anew, even
    in the same state, has a new status message or timestamp)."""
    if a.state is not b.state or a.timestamp != b.timestamp:
        return False
    if a.message is None or b.message is None:
        return a.message is b.message
    return a.message.message_id == b.message.message_id


class StreamView:
    """What the application has seen of one task's stream, to resume it without gaps or repeats.

    Servers that number their events (``id:``, relaykit) resume exactly after ``Last-Event-ID``, and a snapshot they
    send is consistent with the events after it. Servers that do not (a2a-sdk 1.3.0) answer a resubscription with
    the Task snapshot and then their live events, and the two can overlap: the live tap starts before the snapshot
    is read, so the events in between are both in the snapshot and repeated after it. After such an unnumbered
    snapshot the view holds back the artifact chunks that could be those repeats (they extend the snapshot's new
    parts exactly up to its end) and drops them once that is certain; the first chunk that cannot be a repeat
    releases what was held. Chunks whose content repeats the snapshot's tail (all chunks alike) stay ambiguous.
    """

    def __init__(
        self,
        task_id: str | None,
        *,
        continuing: bool = False,
        subscription: bool = False,
        known: TaskStatus | None = None,
    ) -> None:
        self.task_id = task_id
        self.subscription = subscription
        # Bug fix: a stream that answers an interrupted task starts with the task's snapshot, still INPUT_REQUIRED
        # (the state the previous turn ended in). That state used to end the stream at its first event, so the
        # answer's events never reached the application. It is stale until the task reports a new status.
        self.continuing = continuing
        # The interrupted status the caller already knows and waits to see the task leave (a task resumed out of
        # band): a first snapshot still showing it is stale too. Only that status: a task that moved on and was
        # interrupted anew before the subscription began shows another one, which ends the stream.
        self.known = known
        self.stale_interrupt = False
        self.context_id = ""
        self.last_event_id: str | None = None
        self.state: TaskState | None = None
        self.message_done = False
        self.seen_messages: set[str] = set()
        self.parts_seen: dict[str, int] = {}
        self.started = False
        # Overlap after an unnumbered snapshot: the artifact, the parts the snapshot added (the window), the chunks
        # held back, how many parts they hold, and the window offsets they could still start at.
        self._window_artifact: str | None = None
        self._window: list[Part] = []
        self._held: list[TaskArtifactUpdateEvent] = []
        self._held_parts = 0
        self._starts: list[int] = []
        self._overlap = False

    def finished(self, stop_at_interrupt: bool) -> bool:
        if self.message_done:
            return True
        if self.state is None:
            return False
        if self.state in _TERMINAL:
            return True
        return stop_at_interrupt and self.state in _INTERRUPTED and not self.stale_interrupt

    def interrupted(self) -> None:
        """The connection broke: what was held back is not shown (the next snapshot or replay covers it)."""
        self._close_overlap(release=False)

    def accept(self, response: StreamResponse, event_id: str | None = None) -> list[Event]:
        event = response.payload
        if isinstance(event, Task):
            self._close_overlap(release=False)
            return self._snapshot(event, numbered=event_id is not None)
        out: list[Event] = []
        if self._overlap:
            if self._maybe_repeat(event):
                return []
            out.extend(self._close_overlap(release=True))
        if isinstance(event, Message):
            if event.message_id in self.seen_messages:
                return out
            self.seen_messages.add(event.message_id)
            if self.task_id is None:
                self.message_done = True
            return [*out, event]
        if isinstance(event, TaskArtifactUpdateEvent):
            return [*out, *self._artifact(event)]
        state, message = event.status.state, event.status.message
        if message is not None:
            if message.message_id in self.seen_messages and state is self.state:
                # The same status again (a replay). A known message with a new state is not one: an agent may reuse
                # its message for WORKING then COMPLETED, or the snapshot's history may already hold it.
                return out
            self.seen_messages.add(message.message_id)
        self.state = state
        self.stale_interrupt = False
        return [*out, event]

    def _maybe_repeat(self, event: Event) -> bool:
        """In the overlap after an unnumbered snapshot: hold/drop ``event`` if it may repeat the snapshot."""
        if isinstance(event, TaskStatusUpdateEvent):
            message = event.status.message
            # The snapshot's own status again (no new message): a repeat, and harmless to drop even if not.
            return event.status.state is self.state and (message is None or message.message_id in self.seen_messages)
        if not (
            isinstance(event, TaskArtifactUpdateEvent)
            and event.append
            and event.artifact.artifact_id == self._window_artifact
        ):
            return False
        parts = event.artifact.parts
        start, end = self._held_parts, self._held_parts + len(parts)
        starts = [
            p for p in self._starts if p + end <= len(self._window) and self._window[p + start : p + end] == parts
        ]
        if not starts:
            return False
        self._held.append(event)
        self._held_parts = end
        self._starts = starts
        if any(p + end == len(self._window) for p in starts):
            # The held chunks end exactly where the snapshot ends: they are the overlap. Drop them.
            self._close_overlap(release=False)
        return True

    def _close_overlap(self, *, release: bool) -> list[Event]:
        held = self._held
        self._overlap = False
        self._window_artifact = None
        self._window = []
        self._held = []
        self._held_parts = 0
        self._starts = []
        if not release:
            return []
        out: list[Event] = []
        for event in held:
            out.extend(self._artifact(event))
        return out

    def _artifact(self, event: TaskArtifactUpdateEvent) -> list[Event]:
        key = event.artifact.artifact_id
        count = len(event.artifact.parts)
        if event.append:
            self.parts_seen[key] = self.parts_seen.get(key, 0) + count
        else:
            self.parts_seen[key] = count
        return [event]

    def _snapshot(self, task: Task, *, numbered: bool) -> list[Event]:
        self.task_id = task.id
        self.context_id = task.context_id
        added: dict[str, list[Part]] = {}
        # Only a SubscribeToTask answer (a subscription's first event, or any resume) can overlap what follows it; the
        # first Task of SendStreamingMessage is the execution's own first event.
        overlap_possible = not numbered and (self.started or self.subscription)
        if not self.started:
            # The first Task of a stream is shown as it is.
            self.started = True
            self.state = task.status.state
            self.stale_interrupt = self.state in _INTERRUPTED and (
                self.continuing or (self.known is not None and same_status(task.status, self.known))
            )
            for artifact in task.artifacts:
                self.parts_seen[artifact.artifact_id] = len(artifact.parts)
                added[artifact.artifact_id] = list(artifact.parts)
            for message in task.history:
                self.seen_messages.add(message.message_id)
            if task.status.message is not None:
                # Shown with this Task even when its history leaves it out: a later snapshot repeating it is no news.
                self.seen_messages.add(task.status.message.message_id)
            out: list[Event] = [task]
        else:
            # A snapshot on resume: turn it into exactly what the application has not seen yet.
            out = []
            for artifact in task.artifacts:
                seen = self.parts_seen.get(artifact.artifact_id, 0)
                if len(artifact.parts) > seen:
                    missing = artifact.model_copy(update={"parts": artifact.parts[seen:]})
                    out.append(
                        TaskArtifactUpdateEvent(
                            task_id=task.id, context_id=task.context_id, artifact=missing, append=seen > 0
                        )
                    )
                    self.parts_seen[artifact.artifact_id] = len(artifact.parts)
                    added[artifact.artifact_id] = list(artifact.parts[seen:])
            status = task.status
            if status.state is not self.state or (
                status.message is not None and status.message.message_id not in self.seen_messages
            ):
                if status.message is not None:
                    self.seen_messages.add(status.message.message_id)
                self.state = status.state
                self.stale_interrupt = False
                out.append(
                    TaskStatusUpdateEvent(
                        task_id=task.id, context_id=task.context_id, status=TaskStatus.model_validate(status)
                    )
                )
        if overlap_possible:
            self._overlap = True
            if len(added) == 1:
                # One artifact grew: the chunks right after this snapshot may repeat its new parts.
                self._window_artifact, window = next(iter(added.items()))
                self._window = window
                self._starts = list(range(len(window)))
        return out
