"""The JavaScript SDK's A2A 0.3 line (@a2a-js/sdk 0.3.14, node) as a client of relaykit's dual-stack server, on the
bindings its client offers (JSON-RPC, HTTP+JSON and gRPC, the last from its ``client/grpc`` entry point, dialling
the card's 0.3 ``additionalInterfaces`` entry with transport "GRPC"): send, stream, get, multi-turn input-required,
cancel (and a refused second cancel), resubscribe, push config set/get/list/delete with one delivery to its own
webhook, and a missing task as its TaskNotFound error class.

The other direction (relaykit's Client against an @a2a-js/sdk 0.3 agent) is in ``test_client_against_sdk03.py``.
Needs ``node``; the SDK comes from npm once and is cached (``support.jssdk``); skipped with the reason when node or
the registry is missing, failed under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.servers import ServerProcess

pytestmark = pytest.mark.interop

SCRIPT = Path(__file__).parent / "js" / "sdk03_client.mjs"
TIMEOUT = 180.0  # the whole script; each step inside is bounded by 20 s
TRANSPORT_CLASS = {"JSONRPC": "_JsonRpcTransport", "HTTP+JSON": "_RestTransport", "GRPC": "_GrpcTransport"}


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON", "GRPC"], ids=["jsonrpc", "rest", "grpc"])
def test_js_sdk03_client_against_relaykit(js_sdk03: Path, dual_server: ServerProcess, transport: str) -> None:
    node = shutil.which("node")
    assert node is not None  # js_sdk03 skipped (or failed under CI) otherwise
    done = subprocess.run(
        [node, str(SCRIPT), dual_server.url, transport],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "A2A_JS_SDK03_DIR": str(js_sdk03)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in report, report["error"]
    assert report["transportClass"] == TRANSPORT_CLASS[transport]
    assert report["send"] == {"kind": "task", "state": "completed", "artifact": "hello"}
    assert report["get"] == {"id": True, "state": "completed", "history": 1}
    assert report["stream"] == [
        "task:submitted",
        "status-update:working",
        "chunk 0",
        "chunk 1",
        "chunk 2",
        "status-update:completed:final",
    ]
    assert report["ask"] == {"state": "input-required", "question": "What is your name?"}
    assert report["answer"]["sameTask"] is True
    assert report["answer"]["state"] == "completed"
    assert "got: Ada" in report["answer"]["text"]
    assert report["cancel"] == {"state": "canceled"}
    assert report["cancelAgain"].startswith("TaskNotCancelable")
    assert report["resubscribe"]["last"] == "completed"
    assert report["resubscribe"]["final"] is True
    chunks = report["resubscribe"]["chunks"]
    assert chunks == sorted(set(chunks), key=chunks.index)  # each chunk once
    assert chunks[-1] == "slow 3"
    assert report["push"] == {
        "set": [True, "hook-1", True],
        "get": ["hook-1", "tok-1"],
        "list": ["hook-1"],
        "delivery": {"token": "tok-1", "kind": "task", "id": True},  # the 0.3 payload: the Task, with its kind
        "after": 0,
    }
    assert report["missing"].startswith("TaskNotFound")
