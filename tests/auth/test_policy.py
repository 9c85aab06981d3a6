"""The extended card goes only to authenticated callers, and interceptors see (operation, principal, request) and
may refuse with 403 / PERMISSION_DENIED, the same on every binding."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from auth.conftest import BINDINGS, T
from auth.whoami_agent import whoami

from relaykit import Task
from relaykit.auth import APIKeyAuthenticator, Auth, Principal
from relaykit.client import APIKeyAuth
from relaykit.errors import AuthenticationRequiredError, PermissionDeniedError
from relaykit.types import AgentCard, AgentSkill

EXTENDED = AgentCard(
    name="whoami (extended)",
    description="more for known callers",
    version="1.0.0",
    skills=[AgentSkill(id="secret", name="secret", description="only for callers with a key", tags=["x"])],
)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_extended_card_needs_a_credential(agent: Callable[..., Any], binding: str) -> None:
    # Anonymous callers are otherwise welcome here: the extended card alone needs the key (spec §5.13).
    auth = Auth(APIKeyAuthenticator({"alice": "alice-key"}), required=False)
    served = await agent(whoami, auth=auth, extended_card=EXTENDED)
    async with asyncio.timeout(T):
        anonymous = await served.client(binding)
        assert isinstance(await anonymous.send("hello"), Task)
        with pytest.raises(AuthenticationRequiredError):
            await anonymous.extended_card()
        wrong = await served.client(binding, APIKeyAuth("guess"))
        with pytest.raises(AuthenticationRequiredError):
            await wrong.extended_card()
        keyed = await served.client(binding, APIKeyAuth("alice-key"))
        card = await keyed.extended_card()
    assert card.name == "whoami (extended)"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_extended_card_without_any_auth_is_never_served(agent: Callable[..., Any], binding: str) -> None:
    served = await agent(whoami, extended_card=EXTENDED)
    async with asyncio.timeout(T):
        anonymous = await served.client(binding)
        with pytest.raises(AuthenticationRequiredError):
            await anonymous.extended_card()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_interceptors_audit_and_refuse(agent: Callable[..., Any], binding: str) -> None:
    seen: list[tuple[str, str, str]] = []

    async def policy(operation: str, principal: Principal, request: Any) -> None:
        seen.append((operation, principal.id, type(request).__name__))
        if principal.subject == "bob" and operation == "CancelTask":
            raise PermissionDeniedError("bob may not cancel tasks")

    auth = Auth(APIKeyAuthenticator({"alice": "alice-key", "bob": "bob-key"}), interceptors=[policy])
    served = await agent(whoami, auth=auth)
    async with asyncio.timeout(T):
        bob = await served.client(binding, APIKeyAuth("bob-key"))
        task = await bob.send("slow", return_immediately=True)
        assert isinstance(task, Task)
        with pytest.raises(PermissionDeniedError, match="may not cancel"):
            await bob.cancel(task.id)
        alice = await served.client(binding, APIKeyAuth("alice-key"))
        [t async for t in alice.list_tasks()]
    assert ("SendMessage", "api-key:bob", "SendMessageRequest") in seen
    assert ("CancelTask", "api-key:bob", "CancelTaskRequest") in seen
    assert ("ListTasks", "api-key:alice", "ListTasksRequest") in seen


async def test_refusal_is_403_on_http(agent: Callable[..., Any]) -> None:
    async def nobody(operation: str, principal: Principal, request: Any) -> None:
        raise PermissionDeniedError("closed for maintenance")

    served = await agent(whoami, auth=Auth(APIKeyAuthenticator({"alice": "k"}), interceptors=[nobody]))
    headers = {"A2A-Version": "1.0", "X-API-Key": "k"}
    async with httpx.AsyncClient(base_url=served.url, timeout=T) as http:
        rpc = await http.post(
            "/", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}, headers=headers
        )
        rest = await http.get("/tasks", headers=headers)
        status = await http.get("/relaykit/push/status/t-1", headers=headers)
    assert rpc.status_code == 403
    assert rpc.json()["error"]["data"][0]["reason"] == "PERMISSION_DENIED"
    assert "www-authenticate" not in rpc.headers
    assert rest.status_code == 403
    assert rest.json()["error"]["status"] == "PERMISSION_DENIED"
    assert status.status_code == 403


@pytest.mark.parametrize("binding", BINDINGS)
async def test_extended_card_describes_the_server_it_comes_from(agent: Callable[..., Any], binding: str) -> None:
    # EXTENDED names no interfaces, capabilities or security: the served one has the server's, like the public card
    # (supportedInterfaces is REQUIRED and must not be empty; a client switches to the extended card).
    served = await agent(whoami, auth=Auth(APIKeyAuthenticator({"alice": "alice-key"})), extended_card=EXTENDED)
    async with asyncio.timeout(T):
        keyed = await served.client(binding, APIKeyAuth("alice-key"))
        public = keyed.card
        card = await keyed.extended_card()
        assert isinstance(await keyed.send("still callable"), Task)
    assert card.name == "whoami (extended)"
    assert [s.id for s in card.skills] == ["secret"]
    assert card.supported_interfaces == public.supported_interfaces
    assert card.security_schemes == public.security_schemes
    assert card.security_requirements == public.security_requirements
    assert card.capabilities == public.capabilities
