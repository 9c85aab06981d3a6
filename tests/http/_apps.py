"""Apps the HTTP tests serve with ``relaykit serve tests/http/_apps.py:NAME`` (each in a separate process).

``bad_input_app``: small limits, so the limit rows of ``test_bad_input.py`` are cheap to hit (a 1 KiB request body,
one queued message per task). Text ``wait`` keeps the task WORKING (until cancelled, or 60 s); any other text T
completes with one artifact T.

``function_app``: an ``@agent`` function (``-> str``) that sleeps ``SLOW_SECONDS`` before answering; its card's URLs
come from ``RELAYKIT_TEST_PUBLIC_URL`` (set by the test fixture), so the SDK client can be built from the card.
"""

import asyncio
import os

from relaykit import AgentExecutor, RequestContext, TaskUpdater, agent
from relaykit.http import create_app
from relaykit.server import EventQueue

MAX_BODY = 1024
MAX_QUEUED = 1
PUBLIC_URL = os.environ.get("RELAYKIT_TEST_PUBLIC_URL", "http://127.0.0.1:8000")


class Waiter(AgentExecutor):
    """``wait`` works for 60 s (cancel it); any other text is echoed as one artifact."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        text = context.message.text if context.message is not None else ""
        await updater.working()
        if text == "wait":
            await asyncio.sleep(60)
        await updater.artifact(text)
        await updater.complete()


bad_input_app = create_app(
    Waiter(), store="memory", max_body=MAX_BODY, max_queued=MAX_QUEUED, public_url=PUBLIC_URL, grace=1.0
)


@agent
async def slow_function(context) -> str:  # type: ignore[no-untyped-def]
    """Answers with the text after SLOW_SECONDS seconds."""
    await asyncio.sleep(float(os.environ.get("SLOW_SECONDS", "60")))
    return str(context.text)


function_app = create_app(slow_function, store="memory", public_url=PUBLIC_URL, grace=1.0)
