"""The client's event-stream line splitter: every way the server's bytes may be cut into chunks gives the same lines
(CRLF, LF and CR ends, a CRLF cut between two chunks, U+2028 inside a line), and a line without end is bounded."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from relaykit.client._transport import _sse_lines
from relaykit.errors import A2AResponseTooLargeError

STREAM = b"data: a\r\n\r\ndata: bb\n\nid: 1\rdata: \xe2\x80\xa8x\r\r: c\n" * 40 + b"data: unfinished"


class _Chunks:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def _lines(chunks: list[bytes], limit: int = 1 << 20) -> list[bytes]:
    return [line async for line in _sse_lines(_Chunks(chunks), limit, "http://agent")]  # type: ignore[arg-type]


async def test_any_chunking_gives_the_same_lines() -> None:
    expected = STREAM.splitlines()[:-1]  # the last line has no end: it is not a line yet
    assert await _lines([STREAM]) == expected
    rng = random.Random(18)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(1, 80)))
        chunks = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        assert await _lines(chunks) == expected, chunks


async def test_a_line_longer_than_the_limit_is_refused() -> None:
    with pytest.raises(A2AResponseTooLargeError):
        await _lines([b"data: " + b"x" * 100] * 20, limit=1000)
    # The same bytes with line ends every so often are fine.
    assert len(await _lines([b"data: " + b"x" * 100 + b"\n"] * 20, limit=1000)) == 20
