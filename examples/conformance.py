"""The agent the A2A conformance kit expects (github.com/a2aproject/a2a-tck, branch 1.0-dev: its agent-side
requirements, keyed by messageId prefix).

Behaviour is chosen by the incoming message's ``messageId`` prefix (the kit appends a per-run suffix), longest
prefix first. A follow-up on an existing task carries its own messageId and is dispatched the same way.

    relaykit serve examples/conformance.py --port 9995 --store memory --push-allow 127.0.0.1 --push-allow ::1

The agent turns messageId de-duplication off for itself (``idempotency_window = 0``): the kit reuses one messageId
per scenario (``tck-input-required-<run>`` for every input-required task it creates, and for follow-ups on them),
which relaykit would otherwise take as retries of the first (the spec lets a server dedupe sends on messageId, which
it calls the message's unique identifier).
"""

import asyncio
import os

from relaykit import AgentExecutor, Message, Part, RequestContext, TaskUpdater
from relaykit.server import EventQueue


async def _complete(u: TaskUpdater, c: RequestContext) -> None:
    await u.complete(u.message("Hello from TCK"))


async def _artifact_text(u: TaskUpdater, c: RequestContext) -> None:
    await u.artifact("Generated text content")
    await u.complete()


async def _artifact_url(u: TaskUpdater, c: RequestContext) -> None:
    await u.artifact(Part.from_url("https://example.com/output.txt", filename="output.txt", media_type="text/plain"))
    await u.complete()


async def _artifact_file(u: TaskUpdater, c: RequestContext) -> None:
    await u.artifact(Part.from_bytes(b"Generated file content", filename="output.txt", media_type="text/plain"))
    await u.complete()


async def _artifact_data(u: TaskUpdater, c: RequestContext) -> None:
    await u.artifact(Part.from_data({"key": "value", "count": 42}, media_type="application/json"))
    await u.complete()


async def _input_required(u: TaskUpdater, c: RequestContext) -> None:
    await u.requires_input("Please provide more input")


async def _reject(u: TaskUpdater, c: RequestContext) -> None:
    await u.reject("rejected")


def _streams(text: str):  # type: ignore[no-untyped-def]
    async def run(u: TaskUpdater, c: RequestContext) -> None:
        await u.working()
        await u.artifact(text)
        await u.complete()

    return run


async def _stream_completed(u: TaskUpdater, c: RequestContext) -> None:
    await u.complete()


async def _stream_file(u: TaskUpdater, c: RequestContext) -> None:
    await u.working()
    await u.artifact(Part.from_bytes(b"Streamed file content", filename="output.txt", media_type="text/plain"))
    await u.complete()


async def _stream_chunked(u: TaskUpdater, c: RequestContext) -> None:
    await u.working()
    # The kit lists both chunks as "append"; appending to an artifact that does not exist yet is an agent
    # error in relaykit (and in the official SDK), so the first chunk creates it and the second appends.
    artifact_id = await u.artifact("chunk-1 ")
    await u.artifact("chunk-2", artifact_id=artifact_id, append=True, last_chunk=True)
    await u.complete()


async def _resubscribe(u: TaskUpdater, c: RequestContext) -> None:
    await u.working()
    await asyncio.sleep(2 * float(os.environ.get("TCK_STREAMING_TIMEOUT", "2.0")))
    await u.complete()


_BEHAVIOURS = {
    "tck-complete-task": _complete,
    "tck-artifact-text": _artifact_text,
    "tck-artifact-file-url": _artifact_url,
    "tck-artifact-file": _artifact_file,
    "tck-artifact-data": _artifact_data,
    "tck-input-required": _input_required,
    "tck-reject-task": _reject,
    "tck-stream-001": _streams("Stream hello from TCK"),
    "tck-stream-003": _streams("Stream task lifecycle"),
    "tck-stream-002": _stream_completed,
    "tck-stream-ordering-001": _streams("Ordered output"),
    "tck-stream-artifact-text": _streams("Streamed text content"),
    "tck-stream-artifact-file": _stream_file,
    "tck-stream-artifact-chunked": _stream_chunked,
    "test-resubscribe-message-id": _resubscribe,
    # The 0.3.x kit's webhook-delivery tests (a2a-tck PR 178): the first message must leave the task open so that a
    # push config can be set on it; the follow-up then moves it on, which is what gets delivered.
    "test-push-delivery-": _input_required,
    "test-push-trigger-": _complete,
}
_PREFIXES = sorted(_BEHAVIOURS, key=len, reverse=True)


class ConformanceAgent(AgentExecutor):
    """The A2A TCK's system-under-test agent."""

    # The kit sends different messages under one messageId: none of them is a retry of another.
    idempotency_window = 0

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        message_id = context.message.message_id if context.message is not None else ""
        if message_id.startswith("tck-message-response"):
            await queue.enqueue_event(Message.agent("Direct message response", context_id=context.context_id))
            return
        behaviour = next((_BEHAVIOURS[p] for p in _PREFIXES if message_id.startswith(p)), _complete)
        await behaviour(TaskUpdater(queue, context), context)


agent = ConformanceAgent()
