"""The SSRF guard on webhook URLs: refused at config time on both bindings (CreateTaskPushNotificationConfig and the
inline config of SendMessage) unless ``--push-allow`` opens them, and the classification of addresses."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from push_helpers import A2A, Recorder, Server, state_of, wait_until

from relaykit.push import WebhookGuard, WebhookRefusedError, address_problem

# (url, what the refusal must name)
REFUSED = [
    ("http://127.0.0.1/hook", "127.0.0.1 is a loopback address"),
    ("http://10.0.0.1/hook", "10.0.0.1 is a private address"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
    ("http://[::1]:8080/hook", "::1 is a loopback address"),
    ("http://localhost:8080/hook", "localhost resolves to a loopback address"),
    ("http://[fd00:ec2::254]/", "fd00:ec2::254 is a cloud metadata address"),
    ("http://100.64.1.2/", "carrier-grade NAT"),
    ("http://[::ffff:192.168.1.1]/", "private (embedded in ::ffff:c0a8:101) address"),
    ("http://0.0.0.0:80/", "unspecified"),
    ("http://224.0.0.1/", "multicast"),
    ("file:///etc/passwd", "the scheme must be http or https (got 'file')"),
    ("gopher://example.com:70/_x", "the scheme must be http or https (got 'gopher')"),
]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server("examples/echo.py", log_dir=tmp_path_factory.mktemp("ssrf-logs"))
    try:
        yield server
    finally:
        server.stop()


def _completed_task(server: Server) -> str:
    reply = server.send("hi")
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task"]["id"])


def _create(server: Server, binding: str, task_id: str, url: str) -> tuple[int, dict[str, Any]]:
    """CreateTaskPushNotificationConfig; (HTTP status, JSON-RPC error or REST error body)."""
    config = {"taskId": task_id, "url": url}
    if binding == "rest":
        reply = httpx.post(f"{server.base}/tasks/{task_id}/pushNotificationConfigs", json=config, headers=A2A)
        return reply.status_code, reply.json().get("error", {})
    body = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig", "params": config}
    reply = httpx.post(f"{server.base}/", json=body, headers=A2A)
    return reply.status_code, reply.json().get("error", {})


def _send_inline(server: Server, binding: str, url: str) -> tuple[int, dict[str, Any]]:
    params = {
        "message": {"messageId": "m-ssrf", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"taskPushNotificationConfig": {"url": url}},
    }
    if binding == "rest":
        reply = httpx.post(f"{server.base}/message:send", json=params, headers=A2A)
        return reply.status_code, reply.json().get("error", {})
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    reply = httpx.post(f"{server.base}/", json=body, headers=A2A)
    return reply.status_code, reply.json().get("error", {})


def _assert_refused(binding: str, status: int, error: dict[str, Any], expected: str) -> None:
    if binding == "rest":
        assert status == 400
        assert error["status"] == "INVALID_ARGUMENT"
        assert error["details"][0]["reason"] == "INVALID_PARAMS"
    else:
        assert status == 200
        assert error["code"] == -32602
    assert expected in error["message"]
    if "scheme" not in expected:
        assert "--push-allow" in error["message"]


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize(("url", "expected"), REFUSED, ids=[u for u, _ in REFUSED])
def test_refused_at_config_creation(guarded: Server, binding: str, url: str, expected: str) -> None:
    task_id = _completed_task(guarded)
    status, error = _create(guarded, binding, task_id, url)
    _assert_refused(binding, status, error, expected)
    listed = httpx.get(f"{guarded.base}/tasks/{task_id}/pushNotificationConfigs", headers=A2A).json()
    assert listed.get("configs", []) == []


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize(
    ("url", "expected"), REFUSED[:6] + REFUSED[-2:], ids=[u for u, _ in REFUSED[:6] + REFUSED[-2:]]
)
def test_refused_inline_in_send_message_before_any_task_exists(
    guarded: Server, binding: str, url: str, expected: str
) -> None:
    listed_before = httpx.get(f"{guarded.base}/tasks", headers=A2A).json()["totalSize"]
    status, error = _send_inline(guarded, binding, url)
    _assert_refused(binding, status, error, expected)
    assert httpx.get(f"{guarded.base}/tasks", headers=A2A).json()["totalSize"] == listed_before


def test_the_error_names_the_field(guarded: Server) -> None:
    _, error = _send_inline(guarded, "rest", "http://10.0.0.1/")
    violations = [d for d in error["details"] if d["@type"].endswith("BadRequest")]
    assert violations[0]["fieldViolations"][0]["field"] == "configuration.taskPushNotificationConfig.url"


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
@pytest.mark.parametrize("host", ["a" * 64 + ".example.com", "a..example.com"], ids=["long-label", "empty-label"])
def test_a_host_that_is_no_dns_name_is_refused_as_invalid_params(guarded: Server, binding: str, host: str) -> None:
    """The resolver raised ``UnicodeError`` (not an ``OSError``) for an empty label or one over 63 characters, which
    escaped the SSRF guard's check (an internal error); now the config is refused as invalid params naming the
    field, and nothing is stored."""
    task_id = _completed_task(guarded)
    status, error = _create(guarded, binding, task_id, f"https://{host}/hook")
    if binding == "rest":
        assert status == 400, error
        assert error["status"] == "INVALID_ARGUMENT"
        violations = [d for d in error["details"] if d["@type"].endswith("BadRequest")]
        [violation] = violations[0]["fieldViolations"]
        assert violation["field"] == "url"
        assert "not a valid host name" in violation["description"]
    else:
        assert status == 200
        assert error["code"] == -32602, error
    assert "not a valid host name" in error["message"]
    listed = httpx.get(f"{guarded.base}/tasks/{task_id}/pushNotificationConfigs", headers=A2A).json()
    assert listed.get("configs", []) == []


def test_allow_list_opens_loopback(recorder: Recorder, tmp_path: Path) -> None:
    allow = ("--push-allow", "127.0.0.1", "--push-allow", "::1", "--push-allow", "localhost")
    server = Server("examples/echo.py", *allow, log_dir=tmp_path)
    try:
        task_id = _completed_task(server)
        for binding in ("jsonrpc", "rest"):
            for url in ("http://127.0.0.1:9/a", "http://[::1]:9/a", "http://localhost:9/a"):
                status, error = _create(server, binding, task_id, url)
                assert status == 200, (binding, url, error)
                assert not error, (binding, url, error)
            status, error = _create(server, binding, task_id, "http://10.0.0.1/")
            _assert_refused(binding, status, error, "10.0.0.1 is a private address")  # only what was opened
        # ... and deliveries to it go through, by address and by name.
        for host, path in (("127.0.0.1", "/by-ip"), ("localhost", "/by-name")):
            reply = server.send("hello", push={"url": recorder.url(path, host=host)})
            assert reply.status_code == 200, reply.text
            wait_until(
                lambda path=path: any(state_of(r["json"]) == "TASK_STATE_COMPLETED" for r in recorder.accepted(path)),
                what=f"COMPLETED delivered to {host}",
            )
    finally:
        server.stop()


# --- the classification itself -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.254", "private"),
        ("192.168.0.1", "private"),
        ("fc00::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("100.64.0.1", "carrier-grade NAT (shared)"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "private"),
        ("::ffff:127.0.0.1", "loopback (embedded in ::ffff:7f00:1)"),
        ("64:ff9b::a00:1", "private (embedded in 64:ff9b::a00:1)"),
        ("2002:a00:1::", "private (embedded in 2002:a00:1::)"),
        ("8.8.8.8", None),
        ("93.184.215.14", None),
        ("2606:4700:4700::1111", None),
        ("172.32.0.1", None),
    ],
)
def test_address_classification(address: str, problem: str | None) -> None:
    assert address_problem(ipaddress.ip_address(address)) == problem


async def test_guard_allow_entries() -> None:
    guard = WebhookGuard(["10.0.0.0/8", "hooks.internal", "*.corp.example", "[::1]"])
    await guard.check_url("http://10.9.9.9/x")
    await guard.check_url("http://hooks.internal/x")  # allowed by name, whatever it resolves to
    await guard.check_url("https://a.b.corp.example/x")
    await guard.check_url("http://[::1]:8000/x")
    await guard.check_url("https://unresolvable.invalid/x")  # cannot tell yet: the connect-time check decides
    with pytest.raises(WebhookRefusedError, match=r"192\.168\.1\.1 is a private address"):
        await guard.check_url("http://192.168.1.1/")
    with pytest.raises(WebhookRefusedError, match="no host"):
        await guard.check_url("http:///nohost")


async def test_a_refused_name_is_never_answered_with_its_address() -> None:
    # Whoever creates a config must not learn what internal names resolve to (issue: "runsc (127.0.0.1) is ...").
    with pytest.raises(WebhookRefusedError) as refused:
        await WebhookGuard().check_url("http://localhost:8080/hook")
    assert "127.0.0.1" not in str(refused.value)
    assert "::1" not in str(refused.value)
    assert "localhost resolves to a loopback address" in str(refused.value)
