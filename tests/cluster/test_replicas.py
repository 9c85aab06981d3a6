"""Scale-out acceptance (issue #6): three ``relaykit serve`` replicas on one PostgreSQL store and one Redis bus behave
as one agent. Any replica takes any call for any task; SSE ids are one per-task sequence across replicas
(CONTRACT "SSE and resume").

Real processes (``cluster.deploy``), a raw SSE client (``cluster.client``: duplicates would be visible), bounded
waits only. The agent is ``tests/cluster/agents.py`` (``N DELAY`` ⇒ N chunks, DELAY seconds apart).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from cluster.client import (
    TERMINAL,
    ArtifactView,
    Sse,
    artifact_texts,
    assert_ids_increase,
    cancel,
    chunks,
    get_task,
    list_tasks,
    message,
    new_message_id,
    open_stream,
    open_subscribe,
    send,
    summary,
    text_of,
    wait_for_state,
)
from cluster.deploy import LEASE, Deploy, Deployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(90)]

WAIT = 20.0  # seconds: the bound on any one wait for a task or an event


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


# --- send / stream / cancel on three replicas -----------------------------------------------------------------------


async def test_send_on_one_replica_stream_on_another_cancel_on_a_third(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = shared_deployment
    r1, r2, r3 = d.urls
    sent = await send(http, r1, message("200 0.05", return_immediately=True))
    task_id = sent["task"]["id"]
    claimant = await d.wait_claimant(task_id)
    # Cancel through a replica that does not run the task when the third one happens to (the cross-replica path).
    canceller = r3 if claimant.url != r3 else r1
    async with open_subscribe(http, r2, task_id) as subscribed:
        await subscribed.until_chunk(2, WAIT)
        canceled = await cancel(http, canceller, task_id)
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED", canceled
        # Persisted before CancelTask answered: every replica reads CANCELED right away.
        for url in d.urls:
            assert (await get_task(http, url, task_id))["status"]["state"] == "TASK_STATE_CANCELED", url
        await subscribed.rest(WAIT)
    seen = subscribed.seen
    assert seen[0].kind == "task"
    assert seen[-1].state == "TASK_STATE_CANCELED"
    assert_ids_increase(seen)
    got = [e.chunk for e in seen if e.chunk is not None]
    assert got == chunks(len(got))
    assert len(got) < 200
    # The claim was released: nobody holds a finished task.
    assert await d.claimant(task_id) is None


async def test_cancel_through_the_claimant_and_through_another_replica(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = shared_deployment
    for through_claimant in (True, False):
        sent = await send(http, d.urls[0], message("200 0.05", return_immediately=True))
        task_id = sent["task"]["id"]
        claimant = await d.wait_claimant(task_id)
        await wait_for_state(http, claimant.url, task_id, {"TASK_STATE_WORKING"}, WAIT)
        target = claimant.url if through_claimant else next(u for u in d.urls if u != claimant.url)
        canceled = await cancel(http, target, task_id)
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED", (through_claimant, canceled)
        for url in d.urls:
            task = await get_task(http, url, task_id)
            assert task["status"]["state"] == "TASK_STATE_CANCELED", (through_claimant, url, task["status"])
        # A second cancel is refused the same way on any replica (terminal tasks are not cancelable).
        response = await http.post(f"{d.urls[2]}/tasks/{task_id}:cancel", headers={"A2A-Version": "1.0"})
        assert response.status_code == 400, response.text


# --- subscribing on another replica ---------------------------------------------------------------------------------


async def test_subscriber_on_another_replica_mid_stream_gets_every_later_event_once(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = shared_deployment
    total = 60
    body = message(f"{total} 0.04")
    async with open_stream(http, d.urls[0], body) as streaming:
        await streaming.until_chunk(10, WAIT)
        task_id = streaming.seen[0].task_id
        assert task_id is not None
        async with open_subscribe(http, d.urls[1], task_id) as subscribed:
            late = await subscribed.rest(WAIT)
        await streaming.rest(WAIT)
    first = streaming.seen

    # The streaming caller: every chunk once, ids strictly increasing, COMPLETED.
    assert_ids_increase(first)
    assert [e.chunk for e in first if e.chunk is not None] == chunks(total)
    assert first[-1].state == "TASK_STATE_COMPLETED"

    # The late subscriber: the Task snapshot first (its id: the last event the snapshot includes), then every later
    # event exactly once: snapshot + later chunks = all chunks, nothing repeated, nothing missing.
    assert late[0].kind == "task", late[0]
    assert_ids_increase(late)
    view = ArtifactView()
    for event in late:
        view.apply(event)
    assert view.texts() == ["".join(chunks(total))]
    assert len(late[0].body.get("artifacts", [])) <= 1
    later = [e.chunk for e in late[1:] if e.chunk is not None]
    assert later == chunks(total)[total - len(later) :], later
    assert late[-1].state == "TASK_STATE_COMPLETED"

    # One sequence across replicas: an id names the same event on both.
    by_id = {e.id: e.data for e in first}
    for event in late[1:]:
        assert by_id.get(event.id) == event.data, event.id
    # The snapshot's artifact holds exactly the chunks before the first event the subscriber got after it.
    if late[0].body.get("artifacts"):
        held = text_of(late[0].body["artifacts"][0]["parts"])
        assert held == "".join(chunks(total)[: total - len(later)])


async def test_last_event_id_resume_on_another_replica(shared_deployment: Deployment, http: httpx.AsyncClient) -> None:
    d = shared_deployment
    total = 50
    async with open_stream(http, d.urls[0], message(f"{total} 0.06")) as streaming:
        await streaming.until_chunk(7, WAIT)
    seen = streaming.seen
    # The connection is gone (the client dropped it); the task goes on. Resume elsewhere after the last id seen,
    # once with the Last-Event-ID header and once with the lastEventId query parameter.
    task_id = seen[0].task_id
    assert task_id is not None
    last = seen[-1].id
    assert last is not None

    async def resume(url: str, query: bool) -> list[Sse]:
        async with open_subscribe(http, url, task_id, last_event_id=last, query=query) as resumed:
            return await resumed.rest(WAIT)

    by_header, by_query = await asyncio.wait_for(
        asyncio.gather(resume(d.urls[1], False), resume(d.urls[2], True)), WAIT
    )
    for resumed in (by_header, by_query):
        # Exactly the events after X: consecutive ids from X+1 (this task has no other execution), no snapshot.
        assert [e.id for e in resumed] == list(range(last + 1, last + 1 + len(resumed))), [e.id for e in resumed]
        assert resumed[0].kind != "task"
        assert [e.chunk for e in seen + resumed if e.chunk is not None] == chunks(total)
        assert resumed[-1].state == "TASK_STATE_COMPLETED"
    assert [e.data for e in by_header] == [e.data for e in by_query]
    task = await get_task(http, d.urls[0], task_id)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_texts(task) == ["".join(chunks(total))]


async def test_resume_after_the_task_ended_replays_what_was_missed(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    # The client dropped its stream, and the task finished before it came back: the resumed subscription (on another
    # replica) still gets exactly the events it missed, up to COMPLETED, then ends.
    d = shared_deployment
    total = 20
    async with open_stream(http, d.urls[0], message(f"{total} 0.02")) as streaming:
        await streaming.until_chunk(4, WAIT)
    seen = streaming.seen
    task_id, last = seen[0].task_id, seen[-1].id
    assert task_id is not None
    assert last is not None
    await wait_for_state(http, d.urls[1], task_id, {"TASK_STATE_COMPLETED"}, WAIT)
    async with open_subscribe(http, d.urls[2], task_id, last_event_id=last) as resumed:
        missed = await resumed.rest(WAIT)
    assert [e.id for e in missed] == list(range(last + 1, last + 1 + len(missed))), [e.id for e in missed]
    assert [e.chunk for e in seen + missed if e.chunk is not None] == chunks(total)
    assert missed[-1].state == "TASK_STATE_COMPLETED"
    # With nothing left to replay, the resumed stream ends at once (it does not wait for events that cannot come).
    async with open_subscribe(http, d.urls[1], task_id, last_event_id=missed[-1].id) as again:
        assert await again.rest(WAIT) == []


async def test_resume_with_an_id_the_log_does_not_have_starts_from_a_snapshot(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = shared_deployment
    sent = await send(http, d.urls[0], message("100 0.05", return_immediately=True))
    task_id = sent["task"]["id"]
    await wait_for_state(http, d.urls[1], task_id, {"TASK_STATE_WORKING"}, WAIT)
    # An id ahead of anything published: not covered by the log, so the Task snapshot first, then later events.
    async with open_subscribe(http, d.urls[2], task_id, last_event_id=10_000) as subscribed:
        seen = await subscribed.rest(WAIT)
    assert seen[0].kind == "task"
    assert_ids_increase(seen)
    view = ArtifactView()
    for event in seen:
        view.apply(event)
    assert view.texts() == ["".join(chunks(100))]
    assert seen[-1].state == "TASK_STATE_COMPLETED"


# --- multi-turn, reads ----------------------------------------------------------------------------------------------


async def test_input_required_continuation_on_another_replica(deploy: Deploy, http: httpx.AsyncClient) -> None:
    d = deploy("examples/ask.py", 3)
    context_id = f"ctx-{new_message_id()}"
    first = await send(http, d.urls[0], message("hello", context_id=context_id))
    task = first["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    assert "name" in text_of(task["status"]["message"]["parts"])
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    task_id = task["id"]
    assert await d.claimant(task_id) is None  # an interrupted task holds no claim

    # The answer goes to another replica (streaming), and the result is read on a third.
    async with open_stream(http, d.urls[1], message("Ada", task_id=task_id)) as streaming:
        seen = await streaming.rest(WAIT)
    assert seen[0].kind == "task", seen[0]
    assert seen[0].state == "TASK_STATE_INPUT_REQUIRED", seen[0]
    assert seen[-1].state == "TASK_STATE_COMPLETED", [(e.kind, e.state) for e in seen]
    assert_ids_increase(seen)
    done = await get_task(http, d.urls[2], task_id)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["contextId"] == context_id
    assert any("Ada" in text for text in artifact_texts(done)), done
    history = [(m["role"], text_of(m["parts"])) for m in done["history"]]
    assert [role for role, _ in history] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER"], history
    assert history[0][1] == "hello"
    assert history[2][1] == "Ada"
    # A terminal task takes no more messages, whichever replica is asked.
    for url in d.urls:
        response = await http.post(
            f"{url}/message:send", json=message("again", task_id=task_id), headers={"A2A-Version": "1.0"}
        )
        assert response.status_code == 400, response.text


async def test_subscribers_of_a_resumed_task_get_updates_not_the_answers_task(
    deploy: Deploy, http: httpx.AsyncClient
) -> None:
    # A subscription is one Task, then status and artifact updates (spec §3.1.6). The answer to an interrupted task
    # opens its own stream with the Task (§5.5); subscribers on every replica (in the process that runs the answer, or
    # reading the shared log), and clients resuming from a Last-Event-ID afterwards, get only the updates after it.
    # Both ways an answer runs: where it was accepted (a worker replica), and queued by an API-only replica to a
    # worker (its Task then reaches its caller through the shared log, marked for that caller alone).
    workers = deploy("examples/ask.py", 2)
    front = deploy("examples/ask.py", 1, args=["--no-worker"])
    urls = [*workers.urls, *front.urls]
    for via in (workers.urls[0], front.urls[0]):
        asked = (await send(http, workers.urls[1], message("hello")))["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
        task_id = asked["id"]
        async with contextlib.AsyncExitStack() as stack:
            subscribers = [await stack.enter_async_context(open_subscribe(http, url, task_id)) for url in urls]
            snapshots = [await asyncio.wait_for(subscriber.next(), WAIT) for subscriber in subscribers]
            assert {(e.kind, e.state) for e in snapshots} == {("task", "TASK_STATE_INPUT_REQUIRED")}
            async with open_stream(http, via, message("Ada", task_id=task_id)) as streaming:
                own = await streaming.rest(WAIT)
            assert own[0].kind == "task", summary(own)
            assert text_of(own[0].body["history"][-1]["parts"]) == "Ada"
            updates = [(e.id, e.data) for e in own[1:]]
            assert updates, summary(own)
            assert {e.kind for e in own[1:]} <= {"statusUpdate", "artifactUpdate"}, summary(own)
            assert own[-1].state == "TASK_STATE_COMPLETED"
            for url, subscriber in zip(urls, subscribers, strict=True):
                rest = await subscriber.rest(WAIT)
                assert [(e.id, e.data) for e in rest] == updates, (via, url, summary(rest))
        for url, snapshot in zip(urls, snapshots, strict=True):
            async with open_subscribe(http, url, task_id, last_event_id=snapshot.id) as resumed:
                replayed = await resumed.rest(WAIT)
            assert [(e.id, e.data) for e in replayed] == updates, (via, url, summary(replayed))


async def test_a_continuation_sent_at_once_to_another_replica_runs_at_once(
    deploy: Deploy, http: httpx.AsyncClient
) -> None:
    # The client answers the moment the blocking SendMessage returns INPUT_REQUIRED, on another replica, with no wait
    # in between. The execution that asked holds no claim any more (released by the very write that stored
    # INPUT_REQUIRED), so whichever worker takes the answer runs it at once, well within the lease, and the agent sees
    # it. Several turns: the window this guards (a claim still held after the answer) was a few milliseconds wide.
    d = deploy("examples/ask.py", 3)
    loop = asyncio.get_running_loop()
    for turn in range(10):
        asked = (await send(http, d.urls[turn % 3], message("hello")))["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
        name = f"Ada-{turn}"
        started = loop.time()
        done = (await send(http, d.urls[(turn + 1) % 3], message(name, task_id=asked["id"])))["task"]
        took = loop.time() - started
        assert done["status"]["state"] == "TASK_STATE_COMPLETED", (turn, done["status"])
        assert any(name in text for text in artifact_texts(done)), (turn, done)
        assert took < LEASE / 2, f"turn {turn}: the answer took {took:.2f} s"
        # Nor does a finished task hold a claim once its answer is out.
        assert await d.claimant(asked["id"]) is None, turn


async def test_return_immediately_follow_up_behind_a_running_execution_answers_at_once(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    # A returnImmediately follow-up to a task that is executing another message is queued behind it; on any replica
    # (the one running the task, or another) it is answered at once with the task as it is, not when its own
    # execution starts (20 s later here).
    d = shared_deployment
    sent = await send(http, d.urls[0], message("400 0.05", return_immediately=True))
    task_id = sent["task"]["id"]
    claimant = await d.wait_claimant(task_id)
    other = next(url for url in d.urls if url != claimant.url)
    # Another replica reads the stored task, whose first state is written within 0.1 s of the run's start.
    await wait_for_state(http, other, task_id, ["TASK_STATE_WORKING"], WAIT)
    try:
        for url in (claimant.url, other):
            answered = await send(http, url, message("1", task_id=task_id, return_immediately=True))
            assert answered["task"]["id"] == task_id
            assert answered["task"]["status"]["state"] == "TASK_STATE_WORKING", answered["task"]["status"]
            # Answered while the first execution still runs (the claimant's live view): it did not wait for its turn.
            assert (await get_task(http, claimant.url, task_id))["status"]["state"] == "TASK_STATE_WORKING", url
    finally:
        await cancel(http, d.urls[0], task_id)


async def test_get_and_list_from_any_replica(shared_deployment: Deployment, http: httpx.AsyncClient) -> None:
    d = shared_deployment
    context_id = f"ctx-{new_message_id()}"
    made = []
    for i, url in enumerate(d.urls * 2):
        reply = await send(http, url, message(f"{i + 1}", context_id=context_id))
        assert reply["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply
        made.append(reply["task"])
    ids = {task["id"] for task in made}
    assert len(ids) == 6
    for task in made:
        bodies = [await get_task(http, url, task["id"]) for url in d.urls]
        assert all(body == bodies[0] for body in bodies[1:]), task["id"]
        count = int(text_of(task["history"][0]["parts"]))
        assert artifact_texts(bodies[0]) == ["".join(chunks(count))]
    for url in d.urls:
        listed = await list_tasks(http, url, contextId=context_id)
        assert {task["id"] for task in listed["tasks"]} == ids, url
        assert int(listed.get("totalSize", len(ids))) == len(ids)
        states = {task["status"]["state"] for task in listed["tasks"]}
        assert states == {"TASK_STATE_COMPLETED"}
        completed = await list_tasks(http, url, contextId=context_id, status="TASK_STATE_COMPLETED")
        assert {task["id"] for task in completed["tasks"]} == ids
    # Unknown tasks are unknown everywhere.
    for url in d.urls:
        response = await http.get(f"{url}/tasks/{new_message_id()}", headers={"A2A-Version": "1.0"})
        assert response.status_code == 404, response.text


# --- idempotent SendMessage -----------------------------------------------------------------------------------------


async def test_repeated_message_id_on_another_replica_returns_the_original_task(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = shared_deployment
    message_id = new_message_id()
    body = message("5 0.02", message_id=message_id)
    first = await send(http, d.urls[0], body)
    task_id = first["task"]["id"]
    assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    again = await send(http, d.urls[1], message("5 0.02", message_id=message_id))
    assert again["task"]["id"] == task_id
    assert again["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_texts(again["task"]) == artifact_texts(first["task"])
    assert [run[0] for run in d.runs(message_id)] == [task_id], d.runs(message_id)
    # Tasks of the module: exactly one carries this message.
    assert (await get_task(http, d.urls[2], task_id))["history"][0]["messageId"] == message_id


async def test_repeated_message_id_while_the_original_runs(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = shared_deployment
    message_id = new_message_id()
    total = 30
    async with open_stream(http, d.urls[0], message(f"{total} 0.05", message_id=message_id)) as streaming:
        await streaming.until_chunk(3, WAIT)
        task_id = streaming.seen[0].task_id
        # The same message again, on two other replicas, while the first execution streams: a blocking send and a
        # streaming send. Both get the original execution (its events, its result), not a second run.
        repeat_send = asyncio.create_task(send(http, d.urls[1], message(f"{total} 0.05", message_id=message_id)))

        async def repeat_stream() -> list[Sse]:
            async with open_stream(http, d.urls[2], message(f"{total} 0.05", message_id=message_id)) as again:
                return await again.rest(WAIT)

        streamed_again = await repeat_stream()
        await streaming.rest(WAIT)
        sent_again = await asyncio.wait_for(repeat_send, WAIT)
    original = streaming.seen
    assert sent_again["task"]["id"] == task_id
    assert sent_again["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_texts(sent_again["task"]) == ["".join(chunks(total))]
    # The repeated stream replays the original execution: the very same events with the very same ids.
    assert [(e.id, e.data) for e in streamed_again] == [(e.id, e.data) for e in original]
    assert len(d.runs(message_id)) == 1, d.runs(message_id)


async def test_concurrent_identical_sends_on_every_replica_run_once(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = shared_deployment
    message_id = new_message_id()
    replies = await asyncio.wait_for(
        asyncio.gather(*(send(http, url, message("8 0.02", message_id=message_id)) for url in d.urls * 2)), WAIT
    )
    task_ids = {reply["task"]["id"] for reply in replies}
    assert len(task_ids) == 1, task_ids
    for reply in replies:
        assert reply["task"]["status"]["state"] in TERMINAL
        assert reply["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply
        assert artifact_texts(reply["task"]) == ["".join(chunks(8))]
    assert len(d.runs(message_id)) == 1, d.runs(message_id)


async def test_stream_ends_cleanly_when_the_client_leaves(
    shared_deployment: Deployment, http: httpx.AsyncClient
) -> None:
    # A client that leaves mid-stream costs nothing: the task completes, the claim is released.
    d = shared_deployment
    async with open_stream(http, d.urls[1], message("20 0.02")) as streaming:
        await streaming.until_chunk(1, WAIT)
    task_id = streaming.seen[0].task_id
    assert task_id is not None
    task = await wait_for_state(http, d.urls[2], task_id, {"TASK_STATE_COMPLETED"}, WAIT)
    assert artifact_texts(task) == ["".join(chunks(20))]
    deadline = asyncio.get_running_loop().time() + WAIT
    while await d.claimant(task_id) is not None:
        assert asyncio.get_running_loop().time() < deadline, "the claim was never released"
        await asyncio.sleep(0.05)
