"""The plain-ASGI pieces of the tests' small receivers (webhook recorders, the OTLP receiver): answering the lifespan
protocol, reading a request body, sending a complete response.

Standard library only, so the receivers that run as standalone scripts (``python3 tests/push/webhook_recorder.py``)
can import it too, once ``tests/`` is on their ``sys.path``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["lifespan", "read_body", "respond"]


async def lifespan(receive: Any, send: Any) -> None:
    """Answer a ``lifespan`` scope: startup complete, then shutdown complete (returns at shutdown)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        else:
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Any) -> bytes:
    """The whole request body, however many ``http.request`` messages it came in."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(send: Any, status: int, body: bytes, content_type: bytes | None = b"application/json") -> None:
    """Send a complete response: ``status``, ``Content-Type`` (unless ``None``), ``Content-Length`` and ``body``."""
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.insert(0, (b"content-type", content_type))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
