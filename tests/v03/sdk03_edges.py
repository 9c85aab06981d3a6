"""Drives relaykit servers with the official a2a-sdk 0.3.26 client past the happy path and prints a JSON report.

Runs in the a2a-sdk 0.3.26 virtual environment (``tests/v03/conftest.py``), never in relaykit's:

    python sdk03_edges.py DUAL_URL STRICT_URL REQUIRED_EXTENSION

``DUAL_URL`` serves the kitchen (no extended card); ``STRICT_URL`` the kitchen requiring ``REQUIRED_EXTENSION``.
Each step goes through the SDK's client where it has the call, else its own request and response types on the
wire; its outcome goes into the report, which ``test_sdk03_edges.py`` asserts on. Every wait is bounded.

* file parts with a name, and part metadata, sent and read back on each transport;
* ``tasks/pushNotificationConfig/get`` in its TaskIdParams form (the task id only);
* ``agent/getAuthenticatedExtendedCard`` (and ``GET /v1/card``) on an agent without an extended card;
* the streaming methods refused before the handler (invalid params, unsupported version, a required extension
  missing): the SDK must report the JSON-RPC error and its code, not an invalid SSE response;
* the extensions the agent activated, echoed in ``X-A2A-Extensions``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import traceback
import uuid
from typing import Any

import grpc
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    FilePart,
    FileWithBytes,
    FileWithUri,
    GetAuthenticatedExtendedCardRequest,
    GetAuthenticatedExtendedCardResponse,
    GetTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigResponse,
    Message,
    Part,
    PushNotificationConfig,
    Role,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TextPart,
    TransportProtocol,
)

STEP = 20.0  # seconds any one step may take
TRANSPORTS = {
    "JSONRPC": TransportProtocol.jsonrpc,
    "HTTP+JSON": TransportProtocol.http_json,
    "GRPC": TransportProtocol.grpc,
}


def _message(parts: list[Part], task_id: str | None = None) -> Message:
    return Message(role=Role.user, parts=parts, message_id=str(uuid.uuid4()), task_id=task_id)


def _text(text: str) -> list[Part]:
    return [Part(root=TextPart(text=text))]


def _error(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(exc).__name__, "text": str(exc)[:300]}
    err = getattr(exc, "error", None)
    if err is not None and hasattr(err, "code"):
        out["code"] = err.code
        out["message"] = err.message
    return out


async def _first_event(stream: Any) -> dict[str, Any]:
    """The outcome of a stream the server should refuse: the error the SDK raised, or what it yielded instead."""
    try:
        async with asyncio.timeout(STEP):
            async for _ in stream:
                return {"type": "no error"}
        return {"type": "no error", "empty": True}
    except Exception as exc:
        return _error(exc)


def _client(card: Any, http: httpx.AsyncClient, transport: str, *, streaming: bool, polling: bool = False) -> Any:
    config = ClientConfig(
        streaming=streaming,
        polling=polling,
        httpx_client=http,
        supported_transports=[TRANSPORTS[transport]],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    return ClientFactory(config).create(card)


async def _files(card: Any, http: httpx.AsyncClient, transport: str) -> list[dict[str, Any]]:
    """A message with named file parts and part metadata, sent and read back from the task's history."""
    client = _client(card, http, transport, streaming=False)
    parts = [
        Part(root=TextPart(text="files", metadata={"pm": "text"})),
        Part(
            root=FilePart(
                file=FileWithBytes(bytes=base64.b64encode(b"abc").decode(), mime_type="text/plain", name="notes.txt"),
                metadata={"pm": "bytes"},
            )
        ),
        Part(root=FilePart(file=FileWithUri(uri="https://files.example.com/a.txt", name="a.txt"))),
    ]
    async with asyncio.timeout(STEP):
        task_id = ""
        async for item in client.send_message(_message(parts)):
            task_id = item[0].id
        task = await client.get_task(TaskQueryParams(id=task_id))
    sent = next(m for m in task.history or [] if m.role == Role.user)
    out = []
    for part in sent.parts:
        root = part.root
        file = getattr(root, "file", None)
        out.append({"kind": root.kind, "name": getattr(file, "name", None), "metadata": root.metadata})
    return out


async def _rpc(http: httpx.AsyncClient, url: str, request: Any, headers: dict[str, str] | None = None) -> Any:
    response = await http.post(url, json=request.model_dump(mode="json", exclude_none=True), headers=headers)
    return response.json()


async def _push_get_by_task(card: Any, http: httpx.AsyncClient) -> dict[str, Any]:
    """``tasks/pushNotificationConfig/get`` with TaskIdParams: no config, an older one, then one with the task's id.

    (The SDK's clients share the driver's HTTP client: they are not closed one by one, which would close it.)
    """
    polling = _client(card, http, "JSONRPC", streaming=False, polling=True)
    out: dict[str, Any] = {}

    async def get_by_task(task_id: str) -> Any:
        request = GetTaskPushNotificationConfigRequest(id=str(uuid.uuid4()), params=TaskIdParams(id=task_id))
        return GetTaskPushNotificationConfigResponse.model_validate(await _rpc(http, card.url, request)).root

    async with asyncio.timeout(STEP):
        task_id = ""
        async for item in polling.send_message(_message(_text("slow 100"))):
            task_id = item[0].id
        out["task"] = task_id
        none = await get_by_task(task_id)
        out["none"] = {"code": none.error.code} if hasattr(none, "error") else {"id": "unexpected"}
        hook = "http://127.0.0.1:9/hook"
        for config_id in ("hook-a", None):  # the second gets the task id (0.3's default)
            config = PushNotificationConfig(id=config_id, url=hook)
            await polling.set_task_callback(
                TaskPushNotificationConfig(task_id=task_id, push_notification_config=config)
            )
            answer = await get_by_task(task_id)
            result = getattr(answer, "result", None)
            out["after_hook-a" if config_id else "after_default"] = (
                {"id": result.push_notification_config.id, "task_matches": result.task_id == task_id}
                if result is not None
                else {"error": answer.error.code}
            )
        await polling.cancel_task(TaskIdParams(id=task_id))
    return out


async def _extended_card(card: Any, http: httpx.AsyncClient) -> dict[str, Any]:
    request = GetAuthenticatedExtendedCardRequest(id="c1")
    async with asyncio.timeout(STEP):
        answer = GetAuthenticatedExtendedCardResponse.model_validate(await _rpc(http, card.url, request)).root
        rest = await http.get(f"{_iface(card, 'HTTP+JSON').rstrip('/')}/v1/card")
    return {
        "jsonrpc": answer.error.code if hasattr(answer, "error") else "no error",
        "rest_status": rest.status_code,
    }


async def _refused_streams(card: Any, strict_card: Any, required: str) -> dict[str, Any]:
    """The streaming methods refused before their handler, each through the SDK's JSON-RPC streaming client."""
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=STEP) as http:
        streaming = _client(card, http, "JSONRPC", streaming=True)
        # A message without parts: 0.3's schema (and so the SDK) lets it through, relaykit refuses it (-32602).
        out["stream_invalid_params"] = await _first_event(streaming.send_message(_message([])))
    async with httpx.AsyncClient(timeout=STEP, headers={"A2A-Version": "0.9"}) as http:
        streaming = _client(card, http, "JSONRPC", streaming=True)
        out["stream_bad_version"] = await _first_event(streaming.send_message(_message(_text("hi"))))
        out["resubscribe_bad_version"] = await _first_event(streaming.resubscribe(TaskIdParams(id="any-task")))
    seen: list[dict[str, str]] = []

    async def keep_headers(response: httpx.Response) -> None:
        seen.append({k: v for k, v in response.headers.items() if "extensions" in k.lower()})

    async with httpx.AsyncClient(timeout=STEP, event_hooks={"response": [keep_headers]}) as http:
        streaming = _client(strict_card, http, "JSONRPC", streaming=True)
        out["stream_extension_missing"] = await _first_event(streaming.send_message(_message(_text("hi"))))
        out["resubscribe_extension_missing"] = await _first_event(streaming.resubscribe(TaskIdParams(id="any-task")))
        seen.clear()
        events: list[str] = []
        async with asyncio.timeout(STEP):
            async for item in streaming.send_message(_message(_text("hi")), extensions=[required]):
                events.append(item[0].status.state.value if isinstance(item, tuple) else "message")
        out["stream_with_extension"] = {"states": events, "headers": list(seen)}
        blocking = _client(strict_card, http, "JSONRPC", streaming=False)
        seen.clear()
        async with asyncio.timeout(STEP):
            async for _ in blocking.send_message(_message(_text("hi")), extensions=[required]):
                pass
        out["send_with_extension_headers"] = list(seen)
    return out


def _iface(card: Any, transport: str) -> str:
    for interface in card.additional_interfaces or []:
        if interface.transport == transport:
            return str(interface.url)
    raise LookupError(f"the card lists no {transport} interface")


async def run(url: str, strict_url: str, required: str) -> dict[str, Any]:
    report: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(timeout=STEP) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
            strict_card = await A2ACardResolver(http, strict_url).get_agent_card()
            report["files"] = {t: await _files(card, http, t) for t in TRANSPORTS}
            report["push_get_by_task"] = await _push_get_by_task(card, http)
            report["extended_card"] = await _extended_card(card, http)
        report.update(await _refused_streams(card, strict_card, required))
    except Exception as exc:
        report["crash"] = traceback.format_exc()[-3000:]
        report["crash_type"] = type(exc).__name__
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(sys.argv[1], sys.argv[2], sys.argv[3]))))
