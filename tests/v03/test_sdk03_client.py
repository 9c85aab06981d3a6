"""The official a2a-sdk 0.3.26 client against a dual-stack relaykit server, on JSON-RPC, HTTP+JSON and gRPC.

One driver run per binding (``sdk03_driver.py``, in the SDK's own environment) performs every A2A 0.3 operation;
the tests read its report: the card the SDK parses, send (task and bare message), get (with history), stream,
multi-turn input-required, cancel (and the refusal of a second one), resubscribe, push config set/get/list/delete
with a delivery the SDK's ``Task`` model accepts, and the error cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.servers import ServerProcess

from v03.conftest import DRIVER, run_driver

pytestmark = pytest.mark.interop

BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
_reports: dict[str, Any] = {}


@pytest.fixture(params=BINDINGS, ids=["jsonrpc", "rest", "grpc"])
def report(request: pytest.FixtureRequest, sdk03: Path, dual_server: ServerProcess) -> Any:
    binding = str(request.param)
    if binding not in _reports:
        _reports[binding] = run_driver(sdk03, DRIVER, dual_server.url, binding)
    result = _reports[binding]
    assert "crash" not in result, result["crash"]
    result["binding"] = binding
    return result


def test_card_and_transport(report: Any) -> None:
    card = report["card"]
    assert card["protocol_version"] == "0.3.0"
    assert card["preferred"] == "JSONRPC"
    assert set(card["transports"]) == {"JSONRPC", "HTTP+JSON", "GRPC"}
    expected = {"JSONRPC": "JsonRpcTransport", "HTTP+JSON": "RestTransport", "GRPC": "GrpcTransport"}
    assert report["transport_class"] == expected[report["binding"]]


def test_send_task_and_message(report: Any) -> None:
    (event,) = report["send"]
    assert event["kind"] == "task"
    assert event["state"] == "completed"
    assert report["get"]["artifacts"] == ["hello"]
    assert report["get"]["kind"] == "task"
    assert report["send_message_reply"] == [{"kind": "message", "text": "you said: hi"}]


def test_get_history_length(report: Any) -> None:
    assert report["get"]["history"] >= 1
    assert report["get_history_1"]["history"] == 1


def test_stream(report: Any) -> None:
    events = report["stream"]
    assert events[0]["kind"] == "task"
    chunks = [e for e in events if e["kind"] == "artifact-update"]
    assert [c["text"] for c in chunks] == [f"chunk {i}" for i in range(5)]
    assert [c["append"] for c in chunks][1:] == [True] * 4
    assert chunks[-1]["last"] is True
    assert events[-1] == {"kind": "status-update", "state": "completed", "final": True}


def test_multi_turn(report: Any) -> None:
    assert report["ask"][-1]["state"] == "input-required"
    assert report["ask_question"] == "What is your name?"
    assert report["answer"][-1]["state"] == "completed"
    assert report["answered"]["state"] == "completed"
    assert "got: Ada" in report["answered"]["artifacts"]


def test_cancel(report: Any) -> None:
    assert report["cancel"]["state"] == "canceled"
    refused = report["cancel_again"]
    assert refused["type"] != "no error"
    if report["binding"] == "JSONRPC":
        assert refused["code"] == -32002
    elif report["binding"] == "HTTP+JSON":
        assert refused["status"] == 409


def test_resubscribe(report: Any) -> None:
    events = report["resubscribe"]
    assert events[0]["kind"] == "task"
    assert events[-1]["state"] == "completed"
    assert events[-1]["final"] is True


def test_push_config_crud_and_delivery(report: Any) -> None:
    created = report["push_set"]["pushNotificationConfig"]
    assert created["id"] == "hook-1"
    assert created["token"] == "tok-1"
    assert report["push_get"]["pushNotificationConfig"]["url"] == created["url"]
    assert report["push_list"] == ["hook-1"]
    received = report["push_received"]
    assert received, "no notification arrived"
    assert all(r.get("kind") == "task" and "invalid" not in r for r in received), received
    assert all(r["token"] == "tok-1" for r in received)
    assert received[-1]["state"] == "completed"
    assert report["push_list_after_delete"] == []


def test_errors(report: Any) -> None:
    not_found = report["error_not_found"]
    binding = report["binding"]
    if binding == "JSONRPC":
        assert not_found["code"] == -32001
        assert report["error_cancel_not_found"]["code"] == -32001
        assert report["error_terminal_send"]["code"] == -32004
        # streaming methods too: the SDK reads only SSE there, so the error arrives as the stream's one event
        assert report["error_resubscribe_not_found"]["code"] == -32001
        assert report["error_terminal_stream"]["code"] == -32004
    elif binding == "HTTP+JSON":
        assert not_found["status"] == 404
        assert report["error_cancel_not_found"]["status"] == 404
    else:
        assert not_found["type"] != "no error"
        assert report["error_terminal_send"]["type"] != "no error"
    assert report["error_resubscribe_not_found"]["type"] != "no error"
    assert report["error_terminal_stream"]["type"] != "no error"
