"""Stream: text N ⇒ N artifact chunks of ONE artifact (``chunk 0`` … ``chunk N-1``), then COMPLETED.

The first chunk has append=false, later ones append=true, the last one lastChunk=true.

    relaykit serve examples/stream.py
"""

from relaykit import agent


@agent
async def stream(context):
    """Streams N chunks of one artifact; send an integer N."""
    text = context.text.strip()
    count = int(text) if text.isdigit() else 10
    for i in range(count):
        yield f"chunk {i}"
