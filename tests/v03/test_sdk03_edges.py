"""The official a2a-sdk 0.3.26 client against relaykit past the happy path (``sdk03_edges.py``, run in the SDK's own
environment, reports what the SDK saw):

* a file part's ``name`` and a part's ``metadata`` reach relaykit and come back on JSON-RPC, HTTP+JSON and gRPC
  (the 0.3 JSON schema has both, the v0.3.0 proto neither: relaykit's 0.3 proto carries them as the SDK's does);
* ``tasks/pushNotificationConfig/get`` with the task id only (TaskIdParams) answers the task's config whose id is
  the task id, else its oldest, and TaskNotFound when it has none;
* an agent without an extended card answers 0.3's AuthenticatedExtendedCardNotConfiguredError (-32007; REST 404);
* ``message/stream`` / ``tasks/resubscribe`` refused before the handler reach the SDK as the JSON-RPC error with its
  code (sent as the stream's one SSE event), not as an "invalid SSE response";
* activated extensions come back in ``X-A2A-Extensions`` (0.3's header) as well as ``A2A-Extensions``, and the
  -32008 message names ``X-A2A-Extensions``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from client._agents import REQUIRED_EXTENSION
from support.servers import ServerProcess

from v03.conftest import EDGES_DRIVER, run_driver

pytestmark = pytest.mark.interop

_report: dict[str, Any] = {}


@pytest.fixture
def report(sdk03: Path, dual_server: ServerProcess, strict_server: ServerProcess) -> dict[str, Any]:
    if not _report:
        _report.update(run_driver(sdk03, EDGES_DRIVER, dual_server.url, strict_server.url, REQUIRED_EXTENSION))
    assert "crash" not in _report, _report["crash"]
    return _report


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON", "GRPC"])
def test_file_names_and_part_metadata_travel(report: dict[str, Any], transport: str) -> None:
    assert report["files"][transport] == [
        {"kind": "text", "name": None, "metadata": {"pm": "text"}},
        {"kind": "file", "name": "notes.txt", "metadata": {"pm": "bytes"}},
        {"kind": "file", "name": "a.txt", "metadata": None},
    ]


def test_push_config_get_by_task_id_only(report: dict[str, Any]) -> None:
    got = report["push_get_by_task"]
    assert got["none"] == {"code": -32001}
    assert got["after_hook-a"] == {"id": "hook-a", "task_matches": True}  # the only one: the oldest
    assert got["after_default"] == {"id": got["task"], "task_matches": True}  # the one named after the task wins


def test_no_extended_card_is_0_3s_error(report: dict[str, Any]) -> None:
    assert report["extended_card"] == {"jsonrpc": -32007, "rest_status": 404}


@pytest.mark.parametrize(
    ("step", "code"),
    [
        ("stream_invalid_params", -32602),
        ("stream_bad_version", -32009),
        ("resubscribe_bad_version", -32009),
        ("stream_extension_missing", -32008),
        ("resubscribe_extension_missing", -32008),
    ],
)
def test_streaming_refusals_reach_the_sdk_with_their_code(report: dict[str, Any], step: str, code: int) -> None:
    outcome = report[step]
    assert outcome["type"] == "A2AClientJSONRPCError", outcome
    assert outcome["code"] == code


def test_required_extension_message_names_the_0_3_header(report: dict[str, Any]) -> None:
    assert "X-A2A-Extensions" in report["stream_extension_missing"]["message"]


def test_activated_extensions_echoed_in_the_0_3_header(report: dict[str, Any]) -> None:
    both = {"a2a-extensions": REQUIRED_EXTENSION, "x-a2a-extensions": REQUIRED_EXTENSION}
    assert report["send_with_extension_headers"] == [both]
    streamed = report["stream_with_extension"]
    assert streamed["states"][-1] == "completed"
    assert streamed["headers"] == [both]
