"""What an executor sees of a request: ``CallContext`` (who, which tenant, which extensions) and ``RequestContext``.

``RequestContext.cancelled`` is the cooperative cancellation flag: the engine sets it (and the ``cancel_event``)
before it delivers ``CancelledError`` into ``execute``, so long loops can stop at a clean point first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relaykit._principal import ANONYMOUS, ANONYMOUS_PRINCIPAL, Principal
from relaykit._requests import SendMessageConfiguration
from relaykit._types import Message, Task

__all__ = ["ANONYMOUS", "CallContext", "RequestContext"]


@dataclass(slots=True)
class CallContext:
    """Who is calling and how: the owner key, the principal, tenant, requested extensions, transport headers.

    ``user`` is the owner key every task, push config and subscription is scoped by: ``principal.id`` when a
    binding built the context (``relaykit.auth``), any string an in-process caller chooses otherwise. Bindings build
    one per request; tests and in-process callers may pass their own.

    >>> CallContext(user="alice", tenant="acme").user
    'alice'
    """

    user: str = ANONYMOUS
    tenant: str = ""
    requested_extensions: frozenset[str] = frozenset()
    activated_extensions: set[str] = field(default_factory=set)
    headers: Mapping[str, str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    principal: Principal = ANONYMOUS_PRINCIPAL

    @property
    def authenticated(self) -> bool:
        """Whether the caller is someone: an authenticated principal, or an in-process caller that named a user."""
        return self.user != ANONYMOUS


class RequestContext:
    """Everything ``AgentExecutor.execute`` needs to handle one incoming message.

    ``task`` is the stored snapshot for a continuation (``None`` for a new task); ``task_id`` and ``context_id`` are
    always set, assigned by the server for a new task.
    """

    __slots__ = (
        "_cancel_event",
        "_cancelled",
        "call",
        "configuration",
        "context_id",
        "message",
        "metadata",
        "task",
        "task_id",
    )

    def __init__(
        self,
        *,
        task_id: str,
        context_id: str,
        message: Message | None,
        task: Task | None = None,
        metadata: dict[str, Any] | None = None,
        configuration: SendMessageConfiguration | None = None,
        call: CallContext | None = None,
    ) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.message = message
        self.task = task
        self.metadata: dict[str, Any] = metadata or {}
        self.configuration = configuration
        self.call = call or CallContext()
        # The Event is made only if someone waits on it; most executions are never cancelled.
        self._cancel_event: asyncio.Event | None = None
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        """True once a cancel of this task was requested."""
        return self._cancelled

    @property
    def cancel_event(self) -> asyncio.Event:
        """Set when a cancel is requested; await it to react without polling."""
        if self._cancel_event is None:
            self._cancel_event = asyncio.Event()
            if self._cancelled:
                self._cancel_event.set()
        return self._cancel_event

    def request_cancel(self) -> None:
        """Mark the request cancelled (the engine calls this first when a cancel arrives)."""
        self._cancelled = True
        if self._cancel_event is not None:
            self._cancel_event.set()

    @property
    def text(self) -> str:
        """The text of the incoming message (its text parts joined)."""
        return self.message.text if self.message is not None else ""

    def get_user_input(self, delimiter: str = "\n") -> str:
        """The incoming message's text parts joined with ``delimiter`` (the official SDK's name for this)."""
        if self.message is None:
            return ""
        return delimiter.join(p.text for p in self.message.parts if p.text is not None)

    @property
    def is_continuation(self) -> bool:
        """True when the message continues an existing task (e.g. answers INPUT_REQUIRED)."""
        return self.task is not None
