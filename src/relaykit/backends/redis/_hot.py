"""The hot path's own Redis connection: the commands every message costs (its idempotency key, its event appends)
go out on one dedicated connection, those issued in one pass of the event loop together in one pipeline.

Invariants:

* one connection, never shared with a blocking read (the event reader's ``XREAD``, the work queue's ``XREADGROUP``,
  pub/sub), so a hot command never waits behind one, and never takes a connection from the pool;
* one pipeline in flight at a time; commands issued meanwhile go out together in the next, in the order issued
  (so one caller's commands, issued one batch after another, are applied in that order);
* each caller gets the replies to its own commands, a command's error (``ResponseError``) as its reply; a failure
  of the connection fails every caller of that pipeline (their retry policies differ: each retries its own), and
  the next pipeline reconnects.

It speaks RESP through redis-py's connection (its parser, hiredis when installed) without redis-py's pipeline
object, whose per-call bookkeeping cost more than the round trip itself on a loaded replica; commands are encoded by
hiredis and replies read from the parser directly, for the same reason (measured on a 2-core VM, the three batches of a
scale-out message at 16 concurrent: ~170 µs of CPU through redis-py's encoder and reads, ~55 µs this way).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

__all__ = ["Command", "HotLine"]

Command = Sequence[bytes | str | int]


def _hiredis_packer() -> Any:
    """hiredis's command encoder (the ``redis`` extra installs hiredis): ~1.5 µs a command, against ~9 µs for
    redis-py's Python encoder, for the same bytes. None without hiredis."""
    try:
        from hiredis import pack_command
    except ImportError:  # pragma: no cover - the extra installs hiredis
        return None
    return pack_command


_pack_one: Any = _hiredis_packer()


def _pack(connection: Any, commands: list[Command]) -> Any:
    """The RESP bytes of ``commands``: hiredis's encoder when installed (the same bytes), else redis-py's."""
    if _pack_one is None:
        return connection.pack_commands(commands)
    return b"".join([_pack_one(tuple(command)) for command in commands])


class HotLine:
    """Commands batched per loop pass on one dedicated connection of ``client``'s pool settings."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._connection: Any = None
        self._queue: list[tuple[Sequence[Command], asyncio.Future[list[Any]]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def run(self, commands: Sequence[Command]) -> list[Any]:
        """The replies to ``commands`` (sent in this order, in one pipeline with the other callers' of this pass)."""
        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queue.append((commands, done))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_all(), name="relaykit-redis-hot")
        return await done

    async def close(self) -> None:
        writer = self._writer
        if writer is not None:
            await asyncio.wait({writer}, timeout=1.0)
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.disconnect()
            self._connection = None

    async def _write_all(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._write(batch)
        finally:
            self._writer = None

    async def _write(self, batch: list[tuple[Sequence[Command], asyncio.Future[list[Any]]]]) -> None:
        from redis.exceptions import ResponseError

        connection = self._connection
        if connection is None:
            connection = self._connection = self._client.connection_pool.make_connection()
        flat = [command for commands, _ in batch for command in commands]
        replies: list[Any] = []
        try:
            # A broken connection is reconnected by the send (redis-py connects a disconnected connection).
            await connection.send_packed_command(_pack(connection, flat), check_health=False)
            # The replies straight from the connection's parser (hiredis's when installed): the connection's own
            # read_response adds per reply what this connection never uses (a read timeout, RESP3 pushes, health
            # checks), as much again as the parse. The parser returns a command's error reply as a ResponseError;
            # the connection's read_response (the fallback should a redis-py release rename its parser) raises it.
            parser = getattr(connection, "_parser", None)
            read = getattr(parser, "read_response", None) or connection.read_response
            for _ in flat:
                try:
                    replies.append(await read())
                except ResponseError as exc:  # a command's own error: the connection is still in step
                    replies.append(exc)
        except BaseException as exc:
            # The connection is out of step (redis-py disconnected it): the next pipeline starts on a new one.
            with contextlib.suppress(Exception):
                await connection.disconnect(nowait=True)
            if isinstance(exc, AttributeError):  # the parser lost its stream: the connection was closed under it
                exc = ConnectionError(f"the Redis connection closed: {exc}")
            error = exc if isinstance(exc, Exception) else ConnectionError("the Redis pipeline was interrupted")
            for _, done in batch:
                if not done.done():
                    done.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        at = 0
        for commands, done in batch:
            if not done.done():
                done.set_result(replies[at : at + len(commands)])
            at += len(commands)
