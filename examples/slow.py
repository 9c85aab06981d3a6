"""Slow: WORKING for SLOW_SECONDS (env, default 60) seconds, then COMPLETED; CancelTask ⇒ CANCELED promptly.

    SLOW_SECONDS=5 relaykit serve examples/slow.py
"""

import asyncio
import os

from relaykit import AgentExecutor, RequestContext, TaskUpdater
from relaykit.server import EventQueue


class Slow(AgentExecutor):
    """Works for SLOW_SECONDS seconds, then completes. Cancel it any time."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        seconds = float(os.environ.get("SLOW_SECONDS", "60"))
        await updater.working(f"working for {seconds:g} seconds")
        # A cancel delivers CancelledError here at once; nothing to clean up, so the engine writes CANCELED.
        await asyncio.sleep(seconds)
        await updater.complete_with_text(f"done after {seconds:g} seconds")


agent = Slow()
