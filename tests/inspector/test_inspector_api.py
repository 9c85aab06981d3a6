"""The inspector's server side without a browser: its guards (custom header, loopback Host, a locked target), the
session it takes from each request (headers relayed, never kept), the mount in ``create_app(inspector=True)`` and
the ``relaykit inspect`` command line."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client._net import MiniHTTP, Request, Response
from support.servers import HOST, REPO_ROOT, ServerProcess, environ, free_port, start_process, start_serve, stop_process

from relaykit import agent
from relaykit.http import create_app
from relaykit.inspector import create_inspector
from relaykit.inspector._session import Session, SessionError, Target

T = 20.0
API = {"X-Relaykit-Inspector": "1", "Content-Type": "application/json"}


@agent
async def echo(context: Any) -> str:
    """Echoes."""
    return str(context.text)


def inspector_client(app: Any, host: str = "127.0.0.1:8100") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


async def test_api_calls_need_the_inspector_header() -> None:
    async with asyncio.timeout(T), inspector_client(create_inspector("http://127.0.0.1:9")) as http:
        refused = await http.post("/api/card", json={"session": {}}, headers={"Content-Type": "application/json"})
        assert refused.status_code == 400
        assert "X-Relaykit-Inspector" in refused.json()["error"]["message"]


async def test_an_unlocked_inspector_answers_loopback_names_only() -> None:
    app = create_inspector("http://127.0.0.1:9")
    async with asyncio.timeout(T), inspector_client(app, host="rebound.example:8100") as http:
        refused = await http.post("/api/card", json={"session": {}}, headers=API)
        assert refused.status_code == 400
        assert "loopback" in refused.json()["error"]["message"]
    async with asyncio.timeout(T), inspector_client(app, host="localhost:8100") as http:
        answered = await http.post("/api/card", json={"session": {}}, headers=API)
        assert answered.status_code == 200
        assert answered.json()["findings"][0]["level"] == "error"  # nothing listens on port 9


async def test_the_starting_headers_go_to_loopback_names_only() -> None:
    # config.json carries --header values (credentials): a DNS-rebinding page must not read them either.
    app = create_inspector("http://127.0.0.1:9", headers=(("X-API-Key", "secret-key-1"),))
    async with asyncio.timeout(T), inspector_client(app, host="rebound.example:8100") as http:
        refused = await http.get("/config.json")
        assert refused.status_code == 400
        assert "secret-key-1" not in refused.text
    async with asyncio.timeout(T), inspector_client(app, host="[::1]:8100") as http:
        config = (await http.get("/config.json")).json()
        assert config["headers"] == [["X-API-Key", "secret-key-1"]]


async def test_the_page_is_served_with_a_content_security_policy() -> None:
    async with asyncio.timeout(T), inspector_client(create_inspector("http://127.0.0.1:9")) as http:
        for path in ("/", "/inspector.js", "/inspector.css"):
            response = await http.get(path)
            assert response.status_code == 200, path
            assert "script-src 'self'" in response.headers["content-security-policy"]
        assert (await http.get("/nothing.js")).status_code == 404
        config = (await http.get("/config.json")).json()
        assert config["target"] == "http://127.0.0.1:9"
        assert config["locked"] is False


async def test_create_app_mounts_a_locked_inspector_and_openapi() -> None:
    app = create_app(echo, inspector=True)
    async with asyncio.timeout(T), inspector_client(app, host="127.0.0.1:9") as http:
        redirect = await http.get("/inspector")
        assert redirect.status_code == 307
        assert redirect.headers["location"] == "/inspector/"
        assert (await http.get("/inspector/")).status_code == 200
        config = (await http.get("/inspector/config.json")).json()
        assert config["locked"] is True
        assert config["target"] == "http://127.0.0.1:9"
        # A locked inspector ignores the URL the page names: it reaches only its own agent.
        report = (
            await http.post("/inspector/api/card", json={"session": {"url": "http://evil.example"}}, headers=API)
        ).json()
        assert report["url"].startswith("http://127.0.0.1:9/")
        assert (await http.get("/openapi.json")).json()["openapi"] == "3.1.0"
    plain = create_app(echo)
    async with asyncio.timeout(T), inspector_client(plain) as http:
        assert (await http.get("/inspector/")).status_code == 404  # off unless asked for


@pytest.mark.parametrize(
    ("session", "words"),
    [
        ({"url": "ftp://x"}, r"not an http\(s\) URL"),
        ({"url": "http://a", "headers": [["Host", "b"]]}, "not allowed"),
        ({"url": "http://a", "headers": [["X-A", "b\r\nX-B: c"]]}, "line break"),
        ({"url": "http://a", "headers": [["bad name", "v"]]}, "not allowed"),
        ({"url": "http://a", "headers": "X-A: b"}, "list"),
    ],
)
def test_bad_sessions_are_refused(session: dict[str, Any], words: str) -> None:
    with pytest.raises(SessionError, match=words):
        Session.parse(session, Target(), "http://127.0.0.1:9")


@pytest.fixture
async def recorder() -> AsyncIterator[MiniHTTP]:
    """An agent that serves a card and answers every JSON-RPC call with a task, recording what it was sent."""
    server: MiniHTTP

    async def handle(request: Request) -> Response:
        if request.path.endswith("agent-card.json"):
            card = {
                "name": "recorder",
                "version": "1",
                "supportedInterfaces": [
                    {"url": server.url + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                ],
            }
            return Response(200, [("content-type", "application/json")], json.dumps(card).encode())
        rpc = json.loads(request.body)
        task = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}
        body = {"jsonrpc": "2.0", "id": rpc["id"], "result": task}
        return Response(200, [("content-type", "application/json")], json.dumps(body).encode())

    server = await MiniHTTP(handle).start()
    try:
        yield server
    finally:
        await server.aclose()


async def test_session_headers_reach_the_agent_and_are_not_kept(recorder: MiniHTTP) -> None:
    app = create_inspector(recorder.url)
    session = {"url": recorder.url, "headers": [["X-API-Key", "k-123"]]}
    async with asyncio.timeout(T), inspector_client(app) as http:
        answer = (
            await http.post(
                "/api/call", json={"session": session, "op": "GetTask", "params": {"id": "t-1"}}, headers=API
            )
        ).json()
        assert answer["result"]["id"] == "t-1"
        assert answer["binding"] == "JSONRPC"
        # The next call without the header goes out without it: nothing of the session stayed on the server.
        session["headers"] = []
        await http.post("/api/call", json={"session": session, "op": "GetTask", "params": {"id": "t-1"}}, headers=API)
    calls = [r for r in recorder.requests if r.method == "POST"]
    assert calls[0].headers["x-api-key"] == "k-123"
    assert calls[0].headers["a2a-version"] == "1.0"
    assert "x-api-key" not in calls[-1].headers


async def test_unknown_operations_and_bad_params_are_reported(recorder: MiniHTTP) -> None:
    session = {"url": recorder.url}
    async with asyncio.timeout(T), inspector_client(create_inspector(recorder.url)) as http:
        unknown = await http.post("/api/call", json={"session": session, "op": "Nope", "params": {}}, headers=API)
        assert unknown.status_code == 400
        streaming = await http.post("/api/call", json={"session": session, "op": "SubscribeToTask"}, headers=API)
        assert streaming.status_code == 400
        bad = (
            await http.post("/api/call", json={"session": session, "op": "GetTask", "params": {}}, headers=API)
        ).json()
        assert bad["error"]["type"] == "InvalidParamsError"
        old = await http.post(
            "/api/call",
            json={"session": {**session, "version": "0.3"}, "op": "GetTask", "params": {"id": "x"}},
            headers=API,
        )
        assert "0.3" in old.json()["error"]["message"]


# --- relaykit inspect --------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaykit.cli", *args],
        cwd=REPO_ROOT,
        env=environ(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_inspect_refuses_a_bad_url_and_a_busy_port() -> None:
    bad = run_cli("inspect", "ftp://agent")
    assert bad.returncode == 2
    assert "not an http(s) URL" in bad.stderr
    with socket.socket() as busy:
        busy.bind((HOST, 0))
        busy.listen()
        taken = run_cli("inspect", "http://127.0.0.1:9", "--port", str(busy.getsockname()[1]))
    assert taken.returncode == 2
    assert "already in use" in taken.stderr


def test_inspect_prints_its_address_and_starts_the_page_with_its_headers(tmp_path: Any) -> None:
    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "relaykit.cli", "inspect", "http://127.0.0.1:9", "--port", str(port),
                "--header", "Authorization: Bearer t0k"]  # fmt: skip

    server = start_process(command, tmp_path, name="inspect", ready_path="/config.json", port=free_port())
    try:
        config = httpx.get(server.url + "/config.json", timeout=10).json()
        assert config["headers"] == [["Authorization", "Bearer t0k"]]
        assert f"relaykit: inspector for http://127.0.0.1:9 at http://127.0.0.1:{server.port}/" in server.log()
    finally:
        assert server.stop() == 0


# --- card signatures ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tampered", [False, True], ids=["signed", "tampered"])
async def test_card_signatures_are_verified_against_their_jwks(tampered: bool) -> None:
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

    from relaykit.client import sign_card
    from relaykit.inspector._card_check import check_card
    from relaykit.inspector._session import new_http
    from relaykit.types import AgentCard, AgentInterface

    private = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
    served: dict[str, bytes] = {}

    async def handle(request: Request) -> Response:
        return Response(200, [("content-type", "application/json")], served[request.path])

    server = await MiniHTTP(handle).start()
    try:
        card = AgentCard(
            name="signed",
            description="d",
            version="1",
            supported_interfaces=[AgentInterface(url=f"http://{HOST}:{free_port()}/", protocol_binding="JSONRPC")],
        )
        signed = sign_card(card, private, kid="k1", jku=server.url + "/jwks.json")
        if tampered:
            signed = signed.model_copy(update={"description": "changed after signing"})
        served["/.well-known/agent-card.json"] = signed.to_json()
        served["/jwks.json"] = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "ES256", "use": "sig"}]}).encode()
        session = Session.parse({"url": server.url}, Target(), server.url)
        async with asyncio.timeout(T), new_http() as http:
            report, parsed = await check_card(session, http)
    finally:
        await server.aclose()
    assert parsed is not None
    finding = next(f for f in report["findings"] if f["field"] == "signatures[0]")
    if tampered:
        assert finding["level"] == "error"
        assert "does not verify" in finding["message"]
    else:
        assert finding["level"] == "ok"
        assert "verified with key 'k1'" in finding["message"]


# --- A2A 0.3 --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dual_echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``relaykit serve examples/echo.py``: A2A 1.0 and 0.3 on JSON-RPC and HTTP+JSON (the default)."""
    server = start_serve("examples/echo.py", Path(tmp_path_factory.mktemp("dual-echo")), name="echo")
    yield server
    stop_process(server.proc)


async def test_the_session_version_chooses_0_3_or_1_0(dual_echo: ServerProcess) -> None:
    send = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    async with asyncio.timeout(T), inspector_client(create_inspector(dual_echo.url)) as http:
        card = (await http.post("/api/card", json={"session": {}}, headers=API)).json()
        assert [(i["binding"], i["version"].split(".")[0], i["status"]) for i in card["interfaces"]] == [
            ("JSONRPC", "1", "reachable"),
            ("HTTP+JSON", "1", "reachable"),
            ("JSONRPC", "0", "reachable"),
            ("HTTP+JSON", "0", "reachable"),
        ]
        assert not [f for f in card["findings"] if f["level"] in ("error", "warning")]
        answers = {}
        for version in ("0.3", "1.0"):
            for transport in ("JSONRPC", "HTTP+JSON"):
                session = {"version": version, "transport": transport}
                body = {"session": session, "op": "SendMessage", "params": send}
                answer = (await http.post("/api/call", json=body, headers=API)).json()
                assert answer["version"].split(".")[0] == version.split(".")[0], answer
                assert answer["binding"] == transport
                assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # decoded: 1.0
                answers[version, transport] = answer["wire"]
        # What the agent sent: 0.3 JSON over JSON-RPC (kind, lower-case state), 0.3 ProtoJSON over REST.
        assert answers["0.3", "JSONRPC"]["result"]["kind"] == "task"
        assert answers["0.3", "JSONRPC"]["result"]["status"]["state"] == "completed"
        assert answers["0.3", "HTTP+JSON"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert answers["1.0", "JSONRPC"]["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert "kind" not in answers["1.0", "JSONRPC"]["result"]["task"]
        # A stream over 0.3: every event with its frame as sent.
        body = {"session": {"version": "0.3", "transport": "JSONRPC"}, "op": "SendStreamingMessage", "params": send}
        async with http.stream("POST", "/api/stream", json=body, headers=API) as response:
            lines = [json.loads(line) async for line in response.aiter_lines() if line.strip()]
        assert lines[0]["start"]
        assert lines[0]["version"].startswith("0.")
        events = [line for line in lines if "event" in line]
        assert events, lines
        assert all(line["wire"]["result"]["kind"] for line in events), lines
        assert lines[-1] == {"end": True, "time": lines[-1]["time"]}
        refused = await http.post(
            "/api/call", json={"session": {"version": "2.0"}, "op": "GetTask", "params": {"id": "x"}}, headers=API
        )
        assert refused.status_code == 400
        assert "1.0 and 0.3" in refused.json()["error"]["message"]


async def test_every_signature_of_a_served_dual_card_verifies(tmp_path: Path) -> None:
    # relaykit serve --card-key: the card without A2A-Version is the 1.0 card with the 0.3 members merged in; its
    # signatures cover the 1.0 form, a2a-sdk's form (API keys make them differ), a2a-sdk 0.3's form and the merged
    # JSON as served. The inspector reads that JSON, and judges each signature against the model's forms or the JSON
    # as received; the 0.3 one is said to cover the 0.3 members only.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from relaykit.inspector._card_check import check_card
    from relaykit.inspector._session import new_http

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (tmp_path / "card.pem").write_bytes(pem)
    (tmp_path / "keys.txt").write_text("alice alice-key\n")
    args = ["--card-key", str(tmp_path / "card.pem"), "--api-keys", str(tmp_path / "keys.txt")]
    server = start_serve("examples/echo.py", tmp_path, args=args, name="signed")
    try:
        session = Session.parse({"url": server.url}, Target(), server.url)
        async with asyncio.timeout(T), new_http() as http:
            report, parsed = await check_card(session, http)
    finally:
        stop_process(server.proc)
    assert parsed is not None
    assert "url" in report["raw"]  # the merged rendering
    findings = [f for f in report["findings"] if f["field"].startswith("signatures[")]
    assert len(findings) == 4, findings
    assert all(f["level"] == "ok" for f in findings), findings
    assert ["a2a-sdk 0.3's form" in f["message"] for f in findings] == [False, False, True, False], findings
