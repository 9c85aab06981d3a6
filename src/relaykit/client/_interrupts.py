"""Human in the loop: what ``Client.ask()`` does when a task stops to wait for its client (digest §5.1, §7.4).

Rules:

* INPUT_REQUIRED: ``on_input_required(task)`` returns the answer (``Message | str``), sent on the same task.
* AUTH_REQUIRED: ``on_auth_required(task)`` gets the task (its ``status.message`` says what the agent needs) and
  returns one of
  - ``Message | str``: a reply on the task, as for a question (a credential the agent reads from the message, or
    a refusal the agent can act on);
  - ``Credentials(headers, message=…)``: ``headers`` are added to the client's own (sent on every later request, so
    the plaintext rule of ``_plaintext`` applies to them as to any header), then ``message`` is sent on the task:
    the follow-up that carries the credential; without a ``message`` the client waits, as for ``None``;
  - ``None``: the credential went out of band (a sign-in in a browser, an administrator's grant): nothing is sent,
    and the client waits for the task to move on by itself.
* Waiting follows the task (SubscribeToTask when the agent streams, else GetTask polls) past the status it was in
  (the same status seen again is no news) to its next stop: terminal, or interrupted anew.
* A handler may be sync or async; ``input_timeout`` bounds each call. ``max_turns`` bounds how many times handlers
  are called in one ``ask()``; beyond it the task's own ``A2ATask…RequiredError`` is raised.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from relaykit._types import Message, Task

__all__ = ["AuthHandler", "AuthReply", "Credentials", "InputHandler", "call_handler"]


@dataclass(frozen=True)
class Credentials:
    """What ``on_auth_required`` returns once it has obtained a credential: ``headers`` the client sends from now on,
    on every request (as if given to ``Client(headers=…)``), and ``message``, the follow-up sent on the task with
    them (``None``: nothing is sent, the client waits for the task to resume by itself).

    >>> def sign_in(task):
    ...     token = "…"  # from an OAuth flow, a vault, a person
    ...     return Credentials({"X-Calendar-Token": token}, message="signed in")
    """

    headers: Mapping[str, str] = field(default_factory=dict)
    message: Message | str | None = None


AuthReply = Message | str | Credentials | None
InputHandler = Callable[[Task], Awaitable[Message | str] | Message | str]
AuthHandler = Callable[[Task], Awaitable[AuthReply] | AuthReply]


async def call_handler(handler: Callable[[Task], Any], task: Task, bound: float | None) -> Any:
    """``handler(task)``, awaited when it is a coroutine function's, within ``bound`` seconds (``None``: no bound)."""
    value = handler(task)
    if inspect.isawaitable(value):
        if bound is not None:
            return await asyncio.wait_for(value, bound)
        return await value
    return value
