"""ListTasks on PostgreSQL at scale: fill a fresh namespace with 1,000,000 tasks, time the first filtered page.

    python3 bench/pg_list.py [--url postgresql://postgres@127.0.0.1:5432/test] [--rows 1000000] [--keep]

The tasks are spread like a multi-tenant deployment: one heavy owner with 10% of all tasks (1,000 contexts,
mostly COMPLETED), the rest over owners of 100 tasks each. Rows go in with COPY (binary, in batches), then
``VACUUM ANALYZE`` (what autovacuum does after a bulk load: statistics, and the visibility map that makes the
COUNT of a list an index-only scan). Each query runs through ``PostgresTaskStore.list`` (the count and the page in
one statement); the first run is reported separately from the median of the next ones, and the EXPLAIN ANALYZE of
the context-filtered query shows the index. The namespace is dropped at the end (unless ``--keep``). Target: the
first filtered page under 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from relaykit._enums import Role, TaskState
from relaykit._types import Message, Part, Task, TaskStatus
from relaykit.backends import TaskQuery
from relaykit.backends._paging import decode_token, timestamp_us
from relaykit.backends.postgres import PostgresTaskStore, drop_namespace

HEAVY = "heavy"
HEAVY_SHARE = 10  # percent of all tasks
CONTEXTS = 1000  # contexts of the heavy owner
PER_OWNER = 100  # tasks of every other owner
BATCH = 50_000
START = datetime(2026, 1, 1, tzinfo=UTC)
# 1 in 20 WORKING, 3 in 100 FAILED, 2 in 100 INPUT_REQUIRED, the rest COMPLETED.
_STATES = (
    [TaskState.WORKING.value] * 5
    + [TaskState.FAILED.value] * 3
    + [TaskState.INPUT_REQUIRED.value] * 2
    + [TaskState.COMPLETED.value] * 90
)


def _template() -> bytes:
    # A realistic body (a user message and a status), encoded once; ids are spliced in per row.
    task = Task(
        id="@ID@",
        context_id="@CTX@",
        status=TaskStatus(state=TaskState.COMPLETED, timestamp=START),
        history=[Message(message_id="m-@ID@", role=Role.USER, parts=[Part(text="summarise the quarterly report")])],
    )
    return task.to_json()


def _rows(rows: int, batch_start: int, batch_end: int) -> list[tuple[Any, ...]]:
    heavy = rows * HEAVY_SHARE // 100
    step_us = (30 * 86_400 * 1_000_000) // max(rows, 1)  # spread over 30 days
    base = timestamp_us(START)
    body = _template()
    out: list[tuple[Any, ...]] = []
    for i in range(batch_start, batch_end):
        task_id = f"{i:08x}-{(i * 2654435761) & 0xFFFFFFFF:08x}"
        if i % 10 == 0 and i // 10 < heavy:
            owner = HEAVY
            context = f"ctx-{(i // 10) % CONTEXTS}"
        else:
            owner = f"user-{i // PER_OWNER}"
            context = f"ctx-{i % 7}"
        state = _STATES[(i * 7919) % 100]
        stamp = base + i * step_us
        row_body = body.replace(b"@ID@", task_id.encode()).replace(b"@CTX@", context.encode())
        out.append((task_id, "", owner, context, state, stamp, 1, 0, row_body))
    return out


async def fill(url: str, namespace: str, rows: int) -> float:
    """COPY ``rows`` tasks into ``namespace``; returns seconds."""
    started = time.perf_counter()
    conn = await asyncpg.connect(url)
    try:
        for start in range(0, rows, BATCH):
            records = _rows(rows, start, min(start + BATCH, rows))
            await conn.copy_records_to_table(
                f"{namespace}_tasks",
                records=records,
                columns=["id", "tenant", "owner", "context_id", "state", "status_ts", "version", "event_seq", "body"],
            )
        await conn.execute(f"VACUUM ANALYZE {namespace}_tasks")
    finally:
        await conn.close()
    return time.perf_counter() - started


async def timed(store: PostgresTaskStore, query: TaskQuery, runs: int) -> tuple[float, float, int, int]:
    """(first ms, median ms of the next runs, tasks on the page, total size)."""
    times: list[float] = []
    page = None
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        page = await store.list(query)
        times.append((time.perf_counter() - t0) * 1000)
    assert page is not None
    return times[0], statistics.median(times[1:]), len(page.tasks), page.total_size


async def explain(url: str, store: PostgresTaskStore, query: TaskQuery) -> str:
    sql, params = store.list_statement(query, decode_token(query.page_token) if query.page_token else None)
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, *params)
    finally:
        await conn.close()
    return "\n".join(str(row[0]) for row in rows)


async def scenario(url: str, rows: int, keep: bool, runs: int) -> int:
    namespace = f"rk_bench_{secrets.token_hex(4)}"
    store = PostgresTaskStore(url, namespace=namespace, exclusive=False)
    await store.start()
    try:
        print(f"namespace {namespace}: filling {rows:,} tasks (COPY, batches of {BATCH:,}) …")
        seconds = await fill(url, namespace, rows)
        print(f"  {rows:,} tasks in {seconds:.1f} s (incl. VACUUM ANALYZE)")
        heavy_rows = rows * HEAVY_SHARE // 100
        queries = {
            "heavy owner, context filter": TaskQuery(owner=HEAVY, context_id="ctx-42", page_size=50),
            "heavy owner, state=WORKING": TaskQuery(owner=HEAVY, state=TaskState.WORKING, page_size=50),
            "heavy owner, state=COMPLETED": TaskQuery(owner=HEAVY, state=TaskState.COMPLETED, page_size=50),
            f"heavy owner ({heavy_rows:,} tasks), no filter": TaskQuery(owner=HEAVY, page_size=50),
            "heavy owner, statusTimestampAfter last day": TaskQuery(
                owner=HEAVY, status_after=START + timedelta(days=29), page_size=50
            ),
            "ordinary owner (100 tasks), state=COMPLETED": TaskQuery(owner="user-4242", state=TaskState.COMPLETED),
        }
        print(f"\nfirst ListTasks page (50 tasks), through PostgresTaskStore.list; median of {runs} more runs")
        print(f"  {'query':<48} {'first':>9} {'median':>9} {'page':>5} {'total':>9}")
        results: dict[str, tuple[float, float, int, int]] = {}
        for name, query in queries.items():
            results[name] = await timed(store, query, runs)
            first, median, size, total = results[name]
            print(f"  {name:<48} {first:7.2f}ms {median:7.2f}ms {size:5d} {total:9,}")
        # The second page of the heavy owner's context list (keyset cursor: one index seek).
        first_page = await store.list(TaskQuery(owner=HEAVY, context_id="ctx-42", page_size=50))
        second = TaskQuery(owner=HEAVY, context_id="ctx-42", page_size=50, page_token=first_page.next_page_token)
        first, median, size, total = await timed(store, second, runs)
        print(f"  {'heavy owner, context filter, page 2':<48} {first:7.2f}ms {median:7.2f}ms {size:5d} {total:9,}")

        main = next(iter(queries))
        print(f"\nEXPLAIN ANALYZE — {main}:")
        print(await explain(url, store, queries[main]))
        print("\nEXPLAIN ANALYZE — heavy owner, state=WORKING:")
        print(await explain(url, store, queries["heavy owner, state=WORKING"]))
        verdict = results[main][0] < 20.0
        print(f"\nfirst filtered page: {results[main][0]:.2f} ms (target < 20 ms: {'met' if verdict else 'MISSED'})")
        return 0 if verdict else 1
    finally:
        await store.close()
        if keep:
            print(f"kept namespace {namespace}")
        else:
            dropped = await drop_namespace(url, namespace)
            print(f"dropped {', '.join(dropped)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--url", default=os.environ.get("RELAYKIT_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20, help="timed runs after the first")
    parser.add_argument("--keep", action="store_true", help="leave the namespace in place")
    args = parser.parse_args()
    return asyncio.run(scenario(args.url, args.rows, args.keep, args.runs))


if __name__ == "__main__":
    sys.exit(main())
