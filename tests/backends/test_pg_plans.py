"""The PostgreSQL task store finds one task by its primary key, whatever plan its prepared statements were given.

asyncpg prepares every statement, and PostgreSQL may keep a prepared statement's *generic* plan, made from the
statistics of its first executions: on a new namespace, an empty table. Such a plan was seen scanning every task of
an owner through a list index to find one task (``tenant = $2 AND owner = $3`` match that index's leading columns),
and a combined write joining its rows by a scan of the whole table, so each write cost more as tasks accumulated,
until the next ANALYZE (never, with autovacuum off). Here the statements that find a task by id are prepared and
planned generically on the empty table, the table then gets thousands of tasks, and each statement must still read
only a handful of buffers (counted by EXPLAIN ANALYZE, not timed) and use no index but the primary key: the one-row
statements by their shape, the combined writes once the store has refreshed the statistics (``_grown``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

if os.environ.get("CI", "").strip().lower() not in ("1", "true", "yes"):
    pytest.importorskip("asyncpg", reason="asyncpg is not installed (pip install 'relaykit[postgres]')")

import asyncpg

from relaykit._enums import TaskState
from relaykit._types import Task, TaskStatus
from relaykit.backends import TaskRecord
from relaykit.backends.postgres import PostgresTaskStore
from relaykit.backends.postgres._tasks import ANALYZE_FIRST

pytestmark = pytest.mark.postgres

TASKS = 20000
WAIT = 30.0
BUFFERS = 40  # a B-tree descent, the heap page, and a write's index entries; the scan seen read hundreds


@pytest.fixture
async def conn(postgres_url: str, pg_namespace: str) -> AsyncIterator[tuple[asyncpg.Connection, PostgresTaskStore]]:
    store = PostgresTaskStore(postgres_url, namespace=pg_namespace, exclusive=False)
    await store.start()
    connection = await asyncpg.connect(postgres_url)
    try:
        # The worst plan a prepared statement can be given: generic, from the empty table's statistics.
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        yield connection, store
    finally:
        await connection.close()
        await store.close()


def make_task(task_id: str) -> Task:
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=TaskState.WORKING))


def _single(store: PostgresTaskStore) -> dict[str, tuple[str, str]]:
    """name: (SQL, EXECUTE arguments) of every one-row statement that finds a task by id (``t-77``, anonymous)."""
    row = "'t-77', '', 'anonymous', 'c-77', 'TASK_STATE_WORKING', 1, 2, 0, '\\x7b7d'::bytea"
    return {
        "get": (store._sql_get, "'t-77', '', 'anonymous'"),
        "update": (store._sql_update, f"{row}, 1"),
        "update_claimed": (store._sql_update_claimed, f"{row}, 1, 'w'"),
        "delete": (store._sql_delete, "'t-77', '', 'anonymous'"),
        "claim": (store._sql_claim, "'t-77', '', 'anonymous', 'w', NULL::bytea"),
    }


def _combined(store: PostgresTaskStore) -> dict[str, tuple[str, str]]:
    """The combined writes (``_batch``), for the same task."""
    arrays = (
        "ARRAY['t-77'], ARRAY[''], ARRAY['anonymous'], ARRAY['c-77'], ARRAY['TASK_STATE_WORKING'], ARRAY[1::bigint], "
        "ARRAY[2::bigint], ARRAY[0::bigint], ARRAY['\\x7b7d'::bytea], ARRAY[1::bigint]"
    )
    return {
        "updates": (store._sql_updates, arrays),
        "updates_claimed": (store._sql_updates_claimed, f"{arrays}, ARRAY['w']"),
    }


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


async def _prepare_on_the_empty_table(connection: asyncpg.Connection, statements: dict[str, tuple[str, str]]) -> None:
    for name, (sql, args) in statements.items():
        await connection.execute(f"PREPARE {name} AS {sql}")
        await connection.execute(f"EXECUTE {name}({args})")  # planned now


async def _fill(connection: asyncpg.Connection, table: str) -> None:
    await connection.execute(
        f"INSERT INTO {table} (id, tenant, owner, context_id, state, status_ts, version, event_seq, body) "
        "SELECT 't-' || n, '', 'anonymous', 'c-' || n, 'TASK_STATE_WORKING', n, 1, 0, '\\x7b7d'::bytea "
        f"FROM generate_series(1, {TASKS}) AS n"
    )


async def _costs(
    connection: asyncpg.Connection, table: str, statements: dict[str, tuple[str, str]]
) -> dict[str, tuple[int, set[str]]]:
    """name: (shared buffers the statement touched, the table's indexes it used), each run and rolled back."""
    costs: dict[str, tuple[int, set[str]]] = {}
    for name, (_sql, args) in statements.items():
        transaction = connection.transaction()
        await transaction.start()
        try:
            explained = await connection.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}({args})")
        finally:
            await transaction.rollback()  # what the writes explained changed is not kept
        nodes = _nodes(json.loads(explained)[0]["Plan"])
        buffers = max(node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0) for node in nodes)
        indexes = {node["Index Name"] for node in nodes if "Index Name" in node and table in node["Index Name"]}
        costs[name] = (buffers, indexes)
    return costs


def _assert_found_by_primary_key(costs: dict[str, tuple[int, set[str]]], table: str) -> None:
    for name, (buffers, indexes) in costs.items():
        assert indexes <= {f"{table}_pk"}, (name, costs)
        assert buffers <= BUFFERS, (name, costs)


async def test_a_one_row_statement_finds_its_task_by_the_primary_key_whatever_its_plan(
    conn: tuple[asyncpg.Connection, PostgresTaskStore], pg_namespace: str
) -> None:
    connection, store = conn
    table = f"{pg_namespace}_tasks"
    statements = _single(store)
    await _prepare_on_the_empty_table(connection, statements)
    await _fill(connection, table)
    _assert_found_by_primary_key(await _costs(connection, table, statements), table)


async def test_combined_writes_are_planned_again_once_the_store_created_enough_tasks(
    conn: tuple[asyncpg.Connection, PostgresTaskStore], pg_namespace: str
) -> None:
    """A join is planned from statistics: those of the empty table make a combined write scan the whole table. The
    store refreshes them once it created ``ANALYZE_FIRST`` tasks, and the plans made from them are made again."""
    connection, store = conn
    table = f"{pg_namespace}_tasks"
    statements = _combined(store)
    await _prepare_on_the_empty_table(connection, statements)
    await _fill(connection, table)
    await asyncio.gather(*(store.save(TaskRecord(make_task(f"new-{n}"))) for n in range(ANALYZE_FIRST)))
    analyzing = store._analyzing  # the refresh the last of them started, in the background
    if analyzing is not None:
        await asyncio.wait_for(analyzing, WAIT)
    _assert_found_by_primary_key(await _costs(connection, table, statements), table)
