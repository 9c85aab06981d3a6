"""Stream: text N ⇒ N artifact chunks of ONE artifact (``chunk 0`` … ``chunk N-1``), then COMPLETED.

The first chunk has append=false, later ones append=true, the last one lastChunk=true. ``STREAM_DELAY`` (env,
seconds, default 0) waits that long before each chunk, to watch them arrive (``relaykit serve … --inspector``).

    relaykit serve examples/stream.py
"""

import asyncio
import os

from relaykit import agent


@agent
async def stream(context):
    """Streams N chunks of one artifact; send an integer N."""
    text = context.text.strip()
    count = int(text) if text.isdigit() else 10
    delay = float(os.environ.get("STREAM_DELAY", "0"))
    for i in range(count):
        if delay:
            await asyncio.sleep(delay)
        yield f"chunk {i}"
