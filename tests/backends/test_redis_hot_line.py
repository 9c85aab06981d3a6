"""The hot path's Redis connection (``backends.redis._hot.HotLine``) on the real server: the bytes it sends, the
reply each caller gets back (a command's own error among them), and a connection lost under a batch.

The hot line encodes commands with hiredis and reads replies from the connection's parser directly (both cheaper than
redis-py's own path); these are the behaviours that must not change with that: the same RESP bytes as redis-py's
encoder, an error reply in its own slot without failing the batch, and a broken connection reported as an outage
(so the callers' retry policies apply) and replaced by the next batch.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from relaykit.backends.redis._hot import HotLine
from relaykit.backends.redis._retry import connect_redis, is_outage

pytestmark = pytest.mark.redis


@pytest.fixture
async def line(redis_url: str) -> AsyncIterator[tuple[HotLine, Any, str]]:
    client = connect_redis(redis_url)
    hot = HotLine(client)
    prefix = f"test-hot:{secrets.token_hex(4)}:"
    try:
        yield hot, client, prefix
    finally:
        await hot.close()
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_commands_go_out_as_redis_py_encodes_them(
    line: tuple[HotLine, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hot, client, prefix = line
    assert await hot.run([["PING"]]) == [b"PONG"]  # connected: the connection's own hello is not captured below
    sent: list[bytes] = []
    original = AbstractConnection.send_packed_command

    async def capture(self: Any, command: Any, check_health: bool = True) -> None:
        sent.append(command if isinstance(command, bytes) else b"".join(command))
        await original(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", capture)
    body = '{"task":{"id":"t-1","status":{"state":"TASK_STATE_WORKING"}},"text":"naïve ✓"}'.encode()
    # The shapes the hot path sends: the idempotency transaction, event appends (bytes and text fields, an int
    # MAXLEN, an explicit id) and expiries.
    commands: list[list[bytes | str | int]] = [
        ["MULTI"],
        ["SET", f"{prefix}idem", '{"t":"t-1"}', "NX", "PX", 600_000],
        ["GET", f"{prefix}idem"],
        ["EXEC"],
        ["XADD", f"{prefix}events", "MAXLEN", "~", 10_000, "1-0", b"d", body, b"x", "m-1"],
        ["PEXPIRE", f"{prefix}events", 3_600_000],
    ]
    replies = await hot.run(commands)
    expected = b"".join(client.connection_pool.make_connection().pack_commands(commands))
    assert sent == [expected]
    assert replies[-3] == [b"OK", b'{"t":"t-1"}']
    assert replies[-2] == b"1-0"
    assert await client.xrange(f"{prefix}events") == [(b"1-0", {b"d": body, b"x": b"m-1"})]


async def test_each_caller_gets_its_own_replies_and_a_failing_command_only_its_error(
    line: tuple[HotLine, Any, str],
) -> None:
    hot, client, prefix = line
    await client.set(f"{prefix}text", b"not a number")
    # Three callers in one loop pass: one pipeline, each its own slice of the replies.
    first, second, third = await asyncio.gather(
        hot.run([["SET", f"{prefix}a", "1"], ["INCR", f"{prefix}a"]]),
        hot.run([["INCR", f"{prefix}text"], ["GET", f"{prefix}text"]]),
        hot.run([["XADD", f"{prefix}s", "5-0", "f", "v"], ["XADD", f"{prefix}s", "4-0", "f", "v"]]),
    )
    assert first == [b"OK", 2]
    assert isinstance(second[0], ResponseError)
    assert "not an integer" in str(second[0])
    assert second[1] == b"not a number"  # the command after the error still ran and answered
    assert third[0] == b"5-0"
    assert isinstance(third[1], ResponseError)
    assert "equal or smaller" in str(third[1])  # what the appends tell a conflicting append by
    # The connection is still in step: the next batch gets its own replies.
    assert await hot.run([["GET", f"{prefix}a"]]) == [b"2"]


async def test_a_connection_lost_under_a_batch_fails_it_as_an_outage_and_the_next_batch_reconnects(
    line: tuple[HotLine, Any, str],
) -> None:
    hot, client, prefix = line
    assert await hot.run([["CLIENT", "SETNAME", f"{prefix}hot"]]) == [b"OK"]
    connections = await client.client_list()
    (hot_id,) = [c["id"] for c in connections if c.get("name") == f"{prefix}hot"]
    await client.client_kill_filter(_id=hot_id)
    with pytest.raises((RedisConnectionError, ConnectionError, OSError)) as failed:
        # The server closed the connection: the batch's write or its read finds out.
        await hot.run([["SET", f"{prefix}after", "1"]])
    assert is_outage(failed.value), repr(failed.value)
    # A new connection for the next batch, in step from its first reply.
    assert await hot.run([["SET", f"{prefix}again", "1"], ["GET", f"{prefix}again"]]) == [b"OK", b"1"]
