"""The contract users implement: ``AgentExecutor`` (same shape as the official SDK's, so its users feel at home).

Guarantees the engine gives every executor:

* never two ``execute`` calls for the same task at once (a second message waits its turn);
* an exception in ``execute`` ⇒ the task is FAILED with a safe message (details go to the log, not the client);
* a timeout ⇒ FAILED; a cancel ⇒ ``context.cancelled`` set, ``CancelledError`` delivered into ``execute``, then
  ``cancel()`` runs, then CANCELED is persisted before CancelTask answers;
* after ``execute`` returns its queue is closed.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from relaykit.server._context import RequestContext
from relaykit.server._queue import EventQueue

__all__ = ["AgentExecutor"]


class AgentExecutor(abc.ABC):
    """Subclass this and implement ``execute``.

    >>> from relaykit.server import AgentExecutor, TaskUpdater
    >>> class Echo(AgentExecutor):
    ...     async def execute(self, context, queue):
    ...         updater = TaskUpdater(queue, context)
    ...         await updater.complete_with_text(context.text)
    """

    idempotent: ClassVar[bool] = False
    """True if running ``execute`` again for the same message is safe (scale-out re-runs lost work)."""

    idempotency_window: ClassVar[float | None] = None
    """Seconds a repeated messageId gets the original result instead of a new run, for this agent; None: the
    server's ``idempotency_window`` (``--idempotency-window``, default 10 minutes); 0: off, for an agent whose
    clients reuse messageIds for different messages (the A2A conformance kit does)."""

    @abc.abstractmethod
    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        """Handle one message: publish one Message, or a Task and its updates; return when done or interrupted."""

    async def cancel(self, context: RequestContext, queue: EventQueue) -> None:
        """Called after ``execute`` was interrupted by a cancel. Default: nothing; the engine writes CANCELED.

        Raise ``TaskNotCancelableError`` to refuse, or publish your own CANCELED status with a message.
        """
        return None

    async def on_shutdown(self) -> None:
        """Called once on graceful shutdown, after running executions are drained."""
        return None
