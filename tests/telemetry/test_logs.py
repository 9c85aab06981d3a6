"""``--log-format json``: every line of a ``relaykit serve`` process is one JSON object, access and engine lines carry
the task id (and context id, and the caller's X-Request-Id), no credential appears anywhere; in-process, lines logged
inside a traced request carry its trace id and span id."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
from otel_helpers import Spans, new_telemetry, serve_agent
from support.servers import start_serve

from relaykit.client import Client
from relaykit.telemetry import JSONFormatter
from relaykit.types import Task, TaskState

AGENT = """
from relaykit import agent

@agent
async def app(context):
    if context.text == "boom":
        raise RuntimeError("the agent broke")
    return "ok"
"""
SECRETS = ("s3cret-bearer-token", "s3cret-api-key", "s3cret-push-credentials", "s3cret-push-token", "s3cret-cookie")


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _message(text: str, mid: str) -> dict[str, Any]:
    return {"message": {"role": "ROLE_USER", "messageId": mid, "parts": [{"text": text}]}}


def test_serve_json_lines_with_task_ids_and_no_credentials(tmp_path: Path) -> None:
    target = tmp_path / "agent.py"
    target.write_text(AGENT)
    server = start_serve(
        f"{target}:app",
        tmp_path,
        args=["--log-format", "json", "--access-log", "--push-allow", "127.0.0.1"],
        log_level="info",
    )
    headers = {
        "A2A-Version": "1.0",
        "Authorization": "Bearer s3cret-bearer-token",
        "X-API-Key": "s3cret-api-key",
        "Cookie": "session=s3cret-cookie",
        "X-Request-Id": "req-42",
    }
    try:
        with httpx.Client(timeout=10) as http:
            ok = http.post(server.url + "/", json=_rpc("SendMessage", _message("hello", "m-1")), headers=headers)
            task_id = ok.json()["result"]["task"]["id"]
            boom = http.post(server.url + "/", json=_rpc("SendMessage", _message("boom", "m-2")), headers=headers)
            failed = boom.json()["result"]["task"]
            push = {
                "url": "http://127.0.0.1:9/hook?sig=s3cret-push-token",
                "token": "s3cret-push-token",
                "authentication": {"scheme": "Bearer", "credentials": "s3cret-push-credentials"},
            }
            params = {**_message("hello", "m-3"), "configuration": {"taskPushNotificationConfig": push}}
            pushed = http.post(server.url + "/", json=_rpc("SendMessage", params), headers=headers)
            assert "result" in pushed.json(), pushed.text
    finally:
        server.stop()
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    text = server.log_path.read_text()
    for secret in SECRETS:
        assert secret not in text
    # Every log line is one JSON object (the start-up banner on stdout, "relaykit: serving …", is not a log line).
    lines = [json.loads(line) for line in text.splitlines() if line.strip() and not line.startswith("relaykit: ")]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    access = [line for line in lines if line["logger"] == "relaykit.access"]
    assert any(line.get("task_id") == task_id and line.get("request_id") == "req-42" for line in access), access
    broke = [line for line in lines if line["logger"] == "relaykit.engine" and "executor raised" in line["message"]]
    assert broke, lines
    assert broke[0]["task_id"] == failed["id"]
    assert broke[0]["context_id"] == failed["contextId"]
    assert "RuntimeError" in broke[0]["exception"]


async def test_lines_inside_a_traced_request_carry_its_trace_and_span(spans: Spans) -> None:
    records: list[dict[str, Any]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(json.loads(JSONFormatter().format(record)))

    handler = Keep()
    engine_log = logging.getLogger("relaykit.engine")
    engine_log.addHandler(handler)
    try:
        async with serve_agent(new_telemetry(spans)) as served, Client(served.url, transports=["JSONRPC"]) as client:
            task = await client.send("boom")
    finally:
        engine_log.removeHandler(handler)
    assert isinstance(task, Task)
    assert task.status.state is TaskState.FAILED
    [line] = [r for r in records if "executor raised" in r["message"]]
    [execute] = [s for s in spans.finished() if s.name == "a2a.execute"]
    assert line["task_id"] == task.id
    assert line["context_id"] == task.context_id
    assert line["trace_id"] == format(execute.context.trace_id, "032x")
    assert line["span_id"] == format(execute.context.span_id, "016x")


def test_serve_json_lines_carry_the_callers_trace_id_without_an_sdk(tmp_path: Path) -> None:
    # No --otel and no SDK: relaykit makes no spans, but the caller's W3C traceparent names the trace, so the
    # request's lines carry its trace id ("trace_id where known"); a malformed or all-zero one is left out.
    target = tmp_path / "agent.py"
    target.write_text(AGENT)
    server = start_serve(f"{target}:app", tmp_path, args=["--log-format", "json", "--access-log"], log_level="info")
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"A2A-Version": "1.0", "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    try:
        with httpx.Client(timeout=10) as http:
            traced = http.post(server.url + "/", json=_rpc("SendMessage", _message("hello", "m-1")), headers=headers)
            bad = {"A2A-Version": "1.0", "traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"}
            untraced = http.post(server.url + "/", json=_rpc("SendMessage", _message("hello", "m-2")), headers=bad)
    finally:
        server.stop()
    traced_id = traced.json()["result"]["task"]["id"]
    untraced_id = untraced.json()["result"]["task"]["id"]
    text = server.log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip() and not line.startswith("relaykit: ")]
    access = {line.get("task_id"): line for line in lines if line["logger"] == "relaykit.access"}
    assert access[traced_id]["trace_id"] == trace_id, access
    assert "trace_id" not in access[untraced_id], access


SECRET = "sk-live-0f1e2d3c4b5a69788796a5b4c3d2e1f0"


async def test_a_logged_validation_error_shows_no_input_value(caplog: Any) -> None:
    """An unexpected error's traceback is logged, and a pydantic ValidationError in it names the bad field and what
    was wrong, never the value: here an agent puts the caller's text where an A2A model refuses it (on main the
    log read ``input_value='sk-live-…'``). The JSON line has the traceback too, as clean; the caller's error is as
    before."""
    from relaykit import agent
    from relaykit.http._app import create_app
    from relaykit.testing import StreamingASGITransport
    from relaykit.types import TaskStatus

    @agent
    async def strict(context: Any) -> str:
        TaskStatus.model_validate({"state": context.text})  # the caller's text is no state
        return "unreachable"

    app = create_app(strict, store="memory")
    await app.state.relaykit.start()
    try:
        transport = StreamingASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relaykit.test", timeout=10.0) as http:
            with caplog.at_level(logging.ERROR):
                r = await http.post(
                    "/", json=_rpc("SendMessage", _message(SECRET, "m-1")), headers={"A2A-Version": "1.0"}
                )
        failed = r.json()["result"]["task"]
    finally:
        await app.state.relaykit.stop()
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    logged = [record for record in caplog.records if record.exc_info]
    assert logged, "the executor's error was not logged"
    formatted = caplog.text + "".join(JSONFormatter().format(record) for record in logged)
    assert SECRET not in formatted
    assert "ValidationError" in formatted  # what went wrong, and where
    assert "state" in formatted
    assert "[type=enum]" in formatted
    assert SECRET not in json.dumps(failed["status"])
