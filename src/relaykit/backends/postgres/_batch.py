"""Write combining for the PostgreSQL task store: task writes that arrive while earlier ones are in flight reach the
server together, as one statement (one round trip, one commit).

Why: on loopback TCP, one asyncpg statement costs the client ~70 µs of CPU in the kernel and the driver whatever
it carries, and the pool's acquire and release add event-loop passes on top. Measured in a scale-out replica at 16
clients, the two writes of a blocking message (the claimed insert and the terminal update) were ~45% of its CPU.
Under concurrency, many tasks' writes are pending at once; sending them as one ``unnest`` statement pays that cost
once per batch instead of once per write.

How (per kind of write, e.g. "update a claimed task"):

* At most ``LANES`` statements of the kind are in flight. A write that finds none in flight and nobody queued goes
  out at once as the single-row statement, exactly as without combining: one client pays no added latency.
* A write that finds one in flight queues, and the queue goes out on the free lane once the loop has run the
  callbacks ready when it was queued: the writes of that pass (other requests' answers, typically) go with it as one
  statement instead of each taking a lane as it comes. It waits for the rest of its pass, never for the statement in
  flight. (Sending it at once on the free lane cost a statement and a commit for most messages of a replica at 8
  concurrent clients: bench/README.md, scale-out.)
* When every lane is busy, writes queue until one frees; then everything queued (up to ``MAX_ROWS`` rows, one row
  per task id) goes as one statement. Two lanes rather than one, so that one slow statement (a large body) does not
  hold up every task.
* Each caller learns its own row's outcome: written, or not (a version conflict, an id already stored), from the
  ids the statement returns. A batch that fails for any reason other than a lost server is retried row by row, so
  one bad row fails only its own caller. A lost server fails the whole batch with ``ServiceUnavailableError``: as
  for a single write, it may or may not have committed, and the callers' next writes conflict, which is safe.
* Durability is unchanged: a caller is answered after the commit that holds its row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from relaykit._errors import ServiceUnavailableError

__all__ = ["LANES", "MAX_ROWS", "WriteCombiner"]

LANES = 2
"""Statements of one kind in flight at once (the pool holds more connections, for reads and other writes)."""
MAX_ROWS = 64
"""Rows per combined statement: bounds one statement's size and the time a lane is held."""

Row = tuple[Any, ...]


class WriteCombiner:
    """One kind of single-row write, sent alone when it can be and combined with others when they wait.

    ``one(row)`` writes a row and returns whether it was written; ``many(rows)`` writes several (distinct ids, in
    ``row[0]``) in one statement and returns the ids written.

    >>> async def one(row): return True
    >>> async def many(rows): return {row[0] for row in rows}
    >>> combiner = WriteCombiner(one, many)
    >>> import asyncio
    >>> asyncio.run(combiner.write(("task-1", "body")))
    True
    """

    __slots__ = ("_busy", "_many", "_one", "_queue", "_runs", "_soon")

    def __init__(
        self,
        one: Callable[[Row], Awaitable[bool]],
        many: Callable[[list[Row]], Awaitable[set[str]]],
    ) -> None:
        self._one = one
        self._many = many
        self._queue: list[tuple[Row, asyncio.Future[bool]]] = []
        self._busy = 0  # statements in flight
        self._runs: set[asyncio.Task[None]] = set()  # batches in flight (a reference each, until they end)
        self._soon = False  # a pump is scheduled for the end of this loop pass

    async def write(self, row: Row) -> bool:
        """Write ``row`` (its task id first); True when written, False when the statement matched no row."""
        if not self._busy and not self._queue:
            self._busy += 1
            try:
                return await self._one(row)
            finally:
                self._busy -= 1
                self._pump()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._queue.append((row, future))
        if self._busy < LANES and not self._soon:
            self._soon = True
            loop.call_soon(self._pump_soon)
        return await future

    def _pump_soon(self) -> None:
        self._soon = False
        self._pump()

    def _pump(self) -> None:
        while self._queue and self._busy < LANES:
            batch = self._take()
            self._busy += 1
            run = asyncio.get_running_loop().create_task(self._run(batch))
            self._runs.add(run)
            run.add_done_callback(self._runs.discard)

    def _take(self) -> list[tuple[Row, asyncio.Future[bool]]]:
        # One row per task id in a statement: a task's second write waits for the next one (an UPDATE joined to
        # two source rows for one target would apply only one, and an INSERT … DO NOTHING would report both).
        batch: list[tuple[Row, asyncio.Future[bool]]] = []
        later: list[tuple[Row, asyncio.Future[bool]]] = []
        ids: set[str] = set()
        for item in self._queue:
            if item[1].done():  # its caller was cancelled before the write was sent: nothing to write
                continue
            key = item[0][0]
            if key in ids or len(batch) >= MAX_ROWS:
                later.append(item)
            else:
                ids.add(key)
                batch.append(item)
        self._queue = later
        return batch

    async def _run(self, batch: list[tuple[Row, asyncio.Future[bool]]]) -> None:
        try:
            if len(batch) == 1:
                await self._settle_one(*batch[0])
            elif batch:
                try:
                    written = await self._many([row for row, _ in batch])
                except ServiceUnavailableError as exc:
                    for _, future in batch:
                        _fail(future, exc)
                except Exception:
                    # Not the server: some row was refused. Row by row, so only its own caller hears of it.
                    for row, future in batch:
                        await self._settle_one(row, future)
                else:
                    for row, future in batch:
                        if not future.done():
                            future.set_result(row[0] in written)
        except BaseException as exc:  # cancelled at shutdown: no caller is left waiting forever
            for _, future in batch:
                _fail(future, exc if isinstance(exc, Exception) else ServiceUnavailableError("the store closed"))
            raise
        finally:
            self._busy -= 1
            self._pump()

    async def _settle_one(self, row: Row, future: asyncio.Future[bool]) -> None:
        try:
            result = await self._one(row)
        except Exception as exc:
            _fail(future, exc)
        else:
            if not future.done():
                future.set_result(result)


def _fail(future: asyncio.Future[bool], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
        future.exception()  # a caller that went away must not leave "exception never retrieved" behind
