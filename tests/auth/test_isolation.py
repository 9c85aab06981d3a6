"""Owner isolation keys on the principal: alice's tasks are invisible to bob on every binding and every operation
(get, list, cancel, subscribe, continue, push configs, push status), with JWTs and with API keys alike; and principals
from a host's Starlette authentication middleware are keyed by identity, never by display name, never "anonymous".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from auth.conftest import AUDIENCE, BINDINGS, IdentityProvider, Served, T
from auth.whoami_agent import whoami
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.routing import Mount

from relaykit import Task, TaskState
from relaykit.auth import APIKeyAuthenticator, Auth, JWTAuthenticator
from relaykit.client import APIKeyAuth, BearerAuth, Client
from relaykit.errors import TaskNotFoundError
from relaykit.http import create_app

HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture(params=["jwt", "api-key"])
async def two_callers(
    request: pytest.FixtureRequest, agent: Callable[..., Any], idp: IdentityProvider
) -> tuple[Served, Any, Any]:
    if request.param == "jwt":
        served = await agent(whoami, auth=Auth(JWTAuthenticator(idp.jwks_url, issuer=idp.issuer, audience=AUDIENCE)))
        return served, BearerAuth(idp.token("alice")), BearerAuth(idp.token("bob"))
    keys = APIKeyAuthenticator({"alice": "alice-key", "bob": "sha256:" + _sha("bob-key")})
    served = await agent(whoami, auth=Auth(keys))
    return served, APIKeyAuth("alice-key"), APIKeyAuth("bob-key")


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_alices_tasks_are_invisible_to_bob(two_callers: tuple[Served, Any, Any], binding: str) -> None:
    served, as_alice, as_bob = two_callers
    async with asyncio.timeout(T):
        alice = await served.client(binding, as_alice)
        bob = await served.client(binding, as_bob)
        done = await alice.send("hello")
        asking = await alice.send("ask")
        slow = await alice.send("slow", return_immediately=True)
        assert isinstance(done, Task)
        assert isinstance(asking, Task)
        assert isinstance(slow, Task)
        assert asking.status.state is TaskState.INPUT_REQUIRED
        await alice.create_push_config(done.id, HOOK, config_id="c1")

        for task in (done, asking, slow):
            with pytest.raises(TaskNotFoundError):
                await bob.get_task(task.id)
        assert [t async for t in bob.list_tasks()] == []
        with pytest.raises(TaskNotFoundError):
            await bob.cancel(slow.id)
        with pytest.raises(TaskNotFoundError):
            [e async for e in bob.subscribe(slow.id)]
        with pytest.raises(TaskNotFoundError):
            await bob.send("let me in", task_id=asking.id)
        with pytest.raises(TaskNotFoundError):
            await bob.get_push_config(done.id, "c1")
        with pytest.raises(TaskNotFoundError):
            await bob.list_push_configs(done.id)
        with pytest.raises(TaskNotFoundError):
            await bob.delete_push_config(done.id, "c1")
        with pytest.raises(TaskNotFoundError):
            await bob.create_push_config(done.id, HOOK, config_id="c2")

        # Nothing bob tried changed anything of alice's.
        assert {t.id for t in [t async for t in alice.list_tasks()]} == {done.id, asking.id, slow.id}
        assert [c.id for c in await alice.list_push_configs(done.id)] == ["c1"]
        assert (await alice.get_task(slow.id)).status.state is TaskState.WORKING
        answered = await alice.send("more", task_id=asking.id)
        assert isinstance(answered, Task)
        assert answered.status.state is TaskState.COMPLETED
        assert (await alice.cancel(slow.id)).status.state is TaskState.CANCELED


async def test_push_status_is_scoped_by_principal(two_callers: tuple[Served, Any, Any]) -> None:
    served, as_alice, as_bob = two_callers
    async with asyncio.timeout(T):
        alice = await served.client("JSONRPC", as_alice)
        task = await alice.send("hello")
        assert isinstance(task, Task)
        url = f"{served.url}/relaykit/push/status/{task.id}"
        async with httpx.AsyncClient(timeout=T) as http:
            mine = await http.get(url, headers={"A2A-Version": "1.0", **await as_alice.headers("PushStatus")})
            theirs = await http.get(url, headers={"A2A-Version": "1.0", **await as_bob.headers("PushStatus")})
    assert mine.status_code == 200
    assert theirs.status_code == 404
    assert theirs.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"


# --- principals from a Starlette authentication middleware ---------------------------------------------------


class _NoIdentity(BaseUser):
    """A user a middleware authenticated, of a class that never implemented ``identity``."""

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return "Nobody In Particular"


class _Named(SimpleUser):
    def __init__(self, identity: str, display_name: str) -> None:
        super().__init__(display_name)
        self._identity = identity

    @property
    def identity(self) -> str:
        return self._identity


class _HeaderBackend(AuthenticationBackend):
    """``X-User: IDENTITY;DISPLAY NAME`` (``-`` as identity: a user without one); no header: not authenticated."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        raw = conn.headers.get("x-user")
        if raw is None:
            return None
        identity, _, display = raw.partition(";")
        user: BaseUser = _NoIdentity() if identity == "-" else _Named(identity, display)
        return AuthCredentials(["authenticated"]), user


@pytest.fixture
async def behind_middleware() -> Any:
    a2a = create_app(whoami, store="memory", grace=0.5)
    host = Starlette(
        routes=[Mount("/", app=a2a)], middleware=[Middleware(AuthenticationMiddleware, backend=_HeaderBackend())]
    )
    await a2a.state.relaykit.start()
    try:
        yield host
    finally:
        await a2a.state.relaykit.stop()


def _client(app: Any, user: str | None) -> Client:
    headers = {"X-User": user} if user is not None else {}
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent.test", timeout=T)
    return Client("http://agent.test", transports=["JSONRPC"], http=http, headers=headers)


async def test_middleware_users_are_keyed_by_identity_not_display_name(behind_middleware: Any) -> None:
    async with asyncio.timeout(T):
        async with (
            _client(behind_middleware, "alice-1;Alice Smith") as first,
            _client(behind_middleware, "alice-2;Alice Smith") as second,
            _client(behind_middleware, "anonymous;Anonymous") as named_anonymous,
            _client(behind_middleware, None) as nobody,
        ):
            mine = await first.send("mine")
            assert isinstance(mine, Task)
            assert mine.artifacts[0].parts[0].text == "user:alice-1|mine"
            anonymous_task = await nobody.send("anonymous work")
            assert isinstance(anonymous_task, Task)
            assert anonymous_task.artifacts[0].parts[0].text == "anonymous|anonymous work"

            with pytest.raises(TaskNotFoundError):
                await second.get_task(mine.id)  # same display name, another person
            assert [t async for t in second.list_tasks()] == []
            with pytest.raises(TaskNotFoundError):
                await named_anonymous.get_task(anonymous_task.id)  # a user called "anonymous" is not anonymous
            assert [t async for t in named_anonymous.list_tasks()] == []
            with pytest.raises(TaskNotFoundError):
                await nobody.get_task(mine.id)


async def test_a_user_without_identity_is_refused_not_a_500(behind_middleware: Any) -> None:
    transport = httpx.ASGITransport(app=behind_middleware)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent.test", timeout=T) as http:
        answer = await http.post(
            "/",
            json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
            headers={"A2A-Version": "1.0", "X-User": "-;Nobody"},
        )
    assert answer.status_code == 401
    assert answer.json()["error"]["data"][0]["reason"] == "UNAUTHENTICATED"


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("binding", ["JSONRPC", "GRPC"])
async def test_isolation_in_scale_out_mode(
    agent: Callable[..., Any], postgres_url: str, redis_url: str, cluster_namespace: str, binding: str
) -> None:
    # Work goes through the Redis queue to a worker: the owner travels with it, and the executor sees the principal.
    keys = APIKeyAuthenticator({"alice": "alice-key", "bob": "bob-key"})
    served = await agent(whoami, auth=Auth(keys), store=postgres_url, bus=redis_url, namespace=cluster_namespace)
    async with asyncio.timeout(T):
        alice = await served.client(binding, APIKeyAuth("alice-key"))
        bob = await served.client(binding, APIKeyAuth("bob-key"))
        task = await alice.send("hello")
        assert isinstance(task, Task)
        assert task.artifacts[0].parts[0].text == "api-key:alice|hello"
        slow = await alice.send("slow", return_immediately=True)
        assert isinstance(slow, Task)
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(task.id)
        with pytest.raises(TaskNotFoundError):
            await bob.cancel(slow.id)
        assert [t async for t in bob.list_tasks()] == []
        assert (await alice.cancel(slow.id)).status.state is TaskState.CANCELED
