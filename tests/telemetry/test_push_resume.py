"""A push notification whose delivery outlives the process (retried after a restart from the durable outbox) stays
in the trace of the request that produced it: the stored traceparent is the resumed attempt's parent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from otel_helpers import Spans, new_telemetry, serve_agent, webhook

from relaykit.client import Client
from relaykit.push import DeliveryPolicy
from relaykit.types import Task, TaskPushNotificationConfig


async def test_a_delivery_resumed_after_a_restart_is_a_child_of_the_original_execution(
    spans: Spans, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    policy = DeliveryPolicy(backoff=0.05, max_backoff=0.2, max_attempts=1000, jitter=0.0)
    async with webhook() as hook:
        hook.status = 503  # down while the first process runs: every attempt is retried
        async with serve_agent(new_telemetry(spans), store=store, push_policy=policy) as first:
            async with Client(first.url, transports=["JSONRPC"]) as client:
                task = await client.send("hello", push=TaskPushNotificationConfig(url=hook.url))
            assert isinstance(task, Task)
            async with asyncio.timeout(10), hook.arrived:
                await hook.arrived.wait_for(lambda: hook.refused >= 1)
        before = spans.finished()
        [execute] = [s for s in before if s.name == "a2a.execute"]
        assert not [s for s in before if s.name == "a2a.push.deliver" and s.attributes.get("a2a.push.resumed")]
        spans.clear()
        hook.status = 200
        async with serve_agent(new_telemetry(spans), store=store, push_policy=policy) as second:
            received = await hook.wait_for(1)
            await second.server.push_sender.drained()
    resumed = [s for s in spans.finished() if s.name == "a2a.push.deliver"]
    assert resumed
    for span in resumed:
        assert span.attributes["a2a.push.resumed"] is True
        assert span.attributes["a2a.task.id"] == task.id
        assert span.parent is not None
        assert span.parent.span_id == execute.context.span_id
        assert span.context.trace_id == execute.context.trace_id
    for headers, _body in received:
        _version, trace_id, _span_id, _flags = headers["traceparent"].split("-")
        assert int(trace_id, 16) == execute.context.trace_id
