"""The benchmark agent (shared harness behaviour): ``stream N …`` ⇒ N appended chunks, then COMPLETED;
any other text T ⇒ one artifact T, COMPLETED.

    relaykit serve bench/echo.py --store memory --port 9201
"""

import re

from relaykit import AgentExecutor, RequestContext, TaskUpdater
from relaykit.server import EventQueue

_STREAM = re.compile(r"^stream (\d+)")


class BenchEcho(AgentExecutor):
    """Echo for the protocol benchmark."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        text = context.text
        found = _STREAM.match(text)
        if found is None:
            await updater.complete_with_text(text)
            return
        count = int(found.group(1))
        artifact_id = None
        for i in range(count):
            artifact_id = await updater.artifact(
                f"chunk {i}", artifact_id=artifact_id, append=i > 0, last_chunk=i == count - 1
            )
        await updater.complete()


agent = BenchEcho()
