"""``EventQueue``: where an executor publishes its events.

Publishing hands the event straight to the engine's consumer (apply, persist, publish) in the caller's coroutine:
no hand-off queue, no extra task switch per event, and natural back-pressure: ``enqueue_event`` returns once the
event is recorded. Once ``execute`` returns the queue is closed and further writes raise ``QueueClosedError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from relaykit._types import Message, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

__all__ = ["Event", "EventQueue", "QueueClosedError"]

Event = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


class QueueClosedError(RuntimeError):
    """An event was published after the execution that owned the queue ended."""


class EventQueue:
    """The executor's outlet for events (the official SDK's ``EventQueue`` shape).

    >>> import asyncio
    >>> seen = []
    >>> async def sink(e): seen.append(e)
    >>> q = EventQueue(sink)
    """

    __slots__ = ("_closed", "_sink")

    def __init__(self, sink: Callable[[Event], Awaitable[None]]) -> None:
        self._sink = sink
        self._closed = False

    def enqueue_event(self, event: Event) -> Awaitable[None]:
        """Publish one event (await it); returns once the engine has recorded it."""
        # The sink's own coroutine, not one around it: a frame less per event (a 1,000-chunk stream, 1,000 frames).
        if self._closed:
            return _refuse()
        return self._sink(event)

    publish = enqueue_event

    def close(self) -> None:
        """Refuse further events."""
        self._closed = True

    @property
    def is_closed(self) -> bool:
        """True once the queue refuses events."""
        return self._closed


async def _refuse() -> None:
    # Raised when awaited, as from a coroutine of its own: a caller that schedules the call sees it there too.
    raise QueueClosedError("the execution that owned this queue has ended; events can no longer be published")
