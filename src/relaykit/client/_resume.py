"""Resumable streams: the loop that turns a dropped stream into one continuous stream of a task's events.

On a network error, a retryable status, or a stream that ends before the task is final, the client re-subscribes to
the same task with ``Last-Event-ID`` (bounded by ``ResumePolicy.attempts``, its backoff between attempts, reset by
every event new to the application, not by a snapshot that repeats what it has seen); ``StreamView``
(``_stream_view``) de-duplicates what a resumed stream repeats. Attempts exhausted ⇒ ``A2AReconnectError(attempts=N)``.
A task that ended while the stream was down is fetched instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from relaykit._errors import (
    A2AConnectionError,
    A2AError,
    A2AReconnectError,
    InvalidParamsError,
    UnsupportedOperationError,
)
from relaykit._requests import SubscribeToTaskRequest
from relaykit._state import INTERRUPTED, TERMINAL
from relaykit._types import StreamResponse, TaskStatus
from relaykit.client._policies import retryable
from relaykit.client._stream_view import Event, StreamView, same_status
from relaykit.client._transport import StreamEvent

if TYPE_CHECKING:
    from relaykit.client._client import Client

__all__ = ["aclose_stream", "resume_stream"]


async def resume_stream(
    client: Client,
    source: AsyncIterator[StreamEvent],
    *,
    stop_at_interrupt: bool,
    task_id: str | None = None,
    continuing: bool = False,
    known: TaskStatus | None = None,
) -> AsyncIterator[Event]:
    """The events of ``source`` as one stream: resumed (``SubscribeToTask`` after the last event id) while the
    task is not final, de-duplicated by ``StreamView``; ``stop_at_interrupt`` ends it at INPUT/AUTH_REQUIRED too,
    except at the interrupted status ``known`` (the one the caller waits for the task to leave). A stream the server
    ends while the task is still in ``known`` ends here too, without resuming: the caller polls."""
    # A subscription (task_id given) starts with a snapshot taken while the server already taps live events.
    view = StreamView(task_id, continuing=continuing, subscription=task_id is not None, known=known)
    attempts = 0
    while True:
        try:
            try:
                async for event_id, response in source:
                    if event_id:
                        view.last_event_id = event_id
                    events = view.accept(response, event_id)
                    if events:
                        # Progress resets the attempts; what the application has seen already does not: a
                        # resubscription always opens with a snapshot, and a server that sends only that and closes
                        # (allowed at an interrupted state) would otherwise be resubscribed to forever.
                        attempts = 0
                    for event in events:
                        yield event
                    if view.finished(stop_at_interrupt):
                        return
            finally:
                # Bug fix: a stream left suspended here (the task finished, the caller stopped early) was only
                # closed by the garbage collector, which finalises the nested generators (this source, the
                # transport's, httpx's) in no particular order: "aclose(): asynchronous generator is already
                # running" errors and connections held open. Close it now, in order.
                await aclose_stream(source)
            if view.task_id is None or view.finished(stop_at_interrupt):
                return
            if known is not None and view.stale_interrupt:
                # The server ended the subscription with the task still in the status the caller waits out (servers
                # may close a subscription at an interrupted state; many 0.3 servers do): a resubscription would
                # only replay it, attempt after attempt, and fail. The caller polls instead (``Client._settle``).
                return
            # The stream closed before the task was final (proxy idle timeout, server restart): resume.
            failure: A2AError = A2AConnectionError("the stream ended before the task finished")
        except (UnsupportedOperationError, InvalidParamsError) as exc:
            # Resubscribing to a task that ended meanwhile: fetch its final state instead. (0.3 servers answered
            # that resubscription with InvalidParams; a 1.0 server's InvalidParams is a real error.)
            legacy = getattr(client._transport, "v03", False)
            if view.task_id is None or attempts == 0 or (isinstance(exc, InvalidParamsError) and not legacy):
                raise
            for event in view.accept(StreamResponse(task=await client.get_task(view.task_id)), None):
                yield event
            return
        except A2AError as exc:
            if not retryable(exc) or view.task_id is None:
                raise
            failure = exc
        attempts += 1
        if attempts == 2 and view.task_id is not None:
            # A resubscription failed as the stream before it did. Some servers close a finished task's stream
            # without its last event and answer a resubscription to it with a broken stream rather than an error
            # (a2a-sdk 0.3 over HTTP+JSON after a cancel): the task's own state says whether there is anything left
            # to wait for. Only on this failure path, so a healthy stream pays nothing for it.
            try:
                task = await client.get_task(view.task_id)
            except A2AError:
                task = None
            if task is not None and (
                task.status.state in TERMINAL
                or (
                    stop_at_interrupt
                    and task.status.state in INTERRUPTED
                    and (known is None or not same_status(task.status, known))
                )
            ):
                for event in view.accept(StreamResponse(task=task), None):
                    yield event
                return
        if attempts > client.resume.attempts:
            raise A2AReconnectError(
                f"stream of task {view.task_id} could not be resumed after {client.resume.attempts} attempts "
                f"({failure})",
                attempts=client.resume.attempts,
            ) from failure
        await asyncio.sleep(client.resume.delay(attempts))
        view.interrupted()
        source = client._stream(
            "SubscribeToTask", SubscribeToTaskRequest(id=view.task_id), last_event_id=view.last_event_id
        )


async def aclose_stream(source: AsyncIterator[Any]) -> None:
    """Close an async generator now, in order (not at garbage collection)."""
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()
