"""Per-principal quotas (issue 14, Build 2 and Must show "one greedy principal"): a greedy caller hits 429 with
``Retry-After`` while other principals (and anonymous callers) are still served; 501st push config refused.

Principals come from a tiny ASGI middleware that authenticates ``X-Test-User: NAME`` (what an auth middleware
does: ``scope["user"]``), so the bindings and the handler run as in production.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from relaykit import agent
from relaykit.http._app import create_app
from relaykit.server._quotas import Quotas
from relaykit.testing import StreamingASGITransport

TIMEOUT = 20.0
gate: dict[str, asyncio.Event] = {}  # one Event per test (an Event belongs to the loop it first waits on)


@agent
async def held(context: Any) -> str:
    if context.text == "hold":
        await asyncio.wait_for(gate["release"].wait(), TIMEOUT)
    return str(context.text)


@agent
async def asks(context: Any) -> str:
    """Every message leaves its task waiting for more input (never terminal: follow-ups keep coming)."""
    context.requires_input("and?")


class _User:
    is_authenticated = True

    def __init__(self, name: str) -> None:
        self.identity = name


def with_test_users(app: Any) -> Any:
    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"x-test-user":
                    scope["user"] = _User(value.decode())
        await app(scope, receive, send)

    middleware.state = app.state  # type: ignore[attr-defined]  # InProcessClient-style start/stop below
    return middleware


@pytest.fixture
async def app_factory() -> AsyncIterator[Any]:
    apps: list[Any] = []
    gate["release"] = asyncio.Event()

    async def make(quotas: Quotas, executor: Any = held) -> httpx.AsyncClient:
        app = create_app(executor, store="memory", quotas=quotas, push_allow=("127.0.0.1",))
        await app.state.relaykit.start()
        apps.append(app)
        make.engines.append(app.state.relaykit.engine)  # type: ignore[attr-defined]
        transport = StreamingASGITransport(with_test_users(app))
        return httpx.AsyncClient(transport=transport, base_url="http://t", headers={"A2A-Version": "1.0"}, timeout=20)

    make.engines = []  # type: ignore[attr-defined]
    yield make
    gate["release"].set()
    for app in apps:
        await app.state.relaykit.stop()


def send_body(text: str, *, immediate: bool = True) -> dict[str, Any]:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": message, "configuration": {"returnImmediately": immediate}}


def as_user(name: str | None) -> dict[str, str]:
    return {"X-Test-User": name} if name else {}


async def test_greedy_principal_is_refused_and_others_are_served(app_factory: Any) -> None:
    client = await app_factory(Quotas(executions=5))
    async with client:
        for _ in range(5):
            r = await client.post("/message:send", json=send_body("hold"), headers=as_user("greedy"))
            assert r.status_code == 200, r.text
        r = await client.post("/message:send", json=send_body("hold"), headers=as_user("greedy"))
        assert r.status_code == 429, r.text
        assert r.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert int(r.headers["retry-after"]) >= 1
        assert "greedy" in r.json()["error"]["message"]
        # JSON-RPC says the same in its own shape, with the same header.
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_body("hold")}
        r = await client.post("/", json=rpc, headers=as_user("greedy"))
        assert r.json()["error"]["code"] == -32000
        assert r.json()["error"]["data"][0]["reason"] == "RESOURCE_EXHAUSTED"
        assert r.headers["retry-after"]
        # Another principal and anonymous callers are served meanwhile.
        for user in ("polite", None):
            r = await client.post("/message:send", json=send_body("hi", immediate=False), headers=as_user(user))
            assert r.status_code == 200, r.text
            assert r.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # Once greedy's executions finish, it is served again.
        gate["release"].set()
        for _ in range(100):
            r = await client.post("/message:send", json=send_body("hi", immediate=False), headers=as_user("greedy"))
            if r.status_code == 200:
                break
            await asyncio.sleep(0.02)  # bounded poll of the executions ending
        assert r.status_code == 200, r.text


async def test_request_rate_is_a_token_bucket_per_principal(app_factory: Any) -> None:
    client = await app_factory(Quotas(rate=1.0, burst=5))
    async with client:
        codes = [(await client.get("/tasks", headers=as_user("fast"))).status_code for _ in range(6)]
        assert codes == [200] * 5 + [429]
        r = await client.get("/tasks", headers=as_user("fast"))
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert (await client.get("/tasks", headers=as_user("other"))).status_code == 200
        assert (await client.get("/tasks")).status_code == 200  # anonymous: exempt


async def test_open_streams_per_principal(app_factory: Any) -> None:
    client = await app_factory(Quotas(streams=2))
    async with client:
        streams = []
        for _ in range(2):
            cm = client.stream("POST", "/message:stream", json=send_body("hold"), headers=as_user("streamer"))
            response = await cm.__aenter__()
            assert response.status_code == 200
            streams.append(cm)
        r = await client.post("/message:stream", json=send_body("hold"), headers=as_user("streamer"))
        assert r.status_code == 429, r.text
        assert r.headers["retry-after"]
        r = await client.post("/message:stream", json=send_body("hi"), headers=as_user("someone-else"))
        assert r.status_code == 200
        gate["release"].set()
        for cm in streams:
            await cm.__aexit__(None, None, None)


async def test_501st_push_config_is_refused(app_factory: Any) -> None:
    client = await app_factory(Quotas())
    async with client:
        r = await client.post("/message:send", json=send_body("hi", immediate=False))
        task_id = r.json()["task"]["id"]
        for i in range(500):
            r = await client.post(
                f"/tasks/{task_id}/pushNotificationConfigs",
                json={"url": f"http://127.0.0.1:9/hook/{i}", "id": f"c{i}"},
            )
            assert r.status_code == 200, r.text
        r = await client.post(
            f"/tasks/{task_id}/pushNotificationConfigs", json={"url": "http://127.0.0.1:9/hook/x", "id": "c500"}
        )
        assert r.status_code == 429, r.text
        assert "500 push notification configs" in r.json()["error"]["message"]
        # Replacing an existing config is still allowed.
        r = await client.post(
            f"/tasks/{task_id}/pushNotificationConfigs", json={"url": "http://127.0.0.1:9/hook/y", "id": "c7"}
        )
        assert r.status_code == 200, r.text


async def test_a_follow_up_s_inline_push_config_counts_against_the_cap(app_factory: Any) -> None:
    """Each follow-up message may bring its task one more config (inline, ``inline-<messageId>`` when it names
    none): past the task's cap it is refused as CreateTaskPushNotificationConfig refuses one, before the message
    runs; a follow-up naming a config the task has (replacing it) is still served."""
    client = await app_factory(Quotas(push_configs=2), asks)
    hook = {"url": "http://127.0.0.1:9/hook"}
    async with client:
        first = send_body("first", immediate=False)
        first["configuration"]["taskPushNotificationConfig"] = hook
        r = await client.post("/message:send", json=first)
        assert r.status_code == 200, r.text
        task_id = r.json()["task"]["id"]

        async def follow_up(text: str, push: dict[str, Any]) -> httpx.Response:
            body = send_body(text, immediate=False)
            body["message"]["taskId"] = task_id
            body["configuration"]["taskPushNotificationConfig"] = push
            return await client.post("/message:send", json=body)

        r = await follow_up("second", hook)
        assert r.status_code == 200, r.text
        listed = await client.get(f"/tasks/{task_id}/pushNotificationConfigs")
        ids = [c["id"] for c in listed.json()["configs"]]
        assert len(ids) == 2
        r = await follow_up("third", hook)
        assert r.status_code == 429, r.text
        assert "2 push notification configs" in r.json()["error"]["message"]
        assert int(r.headers["retry-after"]) >= 1
        r = await follow_up("fourth", {**hook, "id": ids[0]})
        assert r.status_code == 200, r.text
        listed = await client.get(f"/tasks/{task_id}/pushNotificationConfigs")
        task = (await client.get(f"/tasks/{task_id}")).json()
    assert [c["id"] for c in listed.json()["configs"]] == ids
    assert [m["parts"][0]["text"] for m in task["history"] if m["role"] == "ROLE_USER"] == ["first", "second", "fourth"]


async def test_queued_messages_per_principal(app_factory: Any) -> None:
    """Messages accepted but not yet running (waiting behind their task's execution) count against their
    principal: past ``queued`` the next is refused, another principal's are still accepted."""
    client = await app_factory(Quotas(queued=2))
    waiting = []
    async with client:
        r = await client.post("/message:send", json=send_body("hold"), headers=as_user("queuer"))
        task_id = r.json()["task"]["id"]

        def follow_up() -> dict[str, Any]:
            body = send_body("next")
            body["message"]["taskId"] = task_id
            return body

        # Each follow-up is queued behind "hold" (answered at once, returnImmediately, but waiting to run).
        for _ in range(2):
            waiting.append(
                asyncio.create_task(client.post("/message:send", json=follow_up(), headers=as_user("queuer")))
            )
        engine = app_factory.engines[-1]
        async with asyncio.timeout(TIMEOUT):
            while sum(engine._waiting.values()) != 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # bounded poll of the two being queued
        r = await client.post("/message:send", json=follow_up(), headers=as_user("queuer"))
        assert r.status_code == 429, r.text
        assert "2 messages waiting" in r.json()["error"]["message"]
        assert int(r.headers["retry-after"]) >= 1
        r = await client.post("/message:send", json=send_body("hi", immediate=False), headers=as_user("other"))
        assert r.status_code == 200, r.text
        # Once the queue drains (the held agent completes the task, so the follow-ups are refused then), queuer is
        # served again.
        gate["release"].set()
        await asyncio.gather(*waiting)
        async with asyncio.timeout(TIMEOUT):
            while engine._waiting:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # bounded poll of the queue draining
        r = await client.post("/message:send", json=send_body("hi", immediate=False), headers=as_user("queuer"))
        assert r.status_code == 200, r.text
