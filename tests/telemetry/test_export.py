"""Spans leave ``relaykit serve --otel`` processes through the real OTLP/HTTP exporter into a receiver process, and one
trace runs from a caller through two replicas (PostgreSQL store, Redis work queue) to the webhook receiver."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from otel_helpers import webhook
from prometheus_client.parser import text_string_to_metric_families
from support.servers import ServerProcess, start_process, start_serve, stop_all

RECEIVER = Path(__file__).with_name("otlp_receiver.py")
WAIT = 15.0  # seconds for spans to be exported (the batch processor's delay is 50 ms here)
SERVER_KIND = 2  # OTLP SpanKind: SPAN_KIND_SERVER
CLIENT_KIND = 3


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[ServerProcess]:
    process = start_process(
        lambda port: [sys.executable, str(RECEIVER), str(port)], tmp_path, name="otlp-receiver", ready_path="/_ready"
    )
    yield process
    stop_all([process])


def _otel_env(receiver: ServerProcess, service: str) -> dict[str, str | None]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        "OTEL_TRACES_SAMPLER": None,
    }


async def _exported(receiver: ServerProcess, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll the receiver process (another process: polling is the way) until ``done`` holds, bounded."""
    deadline = time.monotonic() + WAIT
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            seen: dict[str, Any] = (await http.get(receiver.url + "/_spans")).json()
            if done(seen):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f"not exported within {WAIT}s: {[s['name'] for s in seen['spans']]}")
            await asyncio.sleep(0.05)


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


async def _send(url: str, text: str, traceparent: str, **configuration: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "message": {"role": "ROLE_USER", "messageId": secrets.token_hex(8), "parts": [{"text": text}]}
    }
    if configuration:
        params["configuration"] = configuration
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.post(
            url + "/",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params},
            headers={"A2A-Version": "1.0", "traceparent": traceparent},
        )
    result: dict[str, Any] = reply.json()["result"]
    return result


async def test_spans_and_metrics_reach_a_real_otlp_receiver(receiver: ServerProcess, tmp_path: Path) -> None:
    server = start_serve("examples/echo.py", tmp_path, args=["--otel"], env=_otel_env(receiver, "relaykit-export"))
    traceparent, trace_id, caller = _traceparent()
    try:
        task = (await _send(server.url, "hello", traceparent))["task"]
        seen = await _exported(
            receiver,
            lambda s: (
                any(x["name"] == "a2a.execute" for x in s["spans"])
                and any(x["name"] == "SendMessage" for x in s["spans"])
                and "a2a.server.requests" in s["metrics"]
            ),
        )
    finally:
        server.stop()
    [send] = [s for s in seen["spans"] if s["name"] == "SendMessage"]
    assert send["service"] == "relaykit-export"
    assert send["kind"] == SERVER_KIND
    assert send["trace_id"] == trace_id
    assert send["parent_span_id"] == caller
    assert send["attributes"]["a2a.task.id"] == task["id"]
    assert send["attributes"]["a2a.binding"] == "jsonrpc"
    assert send["attributes"]["a2a.task.state"] == "COMPLETED"
    [execute] = [s for s in seen["spans"] if s["name"] == "a2a.execute"]
    assert execute["parent_span_id"] == send["span_id"]
    assert "a2a.server.request.duration" in seen["metrics"]


@pytest.mark.postgres
@pytest.mark.redis
async def test_one_trace_from_the_caller_through_two_replicas_to_the_webhook(
    receiver: ServerProcess, cluster_namespace: str, postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    common = ["--namespace", cluster_namespace, "--push-allow", "127.0.0.1", "--otel", "--metrics"]
    # The accepting replica runs no queued work: the execution is the other replica's, reached through Redis.
    front = start_serve(
        "examples/echo.py",
        tmp_path,
        store=postgres_url,
        bus=redis_url,
        args=[*common, "--no-worker"],
        env=_otel_env(receiver, "replica-front"),
        name="front",
    )
    worker: ServerProcess | None = None
    try:
        worker = start_serve(
            "examples/echo.py",
            tmp_path,
            store=postgres_url,
            bus=redis_url,
            args=common,
            env=_otel_env(receiver, "replica-worker"),
            name="worker",
        )
        traceparent, trace_id, caller = _traceparent()
        async with webhook() as hook:
            result = await _send(front.url, "hello", traceparent, taskPushNotificationConfig={"url": hook.url})
            task = result["task"]
            received = await hook.wait_for(3)
        seen = await _exported(receiver, lambda s: sum(x["name"] == "a2a.push.deliver" for x in s["spans"]) >= 3)
        async with httpx.AsyncClient(timeout=5) as http:
            scrape = (await http.get(front.url + "/metrics")).text
    finally:
        stop_all([front, *([worker] if worker else [])])
    spans = [s for s in seen["spans"] if s["trace_id"] == trace_id]
    assert {s["trace_id"] for s in seen["spans"]} == {trace_id}
    [send] = [s for s in spans if s["name"] == "SendMessage"]
    assert send["service"] == "replica-front"
    assert send["parent_span_id"] == caller
    assert send["attributes"]["a2a.task.id"] == task["id"]
    [execute] = [s for s in spans if s["name"] == "a2a.execute"]
    assert execute["service"] == "replica-worker"
    assert execute["parent_span_id"] == send["span_id"]  # across the Redis work queue
    deliveries = [s for s in spans if s["name"] == "a2a.push.deliver"]
    assert deliveries
    for delivery in deliveries:
        # Every span in the message: which notification went out where tells a takeover from a duplicate.
        assert delivery["service"] == "replica-worker", (deliveries, [b[:200] for _h, b in received])
        assert delivery["kind"] == CLIENT_KIND
        assert delivery["parent_span_id"] == execute["span_id"]
    delivery_ids = {d["span_id"] for d in deliveries}
    for headers, _body in received:
        _version, hook_trace, hook_parent, _flags = headers["traceparent"].split("-")
        assert hook_trace == trace_id
        assert hook_parent in delivery_ids
    # The scale-out gauges: the queue is empty once the message ran.
    gauges = {
        sample.name: sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name in ("a2a_queue_depth", "a2a_queue_lag_seconds")
    }
    assert gauges == {"a2a_queue_depth": 0.0, "a2a_queue_lag_seconds": 0.0}
    assert os.environ.get("OTEL_SERVICE_NAME") is None  # nothing leaked into the test process
