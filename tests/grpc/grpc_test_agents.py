"""Agents the gRPC tests serve (in-process, or with ``relaykit serve tests/grpc/grpc_test_agents.py[:name]``).

``agent`` (``Interop``), dispatched on the message text, the same behaviours as bench/grpc_sdk_peer.py:

* ``stream N`` ⇒ N chunks of one artifact (``chunk 0`` …, append after the first, lastChunk on the last), COMPLETED;
* ``ask …`` ⇒ INPUT_REQUIRED ("What is your name?"); the next message on the task ⇒ COMPLETED, artifact ``got: T``;
* ``hold`` ⇒ WORKING until cancelled (at most ``HOLD_SECONDS``);
* ``message`` ⇒ a bare Message reply (no task);
* ``fail`` ⇒ FAILED; anything else T ⇒ COMPLETED with one artifact T.
"""

import asyncio
import re

from relaykit import AgentExecutor, Message, RequestContext, TaskUpdater
from relaykit.server import EventQueue

STREAM = re.compile(r"^stream (\d+)")
HOLD_SECONDS = 30.0


class Interop(AgentExecutor):
    """Echo, chunked streams, a question, a long task to cancel, a message reply."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        text = context.text
        if context.task is not None and context.task.status.state.is_interrupted:
            await updater.artifact(f"got: {text}", artifact_id="answer", name="answer")
            await updater.complete()
            return
        found = STREAM.match(text)
        if found is not None:
            count = int(found.group(1))
            artifact_id = None
            for i in range(count):
                artifact_id = await updater.artifact(
                    f"chunk {i}", artifact_id=artifact_id, name="stream", append=i > 0, last_chunk=i == count - 1
                )
            await updater.complete()
        elif text.startswith("ask"):
            await updater.requires_input("What is your name?")
        elif text.startswith("hold"):
            await updater.working("holding")
            await asyncio.sleep(HOLD_SECONDS)
            await updater.complete()
        elif text == "message":
            await queue.enqueue_event(Message.agent(f"reply to {text}", context_id=context.context_id))
        elif text == "fail":
            await updater.fail("failed on purpose")
        else:
            await updater.complete_with_text(text)


agent = Interop()
