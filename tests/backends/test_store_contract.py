"""The one contract every TaskStore / PushConfigStore keeps, run against each implementation.

A new backend adds one entry to ``_FACTORIES`` (a function from the test's tmp_path to a fresh, unstarted pair of
stores); the fixture starts and closes it, and every test below runs against it unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from relaykit._enums import Role, TaskState
from relaykit._errors import InternalError
from relaykit._types import AuthenticationInfo, Message, Part, Task, TaskPushNotificationConfig, TaskStatus
from relaykit.backends import (
    ConflictError,
    MemoryPushConfigStore,
    MemoryTaskStore,
    PageTokenError,
    PushConfigStore,
    TaskQuery,
    TaskRecord,
    TaskStore,
)
from relaykit.backends._base import DeliveryOutcome, OutboxChanges, OutboxEntry, PushOutbox, delete_task_configs
from relaykit.backends._paging import encode_token, timestamp_us
from relaykit.backends.memory import MemoryPushOutbox
from relaykit.backends.sqlite import SQLitePushConfigStore, SQLitePushOutbox, SQLiteTaskStore


@dataclass
class Stores:
    tasks: TaskStore
    push: PushConfigStore


def _memory(tmp_path: Path) -> Stores:
    return Stores(MemoryTaskStore(), MemoryPushConfigStore())


def _sqlite(tmp_path: Path) -> Stores:
    tasks = SQLiteTaskStore(str(tmp_path / "t.db"))
    return Stores(tasks, SQLitePushConfigStore(tasks))


_FACTORIES: dict[str, Callable[[Path], Stores]] = {"memory": _memory, "sqlite": _sqlite}


def _postgres(request: pytest.FixtureRequest) -> Stores:
    # tests/conftest.py: skips (fails under CI=true) when the server is down; a fresh namespace per test, dropped after.
    from relaykit.backends.postgres import PostgresPushConfigStore, PostgresTaskStore

    url, namespace = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_namespace")
    tasks = PostgresTaskStore(url, namespace=namespace)
    return Stores(tasks, PostgresPushConfigStore(tasks))


@pytest.fixture(params=[*sorted(_FACTORIES), pytest.param("postgres", marks=pytest.mark.postgres)])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    pair = _postgres(request) if request.param == "postgres" else _FACTORIES[request.param](tmp_path)
    await pair.tasks.start()
    await pair.push.start()
    try:
        yield pair
    finally:
        await pair.push.close()
        await pair.tasks.close()


@pytest.fixture
def store(stores: Stores) -> TaskStore:
    return stores.tasks


@pytest.fixture
def push(stores: Stores) -> PushConfigStore:
    return stores.push


# Whole milliseconds: the wire (and so a stored body) keeps millisecond precision.
BASE = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return BASE + timedelta(milliseconds=round(seconds * 1000))


def make_task(
    task_id: str,
    *,
    ts: datetime | None = BASE,
    state: TaskState = TaskState.WORKING,
    context_id: str = "ctx",
    text: str = "",
) -> Task:
    history = [Message(message_id=f"m-{task_id}", role=Role.USER, parts=[Part(text=text or task_id)])]
    return Task(id=task_id, context_id=context_id, status=TaskStatus(state=state, timestamp=ts), history=history)


async def insert(store: TaskStore, task: Task, *, tenant: str = "", owner: str = "anonymous") -> TaskRecord:
    record = TaskRecord(task, tenant, owner)
    await store.save(record)
    return record


async def list_ids(store: TaskStore, **query: Any) -> list[str]:
    page = await store.list(TaskQuery(**query))
    return [task.id for task in page.tasks]


# --- get / save ---------------------------------------------------------------------------------------------


async def test_get_missing_returns_none(store: TaskStore) -> None:
    assert await store.get("nope") is None


async def test_get_out_of_scope_returns_none(store: TaskStore) -> None:
    await insert(store, make_task("t1"), tenant="acme", owner="alice")
    assert await store.get("t1", tenant="other", owner="alice") is None
    assert await store.get("t1", tenant="acme", owner="bob") is None
    assert await store.get("t1") is None
    record = await store.get("t1", tenant="acme", owner="alice")
    assert record is not None
    assert (record.tenant, record.owner) == ("acme", "alice")


async def test_insert_then_get_round_trips(store: TaskStore) -> None:
    task = make_task("t1", text="hello")
    record = await insert(store, task)
    assert record.version == 1
    got = await store.get("t1")
    assert got is not None
    assert got.task == task
    assert got.version == 1
    assert (got.tenant, got.owner) == ("", "anonymous")


async def test_update_bumps_version(store: TaskStore) -> None:
    await insert(store, make_task("t1"))
    record = await store.get("t1")
    assert record is not None
    record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=at(1))
    await store.save(record)
    assert record.version == 2
    got = await store.get("t1")
    assert got is not None
    assert got.version == 2
    assert got.task.status.state is TaskState.COMPLETED


async def test_get_hands_back_the_bytes_it_read_and_never_writes_them(store: TaskStore) -> None:
    # The engine decodes an agent's copy of a task from them (server._runner); a caller that changes the task and
    # saves it stores its change, not those bytes.
    await insert(store, make_task("t1", text="original"))
    record = await store.get("t1")
    assert record is not None
    assert record.read is not None
    assert Task.from_json(record.read) == record.task
    record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=at(1))
    await store.save(record)
    got = await store.get("t1")
    assert got is not None
    assert got.task.status.state is TaskState.COMPLETED
    assert got.read is not None
    assert Task.from_json(got.read) == got.task


async def test_the_stored_copy_is_not_the_callers_object(store: TaskStore) -> None:
    task = make_task("t1", text="original")
    await insert(store, task)
    task.history[0].parts[0].text = "mutated after save"
    got = await store.get("t1")
    assert got is not None
    assert got.task.history[0].parts[0].text == "original"


async def test_stale_write_conflicts_and_changes_nothing(store: TaskStore) -> None:
    await insert(store, make_task("t1"))
    first = await store.get("t1")
    second = await store.get("t1")
    assert first is not None
    assert second is not None
    first.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=at(1))
    await store.save(first)

    second.task.status = TaskStatus(state=TaskState.FAILED, timestamp=at(2))
    with pytest.raises(ConflictError):
        await store.save(second)
    assert second.version == 1
    got = await store.get("t1")
    assert got is not None
    assert got.version == 2
    assert got.task.status.state is TaskState.COMPLETED
    assert got.task == first.task


async def test_duplicate_insert_conflicts(store: TaskStore) -> None:
    await insert(store, make_task("t1", text="first"))
    duplicate = TaskRecord(make_task("t1", text="second"))
    with pytest.raises(ConflictError):
        await store.save(duplicate)
    assert duplicate.version == 0
    got = await store.get("t1")
    assert got is not None
    assert got.task.history[0].parts[0].text == "first"


async def test_duplicate_insert_in_another_scope_conflicts(store: TaskStore) -> None:
    # Task ids are global: another tenant cannot take over (or shadow) an existing id.
    await insert(store, make_task("t1"), tenant="acme")
    with pytest.raises(ConflictError):
        await insert(store, make_task("t1"), tenant="other")
    assert await store.get("t1", tenant="other") is None


async def test_update_of_missing_task_conflicts(store: TaskStore) -> None:
    with pytest.raises(ConflictError):
        await store.save(TaskRecord(make_task("ghost"), version=3))
    assert await store.get("ghost") is None


async def test_update_cannot_move_a_task_to_another_scope(store: TaskStore) -> None:
    await insert(store, make_task("t1"), tenant="acme", owner="alice")
    record = await store.get("t1", tenant="acme", owner="alice")
    assert record is not None
    record.owner = "mallory"
    with pytest.raises(ConflictError):
        await store.save(record)
    assert await store.get("t1", tenant="acme", owner="mallory") is None
    assert await store.get("t1", tenant="acme", owner="alice") is not None


# --- list ---------------------------------------------------------------------------------------------------


async def test_list_orders_by_status_timestamp_desc_then_id_desc(store: TaskStore) -> None:
    await insert(store, make_task("a", ts=at(2)))
    await insert(store, make_task("b", ts=at(1)))
    await insert(store, make_task("c", ts=at(2)))
    await insert(store, make_task("d", ts=at(3)))
    await insert(store, make_task("e", ts=at(1)))
    assert await list_ids(store) == ["d", "c", "a", "e", "b"]


async def test_list_follows_updates_of_the_status_timestamp(store: TaskStore) -> None:
    await insert(store, make_task("a", ts=at(1)))
    await insert(store, make_task("b", ts=at(2)))
    record = await store.get("a")
    assert record is not None
    record.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=at(3))
    await store.save(record)
    assert await list_ids(store) == ["a", "b"]
    assert await list_ids(store, state=TaskState.WORKING) == ["b"]


async def test_list_filters_by_context_id(store: TaskStore) -> None:
    await insert(store, make_task("a", context_id="c1", ts=at(1)))
    await insert(store, make_task("b", context_id="c2", ts=at(2)))
    await insert(store, make_task("c", context_id="c1", ts=at(3)))
    assert await list_ids(store, context_id="c1") == ["c", "a"]
    assert await list_ids(store, context_id="c2") == ["b"]
    assert await list_ids(store, context_id="none") == []


async def test_list_filters_by_state(store: TaskStore) -> None:
    await insert(store, make_task("a", state=TaskState.WORKING, ts=at(1)))
    await insert(store, make_task("b", state=TaskState.COMPLETED, ts=at(2)))
    await insert(store, make_task("c", state=TaskState.INPUT_REQUIRED, ts=at(3)))
    await insert(store, make_task("d", state=TaskState.COMPLETED, ts=at(4)))
    assert await list_ids(store, state=TaskState.COMPLETED) == ["d", "b"]
    assert await list_ids(store, state=TaskState.INPUT_REQUIRED) == ["c"]
    assert await list_ids(store, state=TaskState.CANCELED) == []


async def test_list_status_after_is_inclusive(store: TaskStore) -> None:
    await insert(store, make_task("a", ts=at(1)))
    await insert(store, make_task("b", ts=at(2)))
    await insert(store, make_task("c", ts=at(3)))
    assert await list_ids(store, status_after=at(2)) == ["c", "b"]
    assert await list_ids(store, status_after=at(2.001)) == ["c"]
    assert await list_ids(store, status_after=at(4)) == []


async def test_list_combines_filters(store: TaskStore) -> None:
    await insert(store, make_task("a", context_id="c1", state=TaskState.COMPLETED, ts=at(1)))
    await insert(store, make_task("b", context_id="c1", state=TaskState.COMPLETED, ts=at(2)))
    await insert(store, make_task("c", context_id="c2", state=TaskState.COMPLETED, ts=at(3)))
    await insert(store, make_task("d", context_id="c1", state=TaskState.WORKING, ts=at(4)))
    page = await store.list(TaskQuery(context_id="c1", state=TaskState.COMPLETED, status_after=at(1.5)))
    assert [t.id for t in page.tasks] == ["b"]
    assert page.total_size == 1


async def test_list_is_scoped_by_tenant_and_owner(store: TaskStore) -> None:
    await insert(store, make_task("a1", ts=at(1)), tenant="acme", owner="alice")
    await insert(store, make_task("a2", ts=at(2)), tenant="acme", owner="alice")
    await insert(store, make_task("b1", ts=at(3)), tenant="acme", owner="bob")
    await insert(store, make_task("x1", ts=at(4)), tenant="other", owner="alice")
    await insert(store, make_task("n1", ts=at(5)))
    assert await list_ids(store, tenant="acme", owner="alice") == ["a2", "a1"]
    assert await list_ids(store, tenant="acme", owner="bob") == ["b1"]
    assert await list_ids(store, tenant="other", owner="alice") == ["x1"]
    assert await list_ids(store) == ["n1"]
    assert await list_ids(store, tenant="nobody", owner="alice") == []
    page = await store.list(TaskQuery(tenant="acme", owner="alice", page_size=1))
    assert page.total_size == 2


async def test_list_empty(store: TaskStore) -> None:
    page = await store.list(TaskQuery())
    assert page.tasks == []
    assert page.next_page_token == ""
    assert page.total_size == 0


@pytest.mark.parametrize("count", [6, 7])
@pytest.mark.parametrize("page_size", [1, 2, 3])
async def test_pagination_visits_every_task_once(store: TaskStore, count: int, page_size: int) -> None:
    # Ties on the timestamp (two tasks per instant) make the id tie-break part of the cursor.
    expected = []
    for i in range(count):
        task_id = f"t{i:02d}"
        await insert(store, make_task(task_id, ts=at(i // 2)))
        expected.append((i // 2, task_id))
    expected_ids = [task_id for _, task_id in sorted(expected, reverse=True)]
    # Tasks of another owner and another context must neither show up nor shift the pages.
    await insert(store, make_task("zz-other-owner", ts=at(1)), owner="someone-else")

    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await store.list(TaskQuery(page_size=page_size, page_token=token))
        pages += 1
        assert page.total_size == count
        assert 0 < len(page.tasks) <= page_size
        seen.extend(task.id for task in page.tasks)
        token = page.next_page_token
        if not token:
            break
        assert len(page.tasks) == page_size
        assert pages <= count, "pagination does not end"
    assert seen == expected_ids
    assert pages == -(-count // page_size)


async def test_pagination_with_filters_counts_only_matches(store: TaskStore) -> None:
    for i in range(5):
        await insert(store, make_task(f"in{i}", context_id="c1", ts=at(i)))
        await insert(store, make_task(f"out{i}", context_id="c2", ts=at(i)))
    first = await store.list(TaskQuery(context_id="c1", page_size=3))
    assert [t.id for t in first.tasks] == ["in4", "in3", "in2"]
    assert first.total_size == 5
    second = await store.list(TaskQuery(context_id="c1", page_size=3, page_token=first.next_page_token))
    assert [t.id for t in second.tasks] == ["in1", "in0"]
    assert second.total_size == 5
    assert second.next_page_token == ""


async def test_cursor_survives_deletion_of_its_task(store: TaskStore) -> None:
    for i in range(4):
        await insert(store, make_task(f"t{i}", ts=at(i)))
    first = await store.list(TaskQuery(page_size=2))
    assert [t.id for t in first.tasks] == ["t3", "t2"]
    assert await store.delete("t2")
    second = await store.list(TaskQuery(page_size=2, page_token=first.next_page_token))
    assert [t.id for t in second.tasks] == ["t1", "t0"]
    assert second.total_size == 3


async def test_page_token_is_the_shared_keyset_cursor(store: TaskStore) -> None:
    # A token names a position, not a stored row: any store reads another store's tokens the same way.
    for i in range(3):
        await insert(store, make_task(f"t{i}", ts=at(i)))
    token = encode_token((timestamp_us(at(1)), "t1"))
    assert await list_ids(store, page_token=token) == ["t0"]


@pytest.mark.parametrize(
    "token",
    [
        "!!!",
        "bm90YXRva2Vu",
        "YWJjOmRlZg",
        "%%%%",
        "ö",
        # Decodable but past what a store can seek: a timestamp outside BIGINT (SQLite OverflowError, asyncpg
        # DataError on main), a NUL in the id (PostgreSQL text cannot hold it).
        encode_token((2**63, "t1")),
        encode_token((-(2**63) - 1, "t1")),
        encode_token((10**30, "t1")),
        encode_token((5, "t\x001")),
    ],
)
async def test_malformed_page_token_raises_page_token_error(store: TaskStore, token: str) -> None:
    await insert(store, make_task("t1"))
    with pytest.raises(PageTokenError, match="page token"):
        await store.list(TaskQuery(page_token=token))


# --- delete -------------------------------------------------------------------------------------------------


async def test_delete(store: TaskStore) -> None:
    await insert(store, make_task("t1"), tenant="acme", owner="alice")
    assert not await store.delete("t1", tenant="acme", owner="bob")
    assert not await store.delete("t1", tenant="other", owner="alice")
    assert await store.get("t1", tenant="acme", owner="alice") is not None
    assert await store.delete("t1", tenant="acme", owner="alice")
    assert await store.get("t1", tenant="acme", owner="alice") is None
    assert not await store.delete("t1", tenant="acme", owner="alice")
    assert await list_ids(store, tenant="acme", owner="alice") == []


async def test_deleted_id_can_be_inserted_again(store: TaskStore) -> None:
    await insert(store, make_task("t1"))
    assert await store.delete("t1")
    record = await insert(store, make_task("t1", text="again"))
    assert record.version == 1


# --- fail_orphans / purge -----------------------------------------------------------------------------------


async def test_fail_orphans_only_touches_submitted_and_working(store: TaskStore) -> None:
    by_state = {state: f"t-{state.name.lower()}" for state in TaskState if state is not TaskState.UNSPECIFIED}
    for state, task_id in by_state.items():
        await insert(store, make_task(task_id, state=state, ts=at(1)), tenant="acme", owner="alice")
    before = {task_id: await store.get(task_id, tenant="acme", owner="alice") for task_id in by_state.values()}

    assert await store.fail_orphans("server restarted") == 2

    for state, task_id in by_state.items():
        record = await store.get(task_id, tenant="acme", owner="alice")
        old = before[task_id]
        assert record is not None
        assert old is not None
        if state in (TaskState.SUBMITTED, TaskState.WORKING):
            status = record.task.status
            assert status.state is TaskState.FAILED
            assert status.message is not None
            assert status.message.role is Role.AGENT
            assert [p.text for p in status.message.parts] == ["server restarted"]
            assert status.timestamp is not None
            assert status.timestamp > at(1)
            assert record.task.history == [*old.task.history, status.message]
            assert record.version == old.version + 1
        else:
            assert record.task == old.task
            assert record.version == old.version
    assert await store.fail_orphans("server restarted") == 0


def unreadable_body(task: Task) -> bytes:
    """``task``'s JSON with metadata nested past what the stores' reader (jiter: 200 levels) reads: what an earlier
    release stored from a large request body (its parser read ~990 levels)."""
    deep = b'{"a":' * 230 + b'"secret-content"' + b"}" * 230
    return task.to_json()[:-1] + b',"metadata":' + deep + b"}"


async def test_fail_orphans_fails_an_unreadable_task_without_its_content(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored body that no longer validates does not stop the others (nor the server's start): it becomes a
    FAILED task with its id and context only, readable again; the log names the task, never its content."""
    await insert(store, make_task("t-before", ts=at(1)))
    broken = make_task("t-broken", ts=at(2), context_id="ctx-b")
    await store.save(TaskRecord(broken, "acme", "alice", body=unreadable_body(broken)))
    await insert(store, make_task("t-after", ts=at(3)))
    with pytest.raises(InternalError, match="cannot read"):  # as unreadable as such rows are
        await store.get("t-broken", tenant="acme", owner="alice")

    failed: list[TaskRecord] = []
    assert await store.fail_orphans("server restarted", failed=failed) == 3

    assert sorted(record.task.id for record in failed) == ["t-after", "t-before", "t-broken"]
    for task_id in ("t-before", "t-after"):
        record = await store.get(task_id)
        assert record is not None
        assert record.task.status.state is TaskState.FAILED
        assert [m.parts[0].text for m in record.task.history] == [task_id, "server restarted"]
    record = await store.get("t-broken", tenant="acme", owner="alice")
    assert record is not None
    task = record.task
    assert (task.id, task.context_id, task.status.state) == ("t-broken", "ctx-b", TaskState.FAILED)
    assert task.metadata is None
    assert task.status.message is not None
    text = task.status.message.parts[0].text
    assert text == "server restarted; the task's stored content could not be read"
    assert task.history == [task.status.message]
    assert [t.id for t in (await store.list(TaskQuery(tenant="acme", owner="alice"))).tasks] == ["t-broken"]
    assert "t-broken" in caplog.text
    assert "secret-content" not in caplog.text
    assert await store.fail_orphans("server restarted") == 0


async def test_an_unreadable_task_is_an_internal_error_and_left_out_of_lists(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A body that does not decode (nested past the reader's limit, cut short, or no longer valid) is InternalError
    "cannot read" when read by id, and is left out of a listing while the owner's other tasks are listed, every
    page of them. Each read logs the task id once, never the content; nothing else is affected."""
    bodies = {
        "t-deep": lambda task: unreadable_body(task),
        "t-cut": lambda task: task.to_json()[:-20],
        "t-invalid": lambda task: task.to_json().replace(b"TASK_STATE_WORKING", b"secret-content-state"),
    }
    for n, task_id in enumerate(["t-1", "t-deep", "t-2", "t-cut", "t-3", "t-invalid", "t-4"]):
        task = make_task(task_id, ts=at(n))
        body = bodies[task_id](task) if task_id in bodies else None
        await store.save(TaskRecord(task, "acme", "alice", body=body))
    for task_id in bodies:
        caplog.clear()
        with pytest.raises(InternalError, match=f"task {task_id} is stored in a form this server cannot read"):
            await store.get(task_id, tenant="acme", owner="alice")
        assert [r.getMessage() for r in caplog.records if task_id in r.getMessage()] != []
        assert len(caplog.records) == 1, caplog.text
        assert "secret-content" not in caplog.text
    assert await store.get("t-deep") is None  # another scope: missing, as ever

    caplog.clear()
    assert await list_ids(store, tenant="acme", owner="alice") == ["t-4", "t-3", "t-2", "t-1"]
    assert all(task_id in caplog.text for task_id in bodies)
    assert "secret-content" not in caplog.text
    for query in ({"history_length": 0}, {"include_artifacts": False}, {"history_length": 1}):
        assert await list_ids(store, tenant="acme", owner="alice", **query) == ["t-4", "t-3", "t-2", "t-1"]
    # Paged one row at a time: a page whose row cannot be read is empty, and its cursor moves past it.
    seen: list[str] = []
    token = ""
    for _ in range(10):
        page = await store.list(TaskQuery(tenant="acme", owner="alice", page_size=1, page_token=token))
        seen += [task.id for task in page.tasks]
        assert page.total_size == 7
        token = page.next_page_token
        if not token:
            break
    assert seen == ["t-4", "t-3", "t-2", "t-1"]


async def test_fail_orphans_invalidates_records_read_before(store: TaskStore) -> None:
    await insert(store, make_task("t1"))
    stale = await store.get("t1")
    assert stale is not None
    await store.fail_orphans("server restarted")
    stale.task.status = TaskStatus(state=TaskState.COMPLETED, timestamp=at(5))
    with pytest.raises(ConflictError):
        await store.save(stale)


async def test_fail_orphans_moves_tasks_in_the_list_order(store: TaskStore) -> None:
    await insert(store, make_task("old-working", ts=at(1)))
    await insert(store, make_task("newer-done", state=TaskState.COMPLETED, ts=at(2)))
    await store.fail_orphans("server restarted")
    # The failure is the newest status change, so the failed task now lists first and matches FAILED.
    assert await list_ids(store) == ["old-working", "newer-done"]
    assert await list_ids(store, state=TaskState.FAILED) == ["old-working"]
    assert await list_ids(store, state=TaskState.WORKING) == []


async def test_purge_deletes_only_old_terminal_tasks(store: TaskStore) -> None:
    terminal = [TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED]
    live = [TaskState.SUBMITTED, TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED]
    for state in terminal + live:
        await insert(store, make_task(f"old-{state.name}", state=state, ts=at(1)))
        await insert(store, make_task(f"new-{state.name}", state=state, ts=at(10)))
    await insert(store, make_task("edge-COMPLETED", state=TaskState.COMPLETED, ts=at(5)))
    await insert(store, make_task("other-scope", state=TaskState.COMPLETED, ts=at(1)), tenant="acme")

    assert await store.purge(at(5)) == len(terminal) + 1

    remaining = set(await list_ids(store, page_size=100))
    assert remaining == {f"old-{s.name}" for s in live} | {f"new-{s.name}" for s in terminal + live} | {
        "edge-COMPLETED"
    }
    assert await store.get("other-scope", tenant="acme") is None
    assert await store.purge(at(5)) == 0


async def test_purge_interrupted_deletes_only_old_interrupted_tasks(store: TaskStore) -> None:
    """``--retention-interrupted`` (issue 14): tasks left INPUT_REQUIRED / AUTH_REQUIRED expire too."""
    interrupted = [TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED]
    others = [TaskState.SUBMITTED, TaskState.WORKING, TaskState.COMPLETED, TaskState.FAILED]
    for state in interrupted + others:
        await insert(store, make_task(f"old-{state.name}", state=state, ts=at(1)))
        await insert(store, make_task(f"new-{state.name}", state=state, ts=at(10)))

    assert await store.purge(at(5), interrupted=True) == len(interrupted)

    remaining = set(await list_ids(store, page_size=100))
    assert remaining == {f"old-{s.name}" for s in others} | {f"new-{s.name}" for s in interrupted + others}
    assert await store.purge(at(5), interrupted=True) == 0


async def test_purge_names_the_tasks_it_deletes_and_their_push_configs_go_with_them(
    store: TaskStore, push: PushConfigStore
) -> None:
    """Retention (``A2AServer.purge``) removes a purged task's push configs, token and credentials included: the
    store names each task it deletes, and the push store drops every config of those tasks, and only those."""
    await insert(store, make_task("old-done", state=TaskState.COMPLETED, ts=at(1)))
    await insert(store, make_task("old-asking", state=TaskState.INPUT_REQUIRED, ts=at(1)), tenant="acme", owner="bob")
    await insert(store, make_task("new-done", state=TaskState.COMPLETED, ts=at(10)))
    scopes = {"old-done": ("", "anonymous"), "old-asking": ("acme", "bob"), "new-done": ("", "anonymous")}
    for task_id, (tenant, owner) in scopes.items():
        for config_id in ("c1", "c2"):
            await push.put(make_config(task_id, config_id, tenant=tenant), owner=owner)
    await push.put(make_config("old-done", "c1", tenant="acme"), owner="bob")  # same task id, another scope

    purged: list[tuple[str, str, str]] = []
    assert await store.purge(at(5), purged=purged) == 1
    assert purged == [("", "anonymous", "old-done")]
    assert await delete_task_configs(push, purged) == 2
    assert await push.list("old-done") == []
    assert [c.id for c in await push.list("old-done", tenant="acme", owner="bob")] == ["c1"]

    interrupted: list[tuple[str, str, str]] = []
    assert await store.purge(at(5), interrupted=True, purged=interrupted) == 1
    assert interrupted == [("acme", "bob", "old-asking")]
    assert await delete_task_configs(push, interrupted) == 2
    assert await push.list("old-asking", tenant="acme", owner="bob") == []
    assert [c.id for c in await push.list("new-done")] == ["c1", "c2"]
    assert await delete_task_configs(push, interrupted) == 0


async def test_first_messages_keeps_the_newest_tasks_when_more_fall_in_the_window(store: TaskStore) -> None:
    """The idempotency window refilled at start (``first_messages``, SQLite and PostgreSQL) holds the most recent
    tasks when more than ``limit`` changed within it: a retry of a recent message is what it must recognise."""
    first_messages = getattr(store, "first_messages", None)
    if first_messages is None:
        # Only the memory store has none: it keeps nothing across a restart, so there is no window to refill (the
        # engine asks for the method the same way, ``TaskEngine``'s start-up refill).
        assert isinstance(store, MemoryTaskStore)
        return
    for i in range(10):
        await insert(store, make_task(f"t{i}", state=TaskState.COMPLETED, ts=at(i)))
    rows = await first_messages(at(0), 4)
    assert sorted(row[3] for row in rows) == ["t6", "t7", "t8", "t9"]
    assert {row[2] for row in rows} == {"m-t6", "m-t7", "m-t8", "m-t9"}


# --- push configs -------------------------------------------------------------------------------------------


def make_config(task_id: str, config_id: str, *, tenant: str = "", url: str = "") -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(
        tenant=tenant,
        task_id=task_id,
        id=config_id,
        url=url or f"https://hooks.example.com/{task_id}/{config_id}",
        token=f"tok-{config_id}",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="secret"),
    )


async def test_push_put_get_round_trips(push: PushConfigStore) -> None:
    config = make_config("t1", "c1", tenant="acme")
    await push.put(config, owner="alice")
    assert await push.get("t1", "c1", tenant="acme", owner="alice") == config


async def test_push_get_missing_returns_none(push: PushConfigStore) -> None:
    assert await push.get("t1", "c1") is None
    await push.put(make_config("t1", "c1"))
    assert await push.get("t1", "c2") is None
    assert await push.get("t2", "c1") is None


async def test_push_is_scoped_by_tenant_owner_and_task(push: PushConfigStore) -> None:
    await push.put(make_config("t1", "c1", tenant="acme"), owner="alice")
    assert await push.get("t1", "c1", tenant="other", owner="alice") is None
    assert await push.get("t1", "c1", tenant="acme", owner="bob") is None
    assert await push.get("t1", "c1") is None
    assert await push.list("t1", tenant="other", owner="alice") == []
    assert await push.list("t1", tenant="acme", owner="bob") == []
    assert await push.list("t2", tenant="acme", owner="alice") == []
    assert not await push.delete("t1", "c1", tenant="acme", owner="bob")
    assert not await push.delete("t1", "c1", tenant="other", owner="alice")
    assert await push.get("t1", "c1", tenant="acme", owner="alice") is not None


async def test_push_same_ids_in_different_scopes_are_independent(push: PushConfigStore) -> None:
    await push.put(make_config("t1", "c1", url="https://a.example.com/"), owner="alice")
    await push.put(make_config("t1", "c1", url="https://b.example.com/"), owner="bob")
    alice = await push.get("t1", "c1", owner="alice")
    bob = await push.get("t1", "c1", owner="bob")
    assert alice is not None
    assert bob is not None
    assert (alice.url, bob.url) == ("https://a.example.com/", "https://b.example.com/")
    assert await push.delete("t1", "c1", owner="alice")
    assert await push.get("t1", "c1", owner="bob") == bob


async def test_push_several_per_task_listed_oldest_first(push: PushConfigStore) -> None:
    configs = [make_config("t1", config_id) for config_id in ("zeta", "alpha", "mid")]
    for config in configs:
        await push.put(config)
    await push.put(make_config("t2", "other"))
    assert await push.list("t1") == configs


async def test_push_put_replaces(push: PushConfigStore) -> None:
    await push.put(make_config("t1", "c1", url="https://old.example.com/"))
    await push.put(make_config("t1", "c2"))
    await push.put(make_config("t1", "c1", url="https://new.example.com/"))
    got = await push.get("t1", "c1")
    assert got is not None
    assert got.url == "https://new.example.com/"
    listed = await push.list("t1")
    assert sorted(c.id for c in listed) == ["c1", "c2"]
    assert {c.id: c.url for c in listed}["c1"] == "https://new.example.com/"


async def test_push_delete(push: PushConfigStore) -> None:
    await push.put(make_config("t1", "c1"))
    await push.put(make_config("t1", "c2"))
    assert await push.delete("t1", "c1")
    assert await push.get("t1", "c1") is None
    assert [c.id for c in await push.list("t1")] == ["c2"]
    assert not await push.delete("t1", "c1")
    assert not await push.delete("t1", "never")
    assert not await push.delete("nope", "never")
    assert await push.delete("t1", "c2")
    assert await push.list("t1") == []


async def test_push_delete_then_put_goes_last(push: PushConfigStore) -> None:
    await push.put(make_config("t1", "c1"))
    await push.put(make_config("t1", "c2"))
    assert await push.delete("t1", "c1")
    await push.put(make_config("t1", "c1"))
    assert [c.id for c in await push.list("t1")] == ["c2", "c1"]


# --- the push outbox (PushOutbox): memory, SQLite and PostgreSQL ----------------------------------------------


def _memory_outbox(tmp_path: Path) -> tuple[TaskStore, PushOutbox]:
    return MemoryTaskStore(), MemoryPushOutbox()


def _sqlite_outbox(tmp_path: Path) -> tuple[TaskStore, PushOutbox]:
    tasks = SQLiteTaskStore(str(tmp_path / "o.db"))
    return tasks, SQLitePushOutbox(tasks)


_OUTBOXES: dict[str, Callable[[Path], tuple[TaskStore, PushOutbox]]] = {
    "memory": _memory_outbox,
    "sqlite": _sqlite_outbox,
}


def _postgres_outbox(request: pytest.FixtureRequest) -> tuple[TaskStore, PushOutbox]:
    # tests/conftest.py: skips (fails under CI=true) when the server is down; a fresh namespace per test, dropped after.
    from relaykit.backends.postgres import PostgresPushOutbox, PostgresTaskStore

    url, namespace = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_namespace")
    tasks = PostgresTaskStore(url, namespace=namespace)
    return tasks, PostgresPushOutbox(tasks)


@pytest.fixture(params=[*sorted(_OUTBOXES), pytest.param("postgres", marks=pytest.mark.postgres)])
async def outbox(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[PushOutbox]:
    if request.param == "postgres":
        tasks, box = _postgres_outbox(request)
    else:
        tasks, box = _OUTBOXES[request.param](tmp_path)
    await tasks.start()
    await box.start()
    try:
        yield box
    finally:
        await box.close()
        await tasks.close()


def entry(seq: int, *, task: str = "t1", config: str = "c1", tenant: str = "", owner: str = "anonymous") -> OutboxEntry:
    return OutboxEntry(
        event_id=f"{task}-{config}-{seq}-{tenant}-{owner}",
        task_id=task,
        config_id=config,
        seq=seq,
        body=b'{"statusUpdate":{"taskId":"%s"}}' % task.encode(),
        tenant=tenant,
        owner=owner,
        created_at=1000.0 + seq,
    )


async def test_outbox_pending_in_stream_and_seq_order(outbox: PushOutbox) -> None:
    await outbox.commit(OutboxChanges(added=[entry(3), entry(1, config="c2"), entry(1), entry(2)]))
    pending = await outbox.pending()
    assert [(e.config_id, e.seq) for e in pending] == [("c1", 1), ("c1", 2), ("c1", 3), ("c2", 1)]
    assert pending[0].body == entry(1).body
    assert pending[0].created_at == 1000.0 + 1


async def test_outbox_delivered_entries_leave_and_count(outbox: PushOutbox) -> None:
    first, second = entry(1), entry(2)
    await outbox.commit(OutboxChanges(added=[first, second]))
    await outbox.commit(
        OutboxChanges(delivered=[first], outcomes=[DeliveryOutcome(first.stream, True, 2000.0, "https://h/")])
    )
    assert [e.seq for e in await outbox.pending()] == [2]
    [health] = await outbox.health("t1")
    assert (health.config_id, health.url, health.delivered, health.pending, health.dead) == (
        "c1",
        "https://h/",
        1,
        1,
        0,
    )
    assert health.last_success == datetime.fromtimestamp(2000.0, UTC)
    assert health.last_failure is None


async def test_outbox_retries_are_remembered(outbox: PushOutbox) -> None:
    item = entry(1)
    await outbox.commit(OutboxChanges(added=[item]))
    item.attempts, item.next_attempt_at, item.last_error = 2, 5000.0, "HTTP 503"
    fail = DeliveryOutcome(item.stream, False, 3000.0, "https://h/", "HTTP 503")
    await outbox.commit(OutboxChanges(retried=[item], outcomes=[fail, fail]))
    [stored] = await outbox.pending()
    assert (stored.attempts, stored.next_attempt_at, stored.last_error) == (2, 5000.0, "HTTP 503")
    [health] = await outbox.health("t1")
    assert (health.failures, health.consecutive_failures, health.last_error) == (2, 2, "HTTP 503")
    await outbox.commit(OutboxChanges(delivered=[item], outcomes=[DeliveryOutcome(item.stream, True, 3001.0)]))
    [health] = await outbox.health("t1")
    assert (health.failures, health.consecutive_failures, health.delivered, health.pending) == (2, 0, 1, 0)
    assert health.url == "https://h/"  # an outcome without a url keeps the known one


async def test_outbox_dead_letters(outbox: PushOutbox) -> None:
    first, second = entry(1), entry(2)
    await outbox.commit(OutboxChanges(added=[first, second]))
    first.attempts, first.last_error, first.dead_at = 3, "HTTP 500", 4000.0
    await outbox.commit(OutboxChanges(dead=[first]))
    assert [e.seq for e in await outbox.pending()] == [2]
    [dead] = await outbox.dead_letters("t1")
    assert (dead.event_id, dead.attempts, dead.last_error, dead.dead_at) == (first.event_id, 3, "HTTP 500", 4000.0)
    [health] = await outbox.health("t1")
    assert (health.pending, health.dead) == (1, 1)


async def test_outbox_discard_drops_pending_of_one_stream_only(outbox: PushOutbox) -> None:
    dead = entry(9)
    await outbox.commit(OutboxChanges(added=[entry(1), entry(2), entry(1, config="c2"), dead]))
    dead.dead_at = 1.0
    await outbox.commit(OutboxChanges(dead=[dead]))
    await outbox.commit(OutboxChanges(discarded=[("", "anonymous", "t1", "c1")]))
    assert [(e.config_id, e.seq) for e in await outbox.pending()] == [("c2", 1)]
    assert [e.seq for e in await outbox.dead_letters("t1")] == [9]  # dead letters stay


async def test_outbox_discard_then_add_in_one_commit_keeps_the_new_entries(outbox: PushOutbox) -> None:
    await outbox.commit(OutboxChanges(added=[entry(1)]))
    await outbox.commit(OutboxChanges(discarded=[("", "anonymous", "t1", "c1")], added=[entry(2)]))
    assert [e.seq for e in await outbox.pending()] == [2]


async def test_outbox_is_scoped_by_tenant_owner_and_task(outbox: PushOutbox) -> None:
    await outbox.commit(
        OutboxChanges(
            added=[entry(1), entry(1, tenant="acme"), entry(1, owner="alice"), entry(1, task="t2")],
            outcomes=[DeliveryOutcome(("acme", "anonymous", "t1", "c1"), True, 1.0)],
        )
    )
    [mine] = await outbox.health("t1")
    assert (mine.tenant, mine.owner, mine.pending, mine.delivered) == ("", "anonymous", 1, 0)
    [acme] = await outbox.health("t1", tenant="acme")
    assert (acme.pending, acme.delivered) == (1, 1)
    assert [h.owner for h in await outbox.health("t1", owner="alice")] == ["alice"]
    assert await outbox.health("t3") == []
    assert len(await outbox.pending()) == 4


async def test_outbox_adding_an_entry_twice_keeps_one(outbox: PushOutbox) -> None:
    await outbox.commit(OutboxChanges(added=[entry(1)]))
    await outbox.commit(OutboxChanges(added=[entry(1)]))
    assert len(await outbox.pending()) == 1


async def test_outbox_claims_are_exclusive_per_stream(outbox: PushOutbox) -> None:
    stream = ("", "anonymous", "t1", "c1")
    assert await outbox.claim(stream, "w1")
    assert await outbox.claim(stream, "w1")  # re-entrant for the holder
    assert not await outbox.claim(stream, "w2")
    assert await outbox.claim(("", "anonymous", "t1", "c2"), "w2")
    await outbox.release(stream, "w2")  # not the holder: no effect
    assert not await outbox.claim(stream, "w2")
    await outbox.release(stream, "w1")
    assert await outbox.claim(stream, "w2")


async def test_outbox_stored_copy_is_not_the_callers_object(outbox: PushOutbox) -> None:
    item = entry(1)
    await outbox.commit(OutboxChanges(added=[item]))
    item.attempts = 7
    item.last_error = "changed after commit"
    [stored] = await outbox.pending()
    assert (stored.attempts, stored.last_error) == (0, "")


async def test_outbox_health_folds_several_outcomes_of_one_batch_in_order(outbox: PushOutbox) -> None:
    stream = ("", "anonymous", "t1", "c1")

    def ok(at: float, url: str = "") -> DeliveryOutcome:
        return DeliveryOutcome(stream, True, at, url)

    def fail(at: float, error: str) -> DeliveryOutcome:
        return DeliveryOutcome(stream, False, at, "", error)

    async def counters() -> tuple[Any, ...]:
        [h] = await outbox.health("t1")
        success = h.last_success.timestamp() if h.last_success else None
        failure = h.last_failure.timestamp() if h.last_failure else None
        return (h.url, h.delivered, h.failures, h.consecutive_failures, success, failure, h.last_error)

    await outbox.commit(OutboxChanges(outcomes=[fail(1.0, "a"), fail(2.0, "b")]))
    assert await counters() == ("", 0, 2, 2, None, 2.0, "b")
    await outbox.commit(
        OutboxChanges(outcomes=[fail(3.0, "c"), ok(4.0, "https://h/1"), fail(5.0, "d"), fail(6.0, "e")])
    )
    assert await counters() == ("https://h/1", 1, 5, 2, 4.0, 6.0, "e")
    await outbox.commit(OutboxChanges(outcomes=[fail(7.0, "f"), ok(8.0)]))
    assert await counters() == ("https://h/1", 2, 6, 0, 8.0, 7.0, "f")


async def test_outbox_one_batch_applies_its_changes_in_the_documented_order(outbox: PushOutbox) -> None:
    kept, gone, doomed = entry(1), entry(2), entry(3)
    first, last = entry(1), entry(1)
    first.attempts, first.last_error = 1, "first"
    last.attempts, last.last_error, last.next_attempt_at = 2, "last", 7.5
    doomed.dead_at, doomed.last_error = 9.0, "gave up"
    # Added, then delivered / retried (twice: the later change wins) / dead, all in one commit.
    await outbox.commit(
        OutboxChanges(added=[kept, gone, doomed], delivered=[gone], retried=[first, last], dead=[doomed])
    )
    [stored] = await outbox.pending()
    assert (stored.event_id, stored.attempts, stored.last_error, stored.next_attempt_at) == (
        kept.event_id,
        2,
        "last",
        7.5,
    )
    [dead] = await outbox.dead_letters("t1")
    assert (dead.event_id, dead.dead_at, dead.last_error) == (doomed.event_id, 9.0, "gave up")
    # A discard goes first: it drops what was pending before the batch, not what the batch adds.
    await outbox.commit(OutboxChanges(discarded=[kept.stream], added=[entry(4)], retried=[last]))
    assert [(e.seq, e.attempts) for e in await outbox.pending()] == [(4, 0)]


async def test_outbox_dead_letters_oldest_first(outbox: PushOutbox) -> None:
    items = [entry(1), entry(2), entry(3, config="c2")]
    await outbox.commit(OutboxChanges(added=items))
    for item, dead_at in zip(items, (30.0, 10.0, 20.0), strict=True):
        item.dead_at = dead_at
    await outbox.commit(OutboxChanges(dead=items))
    assert [e.seq for e in await outbox.dead_letters("t1")] == [2, 3, 1]
    assert await outbox.pending() == []
