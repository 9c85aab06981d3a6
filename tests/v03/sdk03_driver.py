"""Drives a relaykit server with the official a2a-sdk 0.3.26 client, over one binding, and prints a JSON report.

Runs in the a2a-sdk 0.3.26 virtual environment the tests create (``tests/v03/conftest.py``), never in relaykit's:

    python sdk03_driver.py URL JSONRPC|HTTP+JSON|GRPC

Every operation of A2A 0.3 goes through the SDK (its client where it has the call, else its transport's wire types:
0.3 clients have no push-config list/delete, so those go out as the SDK's own request types). A webhook receiver
runs in this process on 127.0.0.1 and parses what it receives with the SDK's ``Task`` model (a 0.3 receiver). Each
step's outcome goes into the report; the test asserts on it. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import traceback
import uuid
from typing import Any

import grpc
import httpx
import uvicorn
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.grpc import a2a_pb2, a2a_pb2_grpc
from a2a.types import (
    DeleteTaskPushNotificationConfigParams,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigParams,
    ListTaskPushNotificationConfigParams,
    ListTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigResponse,
    Message,
    Part,
    PushNotificationAuthenticationInfo,
    PushNotificationConfig,
    Role,
    Task,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TextPart,
    TransportProtocol,
)
from google.protobuf.json_format import ParseDict

STEP = 20.0  # seconds any one step may take
RECEIVED: list[dict[str, Any]] = []
DELIVERED = asyncio.Event()


def _message(text: str, task_id: str | None = None, context_id: str | None = None) -> Message:
    return Message(
        role=Role.user,
        parts=[Part(root=TextPart(text=text))],
        message_id=str(uuid.uuid4()),
        task_id=task_id,
        context_id=context_id,
    )


def _error(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(exc).__name__, "text": str(exc)[:300]}
    err = getattr(exc, "error", None)
    if err is not None and hasattr(err, "code"):
        out["code"] = err.code
    status = getattr(exc, "status_code", None)
    if status is not None:
        out["status"] = status
    if isinstance(exc, grpc.aio.AioRpcError):
        out["grpc"] = exc.code().name
    cause = exc.__cause__
    if isinstance(cause, grpc.aio.AioRpcError):
        out["grpc"] = cause.code().name
    return out


async def _webhook(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    entry: dict[str, Any] = {"token": headers.get("x-a2a-notification-token"), "type": headers.get("content-type")}
    try:
        task = Task.model_validate_json(body)  # the SDK's own 0.3 model: kind "task", lower-case states
        entry["state"] = task.status.state.value
        entry["kind"] = task.kind
    except Exception as exc:
        entry["invalid"] = str(exc)[:300]
    RECEIVED.append(entry)
    if entry.get("state") == "completed":
        DELIVERED.set()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def _events(stream: Any, limit: int = 200) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(STEP):
        async for item in stream:
            if isinstance(item, Message):
                out.append({"kind": "message", "text": item.parts[0].root.text})
                continue
            task, update = item
            if update is None:
                out.append({"kind": "task", "state": task.status.state.value, "id": task.id})
            elif update.kind == "status-update":
                out.append({"kind": update.kind, "state": update.status.state.value, "final": update.final})
            else:
                out.append(
                    {
                        "kind": update.kind,
                        "text": update.artifact.parts[0].root.text,
                        "append": update.append,
                        "last": update.last_chunk,
                    }
                )
            if len(out) >= limit:
                break
    return out


def _task(task: Task) -> dict[str, Any]:
    return {
        "kind": task.kind,
        "id": task.id,
        "context": task.context_id,
        "state": task.status.state.value,
        "artifacts": [p.root.text for a in task.artifacts or [] for p in a.parts if hasattr(p.root, "text")],
        "history": len(task.history or []),
    }


async def run(url: str, transport: str) -> dict[str, Any]:
    report: dict[str, Any] = {}
    # Bound here and handed to uvicorn: a port probed then released could be taken before uvicorn binds it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # a push that comes early waits in the backlog
    hook = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    server = uvicorn.Server(uvicorn.Config(_webhook, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    http = httpx.AsyncClient(timeout=STEP)
    try:
        card = await A2ACardResolver(http, url).get_agent_card()
        report["card"] = {
            "protocol_version": card.protocol_version,
            "url": card.url,
            "preferred": card.preferred_transport,
            "transports": [i.transport for i in card.additional_interfaces or []],
        }
        kind = {"JSONRPC": TransportProtocol.jsonrpc, "HTTP+JSON": TransportProtocol.http_json}.get(
            transport, TransportProtocol.grpc
        )

        def client(*, streaming: bool, polling: bool = False) -> Any:
            config = ClientConfig(
                streaming=streaming,
                polling=polling,
                httpx_client=http,
                supported_transports=[kind],
                grpc_channel_factory=grpc.aio.insecure_channel,
            )
            return ClientFactory(config).create(card)

        blocking, streaming, polling = (
            client(streaming=False),
            client(streaming=True),
            client(streaming=False, polling=True),
        )
        report["transport_class"] = type(blocking._transport).__name__

        # message/send: a task, and a bare message
        events = await _events(blocking.send_message(_message("hello")))
        report["send"] = events
        task_id = events[0]["id"]
        report["send_message_reply"] = await _events(blocking.send_message(_message("message hi")))

        # tasks/get with and without history
        async with asyncio.timeout(STEP):
            report["get"] = _task(await blocking.get_task(TaskQueryParams(id=task_id)))
            report["get_history_1"] = _task(await blocking.get_task(TaskQueryParams(id=task_id, history_length=1)))

        # message/stream
        report["stream"] = await _events(streaming.send_message(_message("stream 5")))

        # multi-turn: input-required, then the answer on the same task
        first = await _events(blocking.send_message(_message("ask me")))
        report["ask"] = first
        asked = first[-1]
        async with asyncio.timeout(STEP):
            asked_task = await blocking.get_task(TaskQueryParams(id=asked["id"]))
        report["ask_question"] = asked_task.status.message.parts[0].root.text if asked_task.status.message else None
        report["answer"] = await _events(
            streaming.send_message(_message("Ada", task_id=asked_task.id, context_id=asked_task.context_id))
        )
        async with asyncio.timeout(STEP):
            report["answered"] = _task(await blocking.get_task(TaskQueryParams(id=asked_task.id)))

        # cancel a running task; a second cancel is refused
        slow = (await _events(polling.send_message(_message("slow 100"))))[0]
        async with asyncio.timeout(STEP):
            report["cancel"] = _task(await blocking.cancel_task(TaskIdParams(id=slow["id"])))
            try:
                await blocking.cancel_task(TaskIdParams(id=slow["id"]))
                report["cancel_again"] = {"type": "no error"}
            except Exception as exc:
                report["cancel_again"] = _error(exc)

        # tasks/resubscribe to a running task, to its end
        running = (await _events(polling.send_message(_message("slow 4"))))[0]
        report["resubscribe"] = await _events(streaming.resubscribe(TaskIdParams(id=running["id"])))

        # push config CRUD with a delivery in the 0.3 shape
        target = (await _events(polling.send_message(_message("slow 8"))))[0]["id"]
        config = TaskPushNotificationConfig(
            task_id=target,
            push_notification_config=PushNotificationConfig(
                id="hook-1",
                url=hook,
                token="tok-1",
                authentication=PushNotificationAuthenticationInfo(schemes=["Bearer"], credentials="cred"),
            ),
        )
        async with asyncio.timeout(STEP):
            created = await blocking.set_task_callback(config)
            report["push_set"] = created.model_dump(mode="json", exclude_none=True)
            got = await blocking.get_task_callback(
                GetTaskPushNotificationConfigParams(id=target, push_notification_config_id="hook-1")
            )
            report["push_get"] = got.model_dump(mode="json", exclude_none=True)
            report["push_list"] = await _list_configs(transport, url, card, http, target)
            await asyncio.wait_for(DELIVERED.wait(), STEP)
            report["push_received"] = list(RECEIVED)
            await _delete_config(transport, url, card, http, target, "hook-1")
            report["push_list_after_delete"] = await _list_configs(transport, url, card, http, target)

        # errors
        async with asyncio.timeout(STEP):
            try:
                await blocking.get_task(TaskQueryParams(id="no-such-task"))
                report["error_not_found"] = {"type": "no error"}
            except Exception as exc:
                report["error_not_found"] = _error(exc)
            try:
                await blocking.cancel_task(TaskIdParams(id="no-such-task"))
                report["error_cancel_not_found"] = {"type": "no error"}
            except Exception as exc:
                report["error_cancel_not_found"] = _error(exc)
            try:
                await _events(blocking.send_message(_message("more", task_id=task_id)))
                report["error_terminal_send"] = {"type": "no error"}
            except Exception as exc:
                report["error_terminal_send"] = _error(exc)
            # the streaming methods: an error before the first event (0.3 JSON-RPC sends it as the one SSE event)
            try:
                await _events(streaming.resubscribe(TaskIdParams(id="no-such-task")))
                report["error_resubscribe_not_found"] = {"type": "no error"}
            except Exception as exc:
                report["error_resubscribe_not_found"] = _error(exc)
            try:
                await _events(streaming.send_message(_message("more", task_id=task_id)))
                report["error_terminal_stream"] = {"type": "no error"}
            except Exception as exc:
                report["error_terminal_stream"] = _error(exc)
        for c in (blocking, streaming, polling):
            await c.close()
    except Exception as exc:
        report["crash"] = traceback.format_exc()[-3000:]
        report["crash_type"] = type(exc).__name__
    finally:
        await http.aclose()
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
    return report


async def _list_configs(transport: str, url: str, card: Any, http: httpx.AsyncClient, task_id: str) -> list[str]:
    if transport == "JSONRPC":
        request = ListTaskPushNotificationConfigRequest(
            id="l1", params=ListTaskPushNotificationConfigParams(id=task_id)
        )
        response = await http.post(card.url, json=request.model_dump(mode="json", exclude_none=True))
        parsed = ListTaskPushNotificationConfigResponse.model_validate(response.json())
        return [c.push_notification_config.id or "" for c in parsed.root.result]
    if transport == "HTTP+JSON":
        base = _iface(card, "HTTP+JSON")
        response = await http.get(f"{base.rstrip('/')}/v1/tasks/{task_id}/pushNotificationConfigs")
        response.raise_for_status()
        message = ParseDict(response.json(), a2a_pb2.ListTaskPushNotificationConfigResponse())
        return [c.push_notification_config.id for c in message.configs]
    async with grpc.aio.insecure_channel(_iface(card, "GRPC")) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        answer = await stub.ListTaskPushNotificationConfig(
            a2a_pb2.ListTaskPushNotificationConfigRequest(parent=f"tasks/{task_id}")
        )
        return [c.push_notification_config.id for c in answer.configs]


async def _delete_config(
    transport: str, url: str, card: Any, http: httpx.AsyncClient, task_id: str, config_id: str
) -> None:
    if transport == "JSONRPC":
        request = DeleteTaskPushNotificationConfigRequest(
            id="d1", params=DeleteTaskPushNotificationConfigParams(id=task_id, push_notification_config_id=config_id)
        )
        response = await http.post(card.url, json=request.model_dump(mode="json", exclude_none=True))
        assert "error" not in response.json(), response.text
        return
    if transport == "HTTP+JSON":
        base = _iface(card, "HTTP+JSON")
        response = await http.delete(f"{base.rstrip('/')}/v1/tasks/{task_id}/pushNotificationConfigs/{config_id}")
        response.raise_for_status()
        return
    async with grpc.aio.insecure_channel(_iface(card, "GRPC")) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        await stub.DeleteTaskPushNotificationConfig(
            a2a_pb2.DeleteTaskPushNotificationConfigRequest(name=f"tasks/{task_id}/pushNotificationConfigs/{config_id}")
        )


def _iface(card: Any, transport: str) -> str:
    for interface in card.additional_interfaces or []:
        if interface.transport == transport:
            return str(interface.url)
    raise LookupError(f"the card lists no {transport} interface")


if __name__ == "__main__":
    result = asyncio.run(run(sys.argv[1], sys.argv[2]))
    print(json.dumps(result))
