"""How long the event loop stalls while a block runs: ``async with loop_stalls() as lags`` probes the loop every
``period`` seconds and records each probe's lateness (0 when the loop is free), so a test can bound the worst."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def loop_stalls(period: float = 0.002) -> AsyncIterator[list[float]]:
    lags: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(period)
            lags.append(time.perf_counter() - t - period)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0)  # the probe is running before the block starts
    try:
        yield lags
    finally:
        stop.set()
        await prober
