"""``/metrics`` after a scripted workload, parsed with prometheus_client's parser: the exact counts of requests (by
operation, binding, outcome), executions by final state, tasks by state (a gauge) and push deliveries; and no route
without ``metrics``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from otel_helpers import new_telemetry, serve_agent, webhook
from prometheus_client.parser import text_string_to_metric_families

from relaykit.client import Client
from relaykit.errors import TaskNotFoundError
from relaykit.telemetry import Metrics, Telemetry
from relaykit.types import Task, TaskPushNotificationConfig


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_scrape_after_a_scripted_workload() -> None:
    async with webhook() as hook, serve_agent(new_telemetry(None), metrics=True) as served:
        rpc = Client(served.url, transports=["JSONRPC"])
        rest = Client(served.url, transports=["HTTP+JSON"])
        async with rpc, rest:
            for _ in range(3):
                assert isinstance(await rpc.send("hello"), Task)
            events = [e async for e in rest.stream("stream 5")]
            assert len(events) == 7
            with pytest.raises(TaskNotFoundError):
                await rpc.get_task("no-such-task")
            pushed = await rpc.send("hello", push=TaskPushNotificationConfig(url=hook.url))
            assert isinstance(pushed, Task)
            slow = await rpc.send("slow", return_immediately=True)
            assert isinstance(slow, Task)
            await rpc.cancel(slow.id)
        await served.server.push_sender.drained()
        delivered = len(hook.received)
        async with httpx.AsyncClient() as http:
            scrape = await http.get(served.url + "/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = _samples(scrape.text)
    requests = "a2a_server_requests_total"
    assert _value(samples, requests, operation="SendMessage", binding="jsonrpc", outcome="ok") == 5
    assert _value(samples, requests, operation="SendStreamingMessage", binding="rest", outcome="ok") == 1
    assert _value(samples, requests, operation="GetTask", binding="jsonrpc", outcome="-32001") == 1
    assert _value(samples, requests, operation="CancelTask", binding="jsonrpc", outcome="ok") == 1
    assert sum(v for (name, _), v in samples.items() if name == requests) == 8
    duration = "a2a_server_request_duration_seconds_count"
    assert _value(samples, duration, operation="SendMessage", binding="jsonrpc") == 5
    assert _value(samples, "a2a_server_executions_total", state="COMPLETED") == 5
    assert _value(samples, "a2a_server_executions_total", state="CANCELED") == 1
    assert _value(samples, "a2a_server_execution_duration_seconds_count") == 6
    # Tasks by state is a gauge of where the tasks are now: each went through WORKING (the @agent wrapper starts its
    # task there), none is still there.
    tasks = {labels: v for (name, labels), v in samples.items() if name == "a2a_server_tasks"}
    assert tasks == {
        frozenset({("state", "COMPLETED")}): 5,
        frozenset({("state", "CANCELED")}): 1,
        frozenset({("state", "WORKING")}): 0,
    }, tasks
    assert _value(samples, "a2a_server_executions_active") == 0
    assert _value(samples, "a2a_server_stream_subscribers") == 0
    ttfe = "a2a_server_stream_time_to_first_event_seconds_count"
    assert _value(samples, ttfe, operation="SendStreamingMessage", binding="rest") == 1
    assert delivered >= 3  # the task, its artifact, COMPLETED (push_events="all")
    assert _value(samples, "a2a_push_deliveries_total", outcome="delivered") == delivered
    assert _value(samples, "a2a_push_deliveries_total", outcome="dead") == 0
    assert _value(samples, "a2a_push_outbox_backlog") == 0


async def test_no_metrics_route_unless_asked() -> None:
    async with serve_agent(new_telemetry(None)) as served, httpx.AsyncClient() as http:
        assert (await http.get(served.url + "/metrics")).status_code == 404


def test_tasks_by_state_follows_a_task_across_live_copies() -> None:
    """A task that waits for input is dropped from memory and loaded again for the next message: the gauge moves
    it out of INPUT_REQUIRED then, and repeated writes in one state count once."""
    telemetry = Telemetry(tracing=False, metrics=Metrics())
    first = SimpleNamespace(task_id="t1", state_seen="")
    for state in ("WORKING", "WORKING", "INPUT_REQUIRED"):
        telemetry.task_state(first, state)
    again = SimpleNamespace(task_id="t1", state_seen="")  # the next message's live copy
    for state in ("WORKING", "COMPLETED", "COMPLETED"):
        telemetry.task_state(again, state)
    assert telemetry.metrics is not None
    samples = _samples(telemetry.metrics.render_sync())
    assert {labels: v for (name, labels), v in samples.items() if name == "a2a_server_tasks"} == {
        frozenset({("state", "WORKING")}): 0,
        frozenset({("state", "INPUT_REQUIRED")}): 0,
        frozenset({("state", "COMPLETED")}): 1,
    }
