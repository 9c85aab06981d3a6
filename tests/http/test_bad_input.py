"""Bad input, table-driven, on both HTTP bindings: every row is one kind of bad request, sent raw with httpx.

The server is a separate ``relaykit serve`` process (real sockets) serving ``_apps.py:bad_input_app``: ``create_app``
with a 1 KiB body limit and one queued message per task. Each row has a JSON-RPC request (``POST /``) and/or a REST
request (the matching route) and what must come back:

* JSON-RPC: the HTTP status (200, except 413 for an oversize body), ``error.code``, the ErrorInfo ``reason`` and
  ``domain``, and ``Content-Type: application/json``;
* REST: the HTTP status, a google.rpc.Status body (``error.code`` = the HTTP status, ``error.status``), the ErrorInfo
  ``reason`` and ``domain``, and ``Content-Type: application/a2a+json``;
* both: a message a person can act on (non-empty, no traceback, no library internals), and the server still serves
  a good request right afterwards.

Invalid-params rows also name the offending field in a ``google.rpc.BadRequest`` detail
(``test_invalid_params_names_the_field``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

DOMAIN = "a2a-protocol.org"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
MAX_BODY = 1024  # _apps.MAX_BODY
TIMEOUT = 10.0

DONE = "{done}"  # replaced by the id of a COMPLETED task
UNKNOWN = "{unknown}"  # replaced by an id no task has


# --- the table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One raw HTTP request. ``headers`` are added to / override the defaults; a None value removes a default."""

    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Expect:
    http: int
    reason: str
    code: int | None = None  # JSON-RPC error.code
    status: str | None = None  # REST error.status (google.rpc.Code name)
    field: str | None = None  # the BadRequest fieldViolations[].field naming the bad field


@dataclass(frozen=True)
class Row:
    name: str
    jsonrpc: tuple[Call, Expect] | None = None
    rest: tuple[Call, Expect] | None = None
    bug: str | None = None  # a known relaykit bug in naming the field (strict xfail in the field test)


def envelope(method: str, params: Any = None, *, rid: Any = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        out["params"] = params
    return out


def rpc(payload: Any = None, *, raw: bytes | None = None, headers: dict[str, str | None] | None = None) -> Call:
    body = raw if raw is not None else json.dumps(payload).encode()
    return Call("POST", "/", body, headers or {})


def rest(
    method: str,
    path: str,
    payload: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str | None] | None = None,
) -> Call:
    body = raw if raw is not None else (json.dumps(payload).encode() if payload is not None else None)
    return Call(method, path, body, headers or {})


def message(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def rpc_invalid_params(name: str) -> Expect:
    return Expect(200, "INVALID_PARAMS", code=-32602, field=name)


def rest_invalid_params(name: str) -> Expect:
    return Expect(400, "INVALID_PARAMS", status="INVALID_ARGUMENT", field=name)


RPC_INVALID_REQUEST = Expect(200, "INVALID_REQUEST", code=-32600)
VERSION_RPC = Expect(200, "VERSION_NOT_SUPPORTED", code=-32009)
VERSION_REST = Expect(400, "VERSION_NOT_SUPPORTED", status="FAILED_PRECONDITION")
NO_VERSION: dict[str, str | None] = {"A2A-Version": None}
TRUNCATED = b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": '
BIG_TEXT = "x" * (2 * MAX_BODY)
HOOK = "https://hooks.example.com/a2a"  # never called: every row using it is refused before anything is stored
HOOK_NO_SCHEME = {"url": HOOK, "authentication": {"scheme": ""}}
INLINE_NO_SCHEME = {"taskPushNotificationConfig": HOOK_NO_SCHEME}
# Credentials no delivery could send as a header value: the error names the field and never echoes the value.
SECRET = "s3cr3t-value"
HOOK_CRLF_TOKEN = {"url": HOOK, "token": f"{SECRET}\r\nX-Injected: 1"}
HOOK_NON_ASCII_CREDENTIALS = {"url": HOOK, "authentication": {"scheme": "Bearer", "credentials": f"{SECRET}\u00e9"}}
HOOK_UNUSABLE_URL = {"url": "http://xn--zz/a2a"}  # an A-label that is not valid IDNA: httpx cannot send to it
INLINE_CRLF_TOKEN = {"taskPushNotificationConfig": HOOK_CRLF_TOKEN}

ROWS: list[Row] = [
    Row(
        "not-json",
        jsonrpc=(rpc(raw=TRUNCATED), Expect(200, "INVALID_REQUEST", code=-32700)),
        rest=(
            rest("POST", "/message:send", raw=b'{"message": {'),
            Expect(400, "INVALID_REQUEST", status="INVALID_ARGUMENT"),
        ),
    ),
    Row("not-an-object", jsonrpc=(rpc("just a string"), RPC_INVALID_REQUEST)),
    Row("batch", jsonrpc=(rpc([envelope("GetTask", {"id": DONE})]), RPC_INVALID_REQUEST)),
    Row(
        "no-jsonrpc-member", jsonrpc=(rpc({"id": 1, "method": "GetTask", "params": {"id": DONE}}), RPC_INVALID_REQUEST)
    ),
    Row("jsonrpc-1.0", jsonrpc=(rpc({**envelope("GetTask", {"id": DONE}), "jsonrpc": "1.0"}), RPC_INVALID_REQUEST)),
    Row("no-method", jsonrpc=(rpc({"jsonrpc": "2.0", "id": 1, "params": {}}), RPC_INVALID_REQUEST)),
    Row(
        "unknown-method",
        jsonrpc=(rpc(envelope("NoSuchMethod", {})), Expect(200, "METHOD_NOT_FOUND", code=-32601)),
        rest=(rest("GET", "/no/such/route"), Expect(404, "METHOD_NOT_FOUND", status="NOT_FOUND")),
    ),
    Row(
        "a2a-0.3-method-name",
        jsonrpc=(rpc(envelope("message/send", {"message": message()})), Expect(200, "METHOD_NOT_FOUND", code=-32601)),
    ),
    Row(
        "wrong-http-method",
        rest=(rest("GET", "/message:send"), Expect(404, "METHOD_NOT_FOUND", status="NOT_FOUND")),
    ),
    Row(
        "missing-message",
        jsonrpc=(rpc(envelope("SendMessage", {})), rpc_invalid_params("message")),
        rest=(rest("POST", "/message:send", {}), rest_invalid_params("message")),
    ),
    Row(
        "empty-parts",
        jsonrpc=(rpc(envelope("SendMessage", {"message": message(parts=[])})), rpc_invalid_params("message.parts")),
        rest=(rest("POST", "/message:send", {"message": message(parts=[])}), rest_invalid_params("message.parts")),
    ),
    Row(
        "part-with-two-kinds",
        jsonrpc=(
            rpc(envelope("SendMessage", {"message": message(parts=[{"text": "a", "url": "https://x.example/f"}])})),
            rpc_invalid_params("message.parts.0"),
        ),
        rest=(
            rest("POST", "/message:send", {"message": message(parts=[{"text": "a", "url": "https://x.example/f"}])}),
            rest_invalid_params("message.parts.0"),
        ),
    ),
    Row(
        "bad-role-enum",
        jsonrpc=(
            rpc(envelope("SendMessage", {"message": message(role="ROLE_BOGUS")})),
            rpc_invalid_params("message.role"),
        ),
        rest=(
            rest("POST", "/message:send", {"message": message(role="ROLE_BOGUS")}),
            rest_invalid_params("message.role"),
        ),
    ),
    Row(
        "negative-history-length",
        jsonrpc=(rpc(envelope("GetTask", {"id": DONE, "historyLength": -1})), rpc_invalid_params("historyLength")),
        rest=(rest("GET", f"/tasks/{DONE}?historyLength=-1"), rest_invalid_params("historyLength")),
    ),
    Row(
        "negative-history-length-in-send",
        jsonrpc=(
            rpc(envelope("SendMessage", {"message": message(), "configuration": {"historyLength": -1}})),
            rpc_invalid_params("configuration.historyLength"),
        ),
        rest=(
            rest("POST", "/message:send", {"message": message(), "configuration": {"historyLength": -1}}),
            rest_invalid_params("configuration.historyLength"),
        ),
    ),
    Row(
        "page-size-0",
        jsonrpc=(rpc(envelope("ListTasks", {"pageSize": 0})), rpc_invalid_params("pageSize")),
        rest=(rest("GET", "/tasks?pageSize=0"), rest_invalid_params("pageSize")),
    ),
    Row(
        "page-size-101",
        jsonrpc=(rpc(envelope("ListTasks", {"pageSize": 101})), rpc_invalid_params("pageSize")),
        rest=(rest("GET", "/tasks?pageSize=101"), rest_invalid_params("pageSize")),
    ),
    Row(
        "bad-status-filter",
        jsonrpc=(rpc(envelope("ListTasks", {"status": "TASK_STATE_BOGUS"})), rpc_invalid_params("status")),
        rest=(rest("GET", "/tasks?status=TASK_STATE_BOGUS"), rest_invalid_params("status")),
    ),
    # REQUIRED means set, not just present: an empty scheme is refused like a missing one (gRPC cannot tell the two
    # apart), on creation and inline in a message.
    Row(
        "push-config-empty-auth-scheme",
        jsonrpc=(
            rpc(envelope("CreateTaskPushNotificationConfig", {"taskId": DONE, **HOOK_NO_SCHEME})),
            rpc_invalid_params("authentication.scheme"),
        ),
        rest=(
            rest("POST", f"/tasks/{DONE}/pushNotificationConfigs", HOOK_NO_SCHEME),
            rest_invalid_params("authentication.scheme"),
        ),
    ),
    Row(
        "inline-push-config-empty-auth-scheme",
        jsonrpc=(
            rpc(envelope("SendMessage", {"message": message(), "configuration": INLINE_NO_SCHEME})),
            rpc_invalid_params("configuration.taskPushNotificationConfig.authentication.scheme"),
        ),
        rest=(
            rest("POST", "/message:send", {"message": message(), "configuration": INLINE_NO_SCHEME}),
            rest_invalid_params("configuration.taskPushNotificationConfig.authentication.scheme"),
        ),
    ),
    # A token, scheme or credentials that cannot go out as a header value (CR/LF, non-ASCII), or a URL httpx cannot
    # send to, would fail every delivery: refused when the config is stored, on creation and inline in a message.
    Row(
        "push-config-token-with-crlf",
        jsonrpc=(
            rpc(envelope("CreateTaskPushNotificationConfig", {"taskId": DONE, **HOOK_CRLF_TOKEN})),
            rpc_invalid_params("token"),
        ),
        rest=(rest("POST", f"/tasks/{DONE}/pushNotificationConfigs", HOOK_CRLF_TOKEN), rest_invalid_params("token")),
    ),
    Row(
        "push-config-non-ascii-credentials",
        jsonrpc=(
            rpc(envelope("CreateTaskPushNotificationConfig", {"taskId": DONE, **HOOK_NON_ASCII_CREDENTIALS})),
            rpc_invalid_params("authentication.credentials"),
        ),
        rest=(
            rest("POST", f"/tasks/{DONE}/pushNotificationConfigs", HOOK_NON_ASCII_CREDENTIALS),
            rest_invalid_params("authentication.credentials"),
        ),
    ),
    Row(
        "push-config-unusable-url",
        jsonrpc=(
            rpc(envelope("CreateTaskPushNotificationConfig", {"taskId": DONE, **HOOK_UNUSABLE_URL})),
            rpc_invalid_params("url"),
        ),
        rest=(rest("POST", f"/tasks/{DONE}/pushNotificationConfigs", HOOK_UNUSABLE_URL), rest_invalid_params("url")),
    ),
    Row(
        "inline-push-config-token-with-crlf",
        jsonrpc=(
            rpc(envelope("SendMessage", {"message": message(), "configuration": INLINE_CRLF_TOKEN})),
            rpc_invalid_params("configuration.taskPushNotificationConfig.token"),
        ),
        rest=(
            rest("POST", "/message:send", {"message": message(), "configuration": INLINE_CRLF_TOKEN}),
            rest_invalid_params("configuration.taskPushNotificationConfig.token"),
        ),
    ),
    # ".." is removed from a URL path by the client before it is sent: such a config could never be fetched over REST.
    Row(
        "push-config-dot-dot-id",
        jsonrpc=(
            rpc(envelope("CreateTaskPushNotificationConfig", {"taskId": DONE, "id": "..", "url": HOOK})),
            rpc_invalid_params("id"),
        ),
        rest=(
            rest("POST", f"/tasks/{DONE}/pushNotificationConfigs", {"id": "..", "url": HOOK}),
            rest_invalid_params("id"),
        ),
    ),
    Row(
        "unknown-task",
        jsonrpc=(rpc(envelope("GetTask", {"id": UNKNOWN})), Expect(200, "TASK_NOT_FOUND", code=-32001)),
        rest=(rest("GET", f"/tasks/{UNKNOWN}"), Expect(404, "TASK_NOT_FOUND", status="NOT_FOUND")),
    ),
    Row(
        "cancel-terminal-task",
        jsonrpc=(rpc(envelope("CancelTask", {"id": DONE})), Expect(200, "TASK_NOT_CANCELABLE", code=-32002)),
        # An empty body and no Content-Type are fine on ":cancel" (CONTRACT).
        rest=(
            rest("POST", f"/tasks/{DONE}:cancel", headers={"Content-Type": None}),
            Expect(400, "TASK_NOT_CANCELABLE", status="FAILED_PRECONDITION"),
        ),
    ),
    # A cross-site form post (simple request: no preflight) must not change state, even with an empty body.
    Row(
        "cancel-as-form-post",
        rest=(
            rest(
                "POST",
                f"/tasks/{DONE}:cancel?A2A-Version=1.0",
                raw=b"",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            ),
            Expect(415, "INVALID_REQUEST", status="INVALID_ARGUMENT"),
        ),
    ),
    Row(
        "cancel-as-text-post",
        rest=(
            rest("POST", f"/tasks/{DONE}:cancel", raw=b"", headers={"Content-Type": "text/plain"}),
            Expect(415, "INVALID_REQUEST", status="INVALID_ARGUMENT"),
        ),
    ),
    Row(
        "message-to-terminal-task",
        jsonrpc=(
            rpc(envelope("SendMessage", {"message": message(taskId=DONE)})),
            Expect(200, "UNSUPPORTED_OPERATION", code=-32004),
        ),
        rest=(
            rest("POST", "/message:send", {"message": message(taskId=DONE)}),
            Expect(400, "UNSUPPORTED_OPERATION", status="FAILED_PRECONDITION"),
        ),
    ),
    Row(
        "body-over-limit",
        jsonrpc=(
            rpc(envelope("SendMessage", {"message": message(BIG_TEXT)})),
            Expect(413, "INVALID_REQUEST", code=-32600),
        ),
        rest=(
            rest("POST", "/message:send", {"message": message(BIG_TEXT)}),
            Expect(413, "INVALID_REQUEST", status="INVALID_ARGUMENT"),
        ),
    ),
    Row(
        "text-plain-content-type",
        jsonrpc=(rpc(envelope("GetTask", {"id": DONE}), headers={"Content-Type": "text/plain"}), RPC_INVALID_REQUEST),
        rest=(
            rest("POST", "/message:send", {"message": message()}, headers={"Content-Type": "text/plain"}),
            Expect(415, "INVALID_REQUEST", status="INVALID_ARGUMENT"),
        ),
    ),
    Row(
        "missing-a2a-version",
        jsonrpc=(rpc(envelope("GetTask", {"id": DONE}), headers=NO_VERSION), VERSION_RPC),
        rest=(rest("GET", f"/tasks/{DONE}", headers=NO_VERSION), VERSION_REST),
    ),
    Row(
        "a2a-version-99",
        jsonrpc=(rpc(envelope("GetTask", {"id": DONE}), headers={"A2A-Version": "99.0"}), VERSION_RPC),
        rest=(rest("GET", f"/tasks/{DONE}", headers={"A2A-Version": "99.0"}), VERSION_REST),
    ),
    Row(
        "a2a-version-0.3",
        jsonrpc=(rpc(envelope("GetTask", {"id": DONE}), headers={"A2A-Version": "0.3"}), VERSION_RPC),
        rest=(rest("GET", f"/tasks/{DONE}", headers={"A2A-Version": "0.3"}), VERSION_REST),
    ),
]

CASES = [
    pytest.param(row, binding, id=f"{row.name}-{binding}")
    for row in ROWS
    for binding in ("jsonrpc", "rest")
    if getattr(row, binding) is not None
]
SECRET_CASES = [
    pytest.param(row, binding, id=f"{row.name}-{binding}")
    for row in ROWS
    for binding in ("jsonrpc", "rest")
    if getattr(row, binding) is not None and SECRET.encode() in (getattr(row, binding)[0].body or b"")
]
FIELD_CASES = [
    pytest.param(
        row,
        binding,
        id=f"{row.name}-{binding}",
        marks=[pytest.mark.xfail(strict=True, reason=row.bug)] if row.bug else [],
    )
    for row in ROWS
    for binding in ("jsonrpc", "rest")
    if getattr(row, binding) is not None and getattr(row, binding)[1].field is not None
]


# --- server and helpers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_url(relaykit_server: Callable[..., str]) -> str:
    return relaykit_server("tests/http/_apps.py:bad_input_app")


@pytest.fixture(scope="module")
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        yield client


@pytest.fixture(scope="module")
def done_task(http: httpx.Client) -> str:
    """A COMPLETED task, for the rows that need a terminal task."""
    task = good_send(http, "rest", "done")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return str(task["id"])


def substitute(data: bytes | str, done: str) -> Any:
    if isinstance(data, bytes):
        return data.replace(DONE.encode(), done.encode()).replace(UNKNOWN.encode(), b"no-such-task-0000")
    return data.replace(DONE, done).replace(UNKNOWN, "no-such-task-0000")


def send_call(http: httpx.Client, call: Call, done: str) -> httpx.Response:
    headers: dict[str, str] = {"A2A-Version": "1.0"}
    if call.body is not None:
        headers["Content-Type"] = "application/json"
    for name, value in call.headers.items():
        headers.pop(name, None)
        if value is not None:
            headers[name] = value
    body = substitute(call.body, done) if call.body is not None else None
    return http.request(call.method, substitute(call.path, done), content=body, headers=headers)


def good_send(http: httpx.Client, binding: str, text: str) -> dict[str, Any]:
    """A good SendMessage on ``binding``; returns the Task."""
    msg = message(text)
    if binding == "jsonrpc":
        response = http.post(
            "/", json=envelope("SendMessage", {"message": msg}, rid="ok"), headers={"A2A-Version": "1.0"}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert "error" not in body, body
        assert body["id"] == "ok"
        return dict(body["result"]["task"])
    response = http.post("/message:send", json={"message": msg}, headers={"A2A-Version": "1.0"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/a2a+json")
    return dict(response.json()["task"])


def assert_serves(http: httpx.Client, binding: str) -> None:
    """The server still answers a good request correctly (no state was corrupted by the bad one)."""
    text = f"still fine {uuid.uuid4().hex[:8]}"
    task = good_send(http, binding, text)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": text}]


def assert_actionable(message_text: Any, raw: str) -> None:
    assert isinstance(message_text, str)
    assert message_text.strip(), "the error message is empty"
    assert len(message_text) < 600, message_text
    for internal in ("Traceback", 'File "', "pydantic", "errors.pydantic.dev", "Exception"):
        assert internal not in raw, f"{internal!r} leaked into the error body: {raw}"


def details_of(response: httpx.Response, binding: str) -> list[dict[str, Any]]:
    body = response.json()
    return list(body["error"]["data"] if binding == "jsonrpc" else body["error"]["details"])


def check_error(response: httpx.Response, binding: str, expect: Expect, request_id: Any = 1) -> None:
    raw = response.text
    assert response.status_code == expect.http, raw
    content_type = response.headers.get("content-type", "")
    body = response.json()
    assert set(body) >= {"error"}, body
    error = body["error"]
    if binding == "jsonrpc":
        assert content_type.split(";")[0].strip() == "application/json", content_type
        assert body["jsonrpc"] == "2.0"
        assert error["code"] == expect.code, error
        # The id is echoed once the request was understood as JSON-RPC (null is right for -32700 / -32600).
        if expect.code not in (-32700, -32600):
            assert body["id"] == request_id, body
        details = error["data"]
    else:
        assert content_type.split(";")[0].strip() == "application/a2a+json", content_type
        assert error["code"] == expect.http, error
        assert error["status"] == expect.status, error
        details = error["details"]
    assert_actionable(error["message"], raw)
    infos = [d for d in details if d.get("@type") == ERROR_INFO]
    assert len(infos) == 1, details
    assert infos[0]["reason"] == expect.reason, infos
    assert infos[0]["domain"] == DOMAIN, infos
    assert all(isinstance(v, str) for v in infos[0].get("metadata", {}).values()), infos


# --- the tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("row", "binding"), CASES)
def test_bad_input_row(http: httpx.Client, done_task: str, row: Row, binding: str) -> None:
    call, expect = getattr(row, binding)
    response = send_call(http, call, done_task)
    check_error(response, binding, expect)
    assert_serves(http, binding)


@pytest.mark.parametrize(("row", "binding"), SECRET_CASES)
def test_a_refused_credential_is_never_echoed(http: httpx.Client, done_task: str, row: Row, binding: str) -> None:
    """Errors reach logs and clients' screens: the one about a bad token or credentials names the field only."""
    call, expect = getattr(row, binding)
    response = send_call(http, call, done_task)
    assert response.status_code == expect.http, response.text
    assert SECRET not in response.text


@pytest.mark.parametrize(("row", "binding"), FIELD_CASES)
def test_invalid_params_names_the_field(http: httpx.Client, done_task: str, row: Row, binding: str) -> None:
    call, expect = getattr(row, binding)
    response = send_call(http, call, done_task)
    assert response.status_code == expect.http, response.text
    bad_requests = [d for d in details_of(response, binding) if d.get("@type") == BAD_REQUEST]
    assert len(bad_requests) == 1, response.text
    violations = bad_requests[0]["fieldViolations"]
    assert violations, response.text
    assert all(v.get("description") for v in violations), violations
    assert expect.field in [v["field"] for v in violations], violations


def test_every_row_covers_both_bindings_unless_it_has_no_analogue() -> None:
    # JSON-RPC-only rows are about the JSON-RPC envelope or its method names; REST-only rows are about HTTP verbs and
    # bodiless REST calls (JSON-RPC always needs a JSON body, so a form post never gets that far).
    jsonrpc_only = {"not-an-object", "batch", "no-jsonrpc-member", "jsonrpc-1.0", "no-method", "a2a-0.3-method-name"}
    rest_only = {"wrong-http-method", "cancel-as-form-post", "cancel-as-text-post"}
    for row in ROWS:
        assert (row.rest is None) == (row.name in jsonrpc_only), row.name
        assert (row.jsonrpc is None) == (row.name in rest_only), row.name


@pytest.mark.parametrize(
    "fault", [{"jsonrpc": "1.0"}, {"method": None}, {"method": ""}], ids=["jsonrpc-1.0", "no-method", "empty-method"]
)
def test_invalid_request_with_a_readable_id_gets_it_back(http: httpx.Client, fault: dict[str, Any]) -> None:
    """JSON-RPC 2.0 §5: null only when the id cannot be read; the A2A 0.3 kit requires the echo (MUST)."""
    request = {k: v for k, v in {**envelope("GetTask", {"id": "x"}, rid="r-42"), **fault}.items() if v is not None}
    body = http.post("/", json=request, headers={"A2A-Version": "1.0"}).json()
    assert (body["error"]["code"], body["id"]) == (-32600, "r-42"), body


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
def test_a2a_version_as_query_parameter_is_accepted(http: httpx.Client, done_task: str, binding: str) -> None:
    if binding == "jsonrpc":
        response = http.post("/?A2A-Version=1.0", json=envelope("GetTask", {"id": done_task}, rid=7))
        assert response.status_code == 200, response.text
        body = response.json()
        assert "error" not in body, body
        assert body["id"] == 7
        assert body["result"]["id"] == done_task
    else:
        response = http.get(f"/tasks/{done_task}", params={"A2A-Version": "1.0"})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/a2a+json")
        assert response.json()["id"] == done_task


def test_rest_accepts_a2a_json_content_type(http: httpx.Client) -> None:
    body = json.dumps({"message": message("typed")}).encode()
    response = http.post(
        "/message:send", content=body, headers={"A2A-Version": "1.0", "Content-Type": "application/a2a+json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["task"]["artifacts"][0]["parts"] == [{"text": "typed"}]


def test_server_still_serves_after_all_bad_requests(http: httpx.Client, done_task: str) -> None:
    for row in ROWS:
        for binding in ("jsonrpc", "rest"):
            case = getattr(row, binding)
            if case is not None:
                check_error(send_call(http, case[0], done_task), binding, case[1])
    for binding in ("jsonrpc", "rest"):
        assert_serves(http, binding)
    # The terminal task the bad requests aimed at is unchanged.
    response = http.get(f"/tasks/{done_task}", headers={"A2A-Version": "1.0"})
    assert response.status_code == 200
    task = response.json()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "done"}]
    assert [m["parts"][0]["text"] for m in task["history"]] == ["done"]


# --- limits: ResourceExhausted ------------------------------------------------------------------------------


async def _post(client: httpx.AsyncClient, binding: str, method: str, params: dict[str, Any]) -> httpx.Response:
    headers = {"A2A-Version": "1.0"}
    if binding == "jsonrpc":
        return await client.post("/", json=envelope(method, params), headers=headers)
    if method == "SendMessage":
        return await client.post("/message:send", json=params, headers=headers)
    assert method == "CancelTask"
    return await client.post(f"/tasks/{params['id']}:cancel", headers=headers)


def _result(response: httpx.Response, binding: str) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    if binding == "jsonrpc":
        assert "error" not in body, body
        return dict(body["result"])
    return dict(body)


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
async def test_flooding_one_task_is_resource_exhausted(base_url: str, binding: str) -> None:
    """max_queued=1: with the task WORKING, one follow-up queues (answered at once: returnImmediately) and every other
    one is refused at once."""
    flood = 4
    async with httpx.AsyncClient(base_url=base_url, timeout=TIMEOUT + 5) as client:
        started = _result(
            await _post(
                client,
                binding,
                "SendMessage",
                {"message": message("wait"), "configuration": {"returnImmediately": True}},
            ),
            binding,
        )["task"]
        task_id, context_id = started["id"], started["contextId"]
        assert started["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        try:
            async with asyncio.timeout(TIMEOUT):
                responses = await asyncio.gather(
                    *(
                        _post(
                            client,
                            binding,
                            "SendMessage",
                            {
                                "message": message(f"more {i}", taskId=task_id, contextId=context_id),
                                "configuration": {"returnImmediately": True},
                            },
                        )
                        for i in range(flood)
                    )
                )
            expect = (
                Expect(200, "RESOURCE_EXHAUSTED", code=-32000)
                if binding == "jsonrpc"
                else Expect(429, "RESOURCE_EXHAUSTED", status="RESOURCE_EXHAUSTED")
            )
            queued = [r for r in responses if r.status_code == 200 and "error" not in r.json()]
            assert len(queued) == 1, [r.text for r in responses]  # exactly one follow-up is queued
            # Queued behind the running execution: answered with the task as it is, not when it runs.
            task = _result(queued[0], binding)["task"]
            assert (task["id"], task["status"]["state"]) == (task_id, "TASK_STATE_WORKING")
            for response in responses:
                if response is not queued[0]:
                    check_error(response, binding, expect)
        finally:
            canceled = _result(await _post(client, binding, "CancelTask", {"id": task_id}), binding)
            assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        # And the server takes new work.
        fresh = _result(await _post(client, binding, "SendMessage", {"message": message("after the flood")}), binding)
        assert fresh["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
