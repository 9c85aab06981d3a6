"""A2A 0.3 past the happy path, on the wire: what a 0.3 caller sends and gets back (in-process over ASGI for HTTP,
real sockets for gRPC).

* ``tasks/pushNotificationConfig/get`` naming only the task (0.3's TaskIdParams form, or 0.3 gRPC's ``tasks/{id}``):
  the config whose id is the task id, else the task's oldest; TaskNotFound when it has none. 1.0 still names its
  config;
* the extended card of an agent without one: 0.3's AuthenticatedExtendedCardNotConfiguredError (-32007, REST 404);
  1.0 keeps UnsupportedOperation;
* ``null`` for an absent member of a 0.3 request is read as absent (a ``null`` inside metadata is content, kept);
* the errors of ``message/stream`` / ``tasks/resubscribe`` raised before the handler are the stream's one SSE event;
  401 stays a plain HTTP answer, and so do the other methods' errors and 1.0's;
* activated extensions are echoed in 0.3's ``X-A2A-Extensions`` too, and -32008 names the header of the caller's
  version.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import pytest
from client._agents import REQUIRED_EXTENSION, Kitchen
from support.servers import ServerProcess

from relaykit._card import AgentCapabilities, AgentCard, AgentExtension
from relaykit._grpc_gen import a2a_v0_3_pb2 as pb03
from relaykit.auth import APIKeyAuthenticator, Auth
from relaykit.http import create_app

STEP = 20.0
BASE = "http://127.0.0.1:1"  # never dialled: httpx hands every request to the app in-process
OPTIONAL_EXTENSION = "urn:relaykit-test:optional/v1"
V10 = {"A2A-Version": "1.0"}


def _card(*extensions: AgentExtension) -> AgentCard:
    capabilities = AgentCapabilities(streaming=True, push_notifications=True, extensions=list(extensions))
    return AgentCard(name="edges", description="0.3 edge cases", version="1.0.0", capabilities=capabilities)


def _app(*extensions: AgentExtension, auth: Auth | None = None) -> Any:
    return create_app(
        Kitchen(), card=_card(*extensions), store="memory", push_allow=("127.0.0.1",), grace=1.0, auth=auth
    )


@contextlib.asynccontextmanager
async def _served(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with (
        asyncio.timeout(STEP * 3),
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=BASE, timeout=STEP) as http,
    ):
        yield http


def _rpc(method: str, params: Any, **extra: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 9, "method": method, "params": params, **extra}


def _message(text: str, **members: Any) -> dict[str, Any]:
    message = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    return {**message, **members}


async def _running_task(http: httpx.AsyncClient) -> str:
    answer = await http.post(
        "/", json=_rpc("message/send", {"message": _message("slow 100"), "configuration": {"blocking": False}})
    )
    task_id: str = answer.json()["result"]["id"]
    return task_id


# --- push config get by task --------------------------------------------------------------------------------


async def test_push_config_get_naming_only_the_task() -> None:
    async with _served(_app()) as http:
        task_id = await _running_task(http)

        async def get(params: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
            method = "GetTaskPushNotificationConfig" if headers else "tasks/pushNotificationConfig/get"
            return (await http.post("/", json=_rpc(method, params), headers=headers)).json()

        async def create(config: dict[str, Any]) -> None:
            params = {"taskId": task_id, "pushNotificationConfig": {"url": "http://127.0.0.1:9/hook", **config}}
            assert "result" in (await http.post("/", json=_rpc("tasks/pushNotificationConfig/set", params))).json()

        none = await get({"id": task_id})
        assert none["error"]["code"] == -32001
        assert "no push notification config for task" in none["error"]["message"]
        await create({"id": "hook-a"})
        only = await get({"id": task_id})
        assert only["result"]["pushNotificationConfig"]["id"] == "hook-a"  # the task's oldest (its only one)
        assert only["result"]["taskId"] == task_id
        await create({})  # 0.3: a config without an id is named after its task
        named = await get({"id": task_id})
        assert named["result"]["pushNotificationConfig"]["id"] == task_id  # the one named after the task wins
        explicit = await get({"id": task_id, "pushNotificationConfigId": "hook-a"})
        assert explicit["result"]["pushNotificationConfig"]["id"] == "hook-a"
        missing = await get({"id": task_id, "pushNotificationConfigId": "hook-z"})
        assert missing["error"]["code"] == -32001
        # 1.0 names its config: an empty id is no config, as before
        unnamed = await get({"taskId": task_id, "id": ""}, headers=V10)
        assert unnamed["error"]["code"] == -32001
        await http.post("/", json=_rpc("tasks/cancel", {"id": task_id}))


async def test_push_config_get_naming_only_the_task_over_grpc(dual_server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=dual_server.url, timeout=STEP) as http:
        task_id = await _running_task(http)
        params = {"taskId": task_id, "pushNotificationConfig": {"id": "hook-g", "url": "http://127.0.0.1:9/hook"}}
        assert "result" in (await http.post("/", json=_rpc("tasks/pushNotificationConfig/set", params))).json()
        async with grpc.aio.insecure_channel(dual_server.grpc_address) as channel:
            call = channel.unary_unary(
                "/a2a.v1.A2AService/GetTaskPushNotificationConfig",
                request_serializer=pb03.GetTaskPushNotificationConfigRequest.SerializeToString,
                response_deserializer=pb03.TaskPushNotificationConfig.FromString,
            )
            request = pb03.GetTaskPushNotificationConfigRequest(name=f"tasks/{task_id}")
            answer = await asyncio.wait_for(call(request), STEP)
        assert answer.push_notification_config.id == "hook-g"
        assert answer.name == f"tasks/{task_id}/pushNotificationConfigs/hook-g"
        await http.post("/", json=_rpc("tasks/cancel", {"id": task_id}))


@pytest.mark.parametrize("schemes", [{"Bearer": True}, 5, "Bearer"], ids=["object", "number", "string"])
async def test_push_authentication_schemes_that_are_no_list_are_invalid_params(schemes: Any) -> None:
    """0.3's ``schemes`` is a list of names: as an object or a number it crashed the codec (500 with a traceback on
    main); a string gave the scheme "B". Refused now, naming the field where the caller put it."""
    hook = {"url": "http://127.0.0.1:9/hook", "authentication": {"schemes": schemes, "credentials": "c"}}
    async with _served(_app()) as http:
        task_id = await _running_task(http)
        field = "pushNotificationConfig.authentication.schemes"
        set_ = await http.post("/", json=_rpc("tasks/pushNotificationConfig/set", {"taskId": task_id, **_wrap(hook)}))
        send = {"message": _message("hi"), "configuration": {"pushNotificationConfig": hook}}
        inline = await http.post("/", json=_rpc("message/send", send))
        for answer, where in ((set_, field), (inline, "configuration." + field)):
            error = answer.json()["error"]
            assert error["code"] == -32602, error
            assert where in error["message"]
        path = f"/v1/tasks/{task_id}/pushNotificationConfigs"
        for body, where in ((_wrap(hook), field), ({"config": _wrap(hook)}, "config." + field)):
            rest = await http.post(path, json=body)
            assert (rest.status_code, rest.json()["code"]) == (422, -32602), rest.text
            assert where in rest.json()["message"]
        sent = await http.post(
            "/v1/message:send",
            json={
                "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "content": [{"text": "hi"}]},
                "configuration": {"pushNotification": hook},
            },
        )
        assert (sent.status_code, sent.json()["code"]) == (422, -32602), sent.text
        assert "configuration.pushNotification.authentication.schemes" in sent.json()["message"]
        await http.post("/", json=_rpc("tasks/cancel", {"id": task_id}))


async def test_push_config_members_of_the_wrong_type_are_refused_not_dropped() -> None:
    """An ``authentication`` that is not an object was dropped (the config registered without the credentials the
    receiver expects), a REST ``configId`` number became text: both are refused now, like any field."""
    async with _served(_app()) as http:
        task_id = await _running_task(http)
        hook = {"url": "http://127.0.0.1:9/hook", "authentication": "Bearer t0ken"}
        answer = await http.post("/", json=_rpc("tasks/pushNotificationConfig/set", {"taskId": task_id, **_wrap(hook)}))
        assert answer.json()["error"]["code"] == -32602, answer.text
        assert "authentication" in answer.json()["error"]["message"]
        assert "t0ken" not in answer.text
        rest = await http.post(
            f"/v1/tasks/{task_id}/pushNotificationConfigs",
            json={"configId": 5, "config": _wrap({"url": "http://127.0.0.1:9/hook"})},
        )
        assert (rest.status_code, rest.json()["code"]) == (422, -32602), rest.text
        listed = (await http.post("/", json=_rpc("tasks/pushNotificationConfig/list", {"id": task_id}))).json()
        assert listed["result"] == []
        await http.post("/", json=_rpc("tasks/cancel", {"id": task_id}))


def _wrap(config: dict[str, Any]) -> dict[str, Any]:
    return {"pushNotificationConfig": config}


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every member and item of decoded JSON, as the key path to it."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*at, key)
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*at, index)
            yield from _paths(item, (*at, index))


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(value)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = copy.deepcopy(new)
    return out


async def test_no_0_3_request_member_of_the_wrong_json_type_is_a_500() -> None:
    """Each member of a full 0.3 request (JSON-RPC params, REST bodies), replaced by a value of each other JSON type:
    refused or accepted, never an internal error (on main: push ``schemes`` crashed the codec)."""
    hook = {"url": "http://127.0.0.1:9/hook", "id": "h", "token": "t", "authentication": {"schemes": ["Bearer"]}}
    others = [{}, [], 5, "s", True, None]
    async with _served(_app()) as http:
        task_id = await _running_task(http)
        part = [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"uri": "http://127.0.0.1:9/f", "name": "f"}}]
        sends = {
            "message": {**_message("hi"), "parts": [*part, {"kind": "data", "data": {"a": 1}}], "metadata": {}},
            "configuration": {"blocking": True, "historyLength": 2, "pushNotificationConfig": hook},
        }
        rpc = {
            "message/send": sends,
            "tasks/get": {"id": task_id, "historyLength": 3},
            "tasks/pushNotificationConfig/set": {"taskId": task_id, "pushNotificationConfig": hook},
            "tasks/pushNotificationConfig/get": {"id": task_id, "pushNotificationConfigId": "h"},
            "tasks/pushNotificationConfig/delete": {"id": task_id, "pushNotificationConfigId": "zz"},
        }
        rest_send = {
            "message": {"messageId": "m", "role": "ROLE_USER", "content": [{"text": "hi"}, {"data": {"data": {}}}]},
            "configuration": {"blocking": True, "pushNotification": hook},
        }
        rest = {
            "/v1/message:send": rest_send,
            f"/v1/tasks/{task_id}/pushNotificationConfigs": {"configId": "c", "config": _wrap(hook)},
        }
        internal: list[str] = []
        for method, params in rpc.items():
            for path in _paths(params):
                for other in others:
                    sent = _replaced(params, path, other)
                    if method == "message/send" and isinstance(sent.get("message"), dict):
                        sent["message"]["messageId"] = str(uuid.uuid4())  # each a new message
                    answer = await http.post("/", json=_rpc(method, sent))
                    if answer.status_code >= 500 or answer.json().get("error", {}).get("code") == -32603:
                        internal.append(f"{method} {path} = {other!r}")
        for route, body in rest.items():
            for path in _paths(body):
                for other in others:
                    sent = _replaced(body, path, other)
                    if isinstance(sent.get("message"), dict):
                        sent["message"]["messageId"] = str(uuid.uuid4())
                    answer = await http.post(route, json=sent)
                    if answer.status_code >= 500:
                        internal.append(f"{route} {path} = {other!r}")
        await http.post("/", json=_rpc("tasks/cancel", {"id": task_id}))
    assert internal == []


# --- extended card --------------------------------------------------------------------------------------------


async def test_no_extended_card_is_0_3s_not_configured_error() -> None:
    async with _served(_app()) as http:
        rpc = (await http.post("/", json=_rpc("agent/getAuthenticatedExtendedCard", {}))).json()
        assert rpc["error"]["code"] == -32007
        assert rpc["id"] == 9
        rest = await http.get("/v1/card")
        assert (rest.status_code, rest.json()["code"]) == (404, -32007)
        # 1.0 keeps its answer: the operation is not supported here
        rpc10 = (await http.post("/", json=_rpc("GetExtendedAgentCard", {}), headers=V10)).json()
        assert rpc10["error"]["code"] == -32004
        rest10 = await http.get("/extendedAgentCard", headers=V10)
        assert rest10.status_code == 400
        assert rest10.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


# --- nulls ----------------------------------------------------------------------------------------------------


async def test_null_members_of_0_3_requests_read_as_absent() -> None:
    nulls = {"contextId": None, "taskId": None, "referenceTaskIds": None, "extensions": None}
    async with _served(_app()) as http:
        message = _message("hi", **nulls, metadata={"kept": None})
        message["parts"][0]["metadata"] = None
        params = {"message": message, "configuration": None, "metadata": None}
        answer = (await http.post("/", json=_rpc("message/send", params))).json()
        task = answer["result"]
        assert task["status"]["state"] == "completed"
        assert task["history"][0]["metadata"] == {"kept": None}  # content: kept as sent
        configured = {"message": _message("hi", **nulls), "configuration": {"blocking": None, "historyLength": None}}
        assert (await http.post("/", json=_rpc("message/send", configured))).json()["result"]["kind"] == "task"
        got = (await http.post("/", json=_rpc("tasks/get", {"id": task["id"], "historyLength": None}))).json()
        assert got["result"]["id"] == task["id"]
        rest_message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "content": [{"text": "hi"}], **nulls}
        rest = await http.post(
            "/v1/message:send", json={"message": rest_message, "configuration": None, "metadata": None}
        )
        assert rest.status_code == 200
        assert rest.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # a null where a value is required is still refused, and a real error is reported as itself
        required = (await http.post("/", json=_rpc("message/send", {"message": None}))).json()
        assert required["error"]["code"] == -32602
        both = (
            await http.post("/", json=_rpc("message/send", {"message": _message("hi", contextId=None, parts="x")}))
        ).json()
        assert both["error"]["code"] == -32602
        assert "message.parts" in both["error"]["message"]
        assert "contextId" not in both["error"]["message"]


async def test_nulls_in_a_deep_0_3_request_are_refused_or_dropped_never_a_crash() -> None:
    """The null-dropping retry walks the request recursively: a large body nested 900 deep with a null reached it
    (RecursionError, -32603 on main). The parser's depth limit refuses such a body first; at the limit the nulls are
    still dropped."""
    from relaykit._input import MAX_JSON_DEPTH

    pad = "x" * 300_000  # past OFF_LOOP_BYTES: the standard library's parser, which read ~990 levels
    deep: Any = None
    for _ in range(900):
        deep = [deep]
    async with _served(_app()) as http:
        params = {"message": _message(pad, contextId=None, extensions=deep)}
        answer = (await http.post("/", json=_rpc("message/send", params))).json()
        assert answer["error"]["code"] == -32700, str(answer)[:300]
        assert f"more than {MAX_JSON_DEPTH} levels" in answer["error"]["message"]
        # At the limit (envelope 1, params 2, message 3, extensions 4 and down), the nulls are dropped and the
        # nested lists refused as extensions (strings), not a crash.
        deep = None
        for _ in range(MAX_JSON_DEPTH - 3):
            deep = [deep]
        params = {"message": _message(pad, contextId=None, extensions=deep)}
        answer = (await http.post("/", json=_rpc("message/send", params))).json()
        assert answer["error"]["code"] == -32602, str(answer)[:300]
        assert "message.extensions" in answer["error"]["message"]
        # Within metadata (content) the nulls are kept, while a null contextId still reads as absent.
        kept = deep[0]
        params = {"message": _message(pad, contextId=None, metadata={"deep": kept})}
        task = (await http.post("/", json=_rpc("message/send", params))).json()["result"]
        assert task["status"]["state"] == "completed"
        assert task["history"][0]["metadata"] == {"deep": kept}


# --- streaming methods' early errors --------------------------------------------------------------------------


def _sse_error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    assert response.text.startswith("data: ")
    assert response.text.endswith("\n\n")  # one event, nothing after it
    event: dict[str, Any] = json.loads(response.text.removeprefix("data: "))
    return event


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        (_rpc("message/stream", {"message": _message("hi", taskId=123)}), {}, -32602),
        (_rpc("message/stream", {"message": _message("hi")}), {"A2A-Version": "0.9"}, -32009),
        (_rpc("tasks/resubscribe", {"id": 5}), {}, -32602),
        (_rpc("tasks/resubscribe", ["not", "an", "object"]), {}, -32602),
        (_rpc("message/stream", {"message": _message("hi")}, jsonrpc="1.0"), {}, -32600),
    ],
    ids=["params", "version", "resubscribe-params", "params-not-object", "envelope"],
)
async def test_early_errors_of_0_3_streaming_methods_are_one_sse_event(
    body: dict[str, Any], headers: dict[str, str], code: int
) -> None:
    async with _served(_app()) as http:
        event = _sse_error(await http.post("/", json=body, headers=headers))
    assert (event["id"], event["error"]["code"]) == (9, code)


@pytest.mark.parametrize("method", ["message/stream", "tasks/resubscribe"])
async def test_a_missing_required_extension_on_a_0_3_stream_is_one_sse_event(method: str) -> None:
    params = {"message": _message("hi")} if method == "message/stream" else {"id": "any-task"}
    async with _served(_app(AgentExtension(uri=REQUIRED_EXTENSION, required=True))) as http:
        event = _sse_error(await http.post("/", json=_rpc(method, params)))
    assert event["error"]["code"] == -32008


async def test_other_early_errors_stay_plain() -> None:
    keys = Auth(APIKeyAuthenticator({"alice": "alice-key"}))
    async with _served(_app(auth=keys)) as http:
        refused = await http.post("/", json=_rpc("message/stream", {"message": _message("hi")}))
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/json")
        assert (refused.json()["id"], refused.json()["error"]["code"]) == (9, -32000)
    async with _served(_app()) as http:
        odd = await http.post("/", json={"jsonrpc": "2.0", "id": 9, "method": ["message/stream"], "params": {}})
        assert odd.headers["content-type"].startswith("application/json")  # no method to read: plain JSON-RPC
        assert odd.json()["error"]["code"] == -32600
        unary = await http.post("/", json=_rpc("message/send", {"message": _message("hi", taskId=123)}))
        assert unary.headers["content-type"].startswith("application/json")
        assert unary.json()["error"]["code"] == -32602
        v10 = _rpc("SendStreamingMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}})
        plain = await http.post("/", json=v10, headers=V10)
        assert plain.headers["content-type"].startswith("application/json")
        assert plain.json()["error"]["code"] == -32602
        rest = await http.post("/v1/message:stream", json={"message": {"messageId": "m", "content": []}})
        assert (rest.status_code, rest.headers["content-type"]) == (422, "application/json")


# --- extensions -----------------------------------------------------------------------------------------------


async def test_0_3_extensions_are_echoed_in_0_3s_header_too() -> None:
    both = {"a2a-extensions": OPTIONAL_EXTENSION, "x-a2a-extensions": OPTIONAL_EXTENSION}
    asked = {"X-A2A-Extensions": OPTIONAL_EXTENSION}

    def echoed(response: httpx.Response) -> dict[str, str]:
        assert response.status_code == 200, response.text
        return {k: v for k, v in response.headers.items() if k.endswith("a2a-extensions")}

    async with _served(_app(AgentExtension(uri=OPTIONAL_EXTENSION))) as http:
        assert (
            echoed(await http.post("/", json=_rpc("message/send", {"message": _message("hi")}), headers=asked)) == both
        )
        streamed = await http.post("/", json=_rpc("message/stream", {"message": _message("hi")}), headers=asked)
        assert echoed(streamed) == both
        rest_message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "content": [{"text": "hi"}]}
        assert echoed(await http.post("/v1/message:send", json={"message": rest_message}, headers=asked)) == both
        # 1.0 callers get 1.0's header only
        v10 = _rpc("SendMessage", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
        only = await http.post("/", json=v10, headers={**V10, "A2A-Extensions": OPTIONAL_EXTENSION})
        assert echoed(only) == {"a2a-extensions": OPTIONAL_EXTENSION}


async def test_the_required_extension_error_names_the_callers_header() -> None:
    async with _served(_app(AgentExtension(uri=REQUIRED_EXTENSION, required=True))) as http:
        old = (await http.post("/", json=_rpc("message/send", {"message": _message("hi")}))).json()
        v10 = _rpc("SendMessage", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
        new = (await http.post("/", json=v10, headers=V10)).json()
    assert old["error"]["code"] == new["error"]["code"] == -32008
    assert "X-A2A-Extensions header" in old["error"]["message"]
    assert "with the A2A-Extensions header" in new["error"]["message"]


async def test_0_3_grpc_echoes_extensions_in_its_key_too(strict_server: ServerProcess) -> None:
    request = pb03.SendMessageRequest(
        request=pb03.Message(message_id=str(uuid.uuid4()), role=pb03.ROLE_USER, content=[pb03.Part(text="hi")]),
        configuration=pb03.SendMessageConfiguration(blocking=True),
    )
    async with grpc.aio.insecure_channel(strict_server.grpc_address) as channel:
        send = channel.unary_unary(
            "/a2a.v1.A2AService/SendMessage",
            request_serializer=pb03.SendMessageRequest.SerializeToString,
            response_deserializer=pb03.SendMessageResponse.FromString,
        )
        call = send(request, metadata=(("x-a2a-extensions", REQUIRED_EXTENSION),))
        answer = await asyncio.wait_for(call, STEP)
        echoed = {k: v for k, v in (await call.initial_metadata()) or () if k.endswith("a2a-extensions")}
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asyncio.wait_for(send(request), STEP)
    assert answer.task.status.state == pb03.TASK_STATE_COMPLETED
    assert echoed == {"a2a-extensions": REQUIRED_EXTENSION, "x-a2a-extensions": REQUIRED_EXTENSION}
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "X-A2A-Extensions" in (refused.value.details() or "")
