"""The agent the auth tests serve: it answers with the owner key it ran for, so a test sees who the server thinks
called; ``ask`` pauses in INPUT_REQUIRED, ``slow`` works until cancelled."""

from __future__ import annotations

import asyncio

from relaykit import agent


@agent
async def whoami(context):  # type: ignore[no-untyped-def]
    """Tells the caller who it is."""
    text = context.text
    if text == "ask" and not context.is_continuation:
        context.requires_input("what else?")
    if text == "slow":
        await asyncio.Event().wait()  # until the task is cancelled
    return f"{context.call.user}|{text}"
