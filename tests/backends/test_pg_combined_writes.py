"""Combined task writes in the PostgreSQL store (``backends/postgres/_batch.py``): writes that wait behind others go
to the server as one statement, and each caller still learns its own row's outcome.

The first half drives ``WriteCombiner`` with scripted writers (when a statement starts and ends is the test's);
the second half runs the store against the real server with concurrent writers.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

if os.environ.get("CI", "").strip().lower() not in ("1", "true", "yes"):
    pytest.importorskip("asyncpg", reason="asyncpg is not installed (pip install 'relaykit[postgres]')")

import asyncpg

from relaykit._enums import TaskState
from relaykit._types import Artifact, Task, TaskStatus
from relaykit.backends import ConflictError, TaskRecord
from relaykit.backends.postgres import PostgresTaskStore
from relaykit.backends.postgres._batch import LANES, MAX_ROWS, Row, WriteCombiner
from relaykit.backends.postgres._tasks import LEAN
from relaykit.errors import ServiceUnavailableError

WAIT = 10.0  # seconds: bound on every wait for a scripted statement


class Scripted:
    """Writers whose statements end when the test says (``finish``): every call is recorded."""

    def __init__(self, *, refuse: frozenset[str] = frozenset(), fail_many: BaseException | None = None) -> None:
        self.ones: list[Row] = []
        self.manys: list[list[Row]] = []
        self.gates: list[asyncio.Event] = []
        self.refuse = refuse  # ids the database "does not write" (a conflict)
        self.fail_many = fail_many
        self.started = asyncio.Condition()

    async def _gate(self) -> None:
        gate = asyncio.Event()
        self.gates.append(gate)
        async with self.started:
            self.started.notify_all()
        await asyncio.wait_for(gate.wait(), WAIT)

    async def until_started(self, count: int) -> None:
        """Until ``count`` statements (single or combined) have started."""
        async with asyncio.timeout(WAIT), self.started:
            await self.started.wait_for(lambda: len(self.gates) >= count)

    async def one(self, row: Row) -> bool:
        self.ones.append(row)
        await self._gate()
        return row[0] not in self.refuse

    async def many(self, rows: list[Row]) -> set[str]:
        self.manys.append(rows)
        await self._gate()
        if self.fail_many is not None:
            raise self.fail_many
        return {row[0] for row in rows if row[0] not in self.refuse}

    def finish_all(self) -> None:
        for gate in self.gates:
            gate.set()


async def _run_script(script: Scripted, ids: list[str]) -> tuple[WriteCombiner, list[Any]]:
    combiner = WriteCombiner(script.one, script.many)
    writes = [asyncio.create_task(combiner.write((task_id, "body"))) for task_id in ids]
    # The first goes out alone at once; the others, issued in the same pass, go together on the second lane.
    await script.until_started(min(LANES, len(ids)))
    async with asyncio.timeout(WAIT):  # each pass lets the statements started so far end
        while not all(write.done() for write in writes):
            script.finish_all()
            await asyncio.sleep(0)
    return combiner, await asyncio.gather(*writes, return_exceptions=True)


async def test_writes_issued_behind_one_in_flight_go_out_together_and_each_hears_its_own_outcome() -> None:
    script = Scripted(refuse=frozenset({"t5"}))
    ids = [f"t{i}" for i in range(10)]
    _, results = await _run_script(script, ids)
    assert results == [task_id != "t5" for task_id in ids]
    assert [row[0] for row in script.ones] == ids[:1]
    # Everything issued in that pass behind the first write left as one statement, on the lane still free.
    assert [[row[0] for row in rows] for rows in script.manys] == [ids[1:]]


async def test_a_write_behind_one_in_flight_takes_the_free_lane_without_waiting_for_it() -> None:
    # Held to the end of its pass (so that the writes of the pass go with it), not until the first statement ends.
    script = Scripted()
    combiner = WriteCombiner(script.one, script.many)
    first = asyncio.create_task(combiner.write(("a", "body")))
    await script.until_started(1)
    second = asyncio.create_task(combiner.write(("b", "body")))
    await script.until_started(2)  # while "a" is still in flight
    assert not first.done()
    assert [row[0] for row in script.ones] == ["a", "b"]
    script.finish_all()
    assert await asyncio.wait_for(asyncio.gather(first, second), WAIT) == [True, True]


async def test_one_writer_at_a_time_never_waits_or_combines() -> None:
    script = Scripted()
    combiner = WriteCombiner(script.one, script.many)
    for i in range(5):
        write = asyncio.create_task(combiner.write((f"t{i}", "body")))
        await script.until_started(i + 1)
        script.finish_all()
        assert await write is True
    assert len(script.ones) == 5
    assert script.manys == []


async def test_a_task_written_twice_in_one_wait_goes_in_two_statements() -> None:
    script = Scripted()
    ids = ["a", "b", "x", "y", "x", "z"]
    _, results = await _run_script(script, ids)
    assert results == [True] * len(ids)
    statements = [[row[0] for row in rows] for rows in script.manys] + [[row[0]] for row in script.ones[1:]]
    assert statements == [["b", "x", "y", "z"], ["x"]]


async def test_a_combined_statement_holds_at_most_max_rows() -> None:
    script = Scripted()
    ids = [f"t{i}" for i in range(1 + MAX_ROWS + 5)]
    _, results = await _run_script(script, ids)
    assert results == [True] * len(ids)
    assert sorted(len(rows) for rows in script.manys) == [5, MAX_ROWS]


async def test_a_refused_combined_statement_is_retried_row_by_row() -> None:
    # Not an outage (say, a row the server rejects): only that row's caller fails; the others are written alone.
    script = Scripted(refuse=frozenset({"t4"}), fail_many=ValueError("bad row"))
    ids = [f"t{i}" for i in range(6)]
    _, results = await _run_script(script, ids)
    assert results == [task_id != "t4" for task_id in ids]
    assert [row[0] for row in script.ones] == ids  # the first alone, then the batch's rows one by one


async def test_a_lost_server_fails_every_write_of_the_statement() -> None:
    lost = ServiceUnavailableError("the PostgreSQL store is unreachable")
    script = Scripted(fail_many=lost)
    ids = [f"t{i}" for i in range(6)]
    _, results = await _run_script(script, ids)
    assert results[:1] == [True]
    assert all(result is lost for result in results[1:])
    assert len(script.ones) == 1  # not retried: it may have committed; the callers' next writes conflict


async def test_a_caller_that_gave_up_before_its_turn_is_not_written() -> None:
    script = Scripted()
    combiner = WriteCombiner(script.one, script.many)
    first = [asyncio.create_task(combiner.write((f"t{i}", "body"))) for i in range(LANES)]
    await script.until_started(LANES)
    waiting = [asyncio.create_task(combiner.write((f"w{i}", "body"))) for i in range(3)]
    await asyncio.sleep(0)
    waiting[1].cancel()
    async with asyncio.timeout(WAIT):
        while not all(write.done() for write in first + waiting):
            script.finish_all()
            await asyncio.sleep(0)
    assert [row[0] for rows in script.manys for row in rows] == ["w0", "w2"]
    assert waiting[1].cancelled()


# --- the store on the real server --------------------------------------------------------------------------------

pg = pytest.mark.postgres


def _task(task_id: str, state: TaskState = TaskState.WORKING) -> Task:
    status = TaskStatus(state=state, timestamp=datetime(2026, 3, 1, tzinfo=UTC))
    return Task(id=task_id, context_id="ctx", status=status)


@asynccontextmanager
async def _store(url: str, namespace: str) -> AsyncIterator[PostgresTaskStore]:
    store = PostgresTaskStore(url, namespace=namespace, exclusive=False)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def task_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement on the tasks table, as the driver sends it."""
    seen: list[str] = []
    for name in ("execute", "fetch"):
        original = getattr(asyncpg.connection.Connection, name)

        def counted(original: Any) -> Any:
            async def call(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
                if "_tasks" in query:
                    seen.append(query)
                return await original(self, query, *args, **kwargs)

            return call

        monkeypatch.setattr(asyncpg.connection.Connection, name, counted(original))
    return seen


@pg
async def test_many_concurrent_writes_take_few_statements_and_all_land(
    postgres_url: str, pg_namespace: str, task_statements: list[str]
) -> None:
    async with _store(postgres_url, pg_namespace) as store:
        records = [TaskRecord(_task(f"task-{i:02}")) for i in range(40)]
        task_statements.clear()  # the schema's, at start
        await asyncio.gather(*(store.save(record) for record in records))
        inserts = len(task_statements)
        for record in records:
            record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=datetime(2026, 3, 2, tzinfo=UTC))
        await asyncio.gather(*(store.save(record) for record in records))
        updates = len(task_statements) - inserts
        # 40 writes each way; alone they would be 40 statements each.
        assert inserts <= LANES + 4, task_statements
        assert updates <= LANES + 4, task_statements
        for record in records:
            assert record.version == 2
            stored = await store.get(record.task.id, owner="anonymous")
            assert stored is not None
            assert stored.version == 2
            assert stored.task.status.state is TaskState.COMPLETED


@pg
async def test_a_stale_write_among_combined_ones_conflicts_alone(postgres_url: str, pg_namespace: str) -> None:
    async with _store(postgres_url, pg_namespace) as store:
        records = [TaskRecord(_task(f"task-{i}")) for i in range(12)]
        await asyncio.gather(*(store.save(record) for record in records))
        stale = records[7]
        stale.version = 5  # another writer's version: this update must match no row
        for record in records:
            record.task.metadata = {"step": 2}
        results = await asyncio.gather(*(store.save(record) for record in records), return_exceptions=True)
        assert [isinstance(result, ConflictError) for result in results] == [i == 7 for i in range(12)]
        stored = await store.get("task-7", owner="anonymous")
        assert stored is not None
        assert stored.version == 1
        assert stored.task.metadata is None
        for record in records:
            if record is not stale:
                assert record.version == 2
                written = await store.get(record.task.id, owner="anonymous")
                assert written is not None
                assert (written.version, written.task.metadata) == (2, {"step": 2})


@pg
async def test_the_same_new_task_twice_among_combined_writes_is_stored_once(
    postgres_url: str, pg_namespace: str
) -> None:
    async with _store(postgres_url, pg_namespace) as store:
        ids = [f"task-{i}" for i in range(6)] + ["task-3", "task-9"]
        results = await asyncio.gather(*(store.save(TaskRecord(_task(i))) for i in ids), return_exceptions=True)
        assert sum(isinstance(result, ConflictError) for result in results) == 1
        assert [results[i] for i in (3, 6)].count(None) == 1


@pg
async def test_combined_claimed_writes_set_the_claimant(postgres_url: str, pg_namespace: str) -> None:
    async with _store(postgres_url, pg_namespace) as store:
        records = [TaskRecord(_task(f"task-{i}", TaskState.SUBMITTED)) for i in range(20)]
        await asyncio.gather(*(store.insert_claimed(record, "worker-a") for record in records))
        assert {await store.claimant(r.task.id) for r in records} == {"worker-a"}
        for record in records:
            record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=datetime(2026, 3, 2, tzinfo=UTC))
        await asyncio.gather(*(store.save_claimed(record, None) for record in records))
        assert {await store.claimant(r.task.id) for r in records} == {None}
        for record in records:
            stored = await store.get(record.task.id, owner="anonymous")
            assert stored is not None
            assert (stored.version, stored.task.status.state) == (2, TaskState.COMPLETED)


@pg
async def test_a_large_task_among_combined_writes_gets_its_lean_copy(postgres_url: str, pg_namespace: str) -> None:
    # ListTasks reads a large task's ``lean`` column (its body without artifacts): a combined write keeps it.
    async with _store(postgres_url, pg_namespace) as store:
        records = [TaskRecord(_task(f"task-{i}")) for i in range(6)]
        await asyncio.gather(*(store.save(record) for record in records))
        records[4].task.artifacts = [Artifact.text("x" * (LEAN + 1), artifact_id="big")]
        await asyncio.gather(*(store.save(record) for record in records))
        conn = await asyncpg.connect(postgres_url)
        try:
            rows = await conn.fetch(f"SELECT id, lean FROM {pg_namespace}_tasks ORDER BY id")
        finally:
            await conn.close()
        assert [row["id"] for row in rows if row["lean"] is not None] == ["task-4"]
        lean = json.loads(next(row["lean"] for row in rows if row["id"] == "task-4"))
        assert lean["id"] == "task-4"
        assert "artifacts" not in lean
