"""Human in the loop: what ``Client.ask()`` does when a task stops to wait for its client (digest §5.1, §7.4).

Rules:

* INPUT_REQUIRED: ``on_input_required(task)`` returns the answer (``Message | str``), sent on the same task.
* AUTH_REQUIRED: ``on_auth_required(task)`` gets the task (its ``status.message`` says what the agent needs) and
  returns one of
  - ``Message | str``: a reply on the task, as for a question (a credential the agent reads from the message, or
    a refusal the agent can act on);
  - ``Credentials(headers, message=…)``: ``headers`` are added to the client's own (sent on every later request),
    then ``message`` is sent on the task: the follow-up that carries the credential; without a ``message`` the
    client waits, as for ``None``. Every one of those headers is a credential under the plaintext rule of
    ``_plaintext``, whatever its name: over an exposed connection ``A2AInsecureCredentialsError`` is raised before
    anything is sent (and the headers are not added);
  - ``None``: the credential went out of band (a sign-in in a browser, an administrator's grant): nothing is sent,
    and the client waits for the task to move on by itself.
* Waiting follows the task past the status it was in (the same status seen again is no news) to its next stop:
  terminal, or interrupted anew. SubscribeToTask when the agent streams; GetTask polls (backing off as the client's
  ``ResumePolicy`` says, up to its ``max_backoff``) when it does not, and also once a subscription ends with the
  task still in that status (servers may close a subscription at an interrupted state, many 0.3 servers do: a
  resubscription would only replay it) or cannot be resumed (``A2AReconnectError``).
* ``input_timeout`` bounds each wait for a person: each handler call (a coroutine's; a sync handler is not
  interrupted), and each out-of-band wait, after which the task's ``A2ATaskAuthRequiredError`` is raised (the
  task stays as it is on the agent, to follow later with ``subscribe`` or ``get_task``). One option, not two: the
  credential arriving out of band answers the same question by another road. ``None`` (the default): no bound.
* ``max_turns`` bounds how many times handlers are called in one ``ask()``; beyond it the task's own
  ``A2ATask…RequiredError`` is raised.
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
