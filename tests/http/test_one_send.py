"""A response's head and its body leave in one send (``http/_onesend.py``), and nothing is held back or reordered.

The first tests drive ``HeadWithBody`` over a recording transport; the last one asks a real ``relaykit serve`` and
reads the first bytes that arrive: with one send they are the whole answer (one loopback segment), with two they
would be the head alone.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest
from support.servers import ServerProcess, start_serve

from relaykit.http._onesend import HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"
IO_TIMEOUT = 5.0


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def test_a_head_and_its_body_in_the_same_pass_are_one_write() -> None:
    transport = Recording()
    cycle = HeadWithBody(transport, asyncio.get_running_loop())
    cycle.write(HEAD)
    assert transport.writes == []
    cycle.write(b"{}")
    assert transport.writes == [HEAD + b"{}"]
    cycle.write(b"more")  # later writes of the same response go straight through
    assert transport.writes == [HEAD + b"{}", b"more"]


async def test_a_head_without_body_yet_leaves_at_the_end_of_the_pass() -> None:
    # A stream whose first event is not ready, a HEAD request, a 204: the client must not wait for its headers.
    transport = Recording()
    cycle = HeadWithBody(transport, asyncio.get_running_loop())
    cycle.write(HEAD)
    await asyncio.sleep(0)  # one loop pass
    assert transport.writes == [HEAD]
    cycle.write(b"data: 1\n\n")
    assert transport.writes == [HEAD, b"data: 1\n\n"]


async def test_100_continue_is_not_held_and_the_head_after_it_is() -> None:
    transport = Recording()
    cycle = HeadWithBody(transport, asyncio.get_running_loop())
    cycle.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cycle.write(HEAD)
    cycle.write(b"{}")
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n", HEAD + b"{}"]


async def test_close_sends_the_held_head_first() -> None:
    transport = Recording()
    cycle = HeadWithBody(transport, asyncio.get_running_loop())
    cycle.write(HEAD)
    cycle.close()
    assert transport.writes == [HEAD]
    assert transport.closed
    assert cycle.is_closing()
    await asyncio.sleep(0)  # the end-of-pass flush finds nothing left to send
    assert transport.writes == [HEAD]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_serve("examples/echo.py", tmp_path_factory.mktemp("onesend"))
    try:
        yield proc
    finally:
        proc.stop()


def _first_read(server: ServerProcess, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(raw)
        return sock.recv(65536)  # what one send of the server delivers (a loopback segment holds 64 KiB)


def _rpc(method: str) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": {"message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hello"}]}},
        }
    ).encode()
    head = (
        b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\na2a-version: 1.0\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    )
    return head + body


def test_a_served_answer_arrives_whole_in_the_first_read(server: ServerProcess) -> None:
    for _ in range(5):  # each on a new connection: every one of them in one piece
        first = _first_read(server, _rpc("SendMessage"))
        head, _, rest = first.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), first[:200]
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        assert len(rest) == length, first
        assert json.loads(rest)["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_streamed_answer_sends_its_head_with_the_first_event(server: ServerProcess) -> None:
    first = _first_read(server, _rpc("SendStreamingMessage"))
    head, _, rest = first.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), first[:200]
    assert b"data: " in rest, first
