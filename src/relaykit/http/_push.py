"""The HTTP endpoints of push notifications: delivery status per task, and the signing keys (JWKS).

``GET /relaykit/push/status/{taskId}[?tenant=T]``: the JSON of ``relaykit.push._status`` (needs ``A2A-Version: 1.0``
like every A2A call, is authenticated like every A2A call (operation ``PushStatus`` for interceptors), and is scoped
like GetTask: a task the caller may not see answers 404 TaskNotFound).

``GET /.well-known/jwks.json``: the public keys that verify ``X-A2A-Signature`` and the card's signatures (only with
a signing key).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import pydantic_core

from relaykit._errors import A2AError, InternalError
from relaykit.http._asgi import (
    Receive,
    Scope,
    Send,
    auth_headers,
    authenticate,
    call_context,
    check_version,
    query_params,
    send_bytes,
)
from relaykit.push._status import STATUS_PATH, status_json

if TYPE_CHECKING:
    from relaykit.auth._gate import Auth
    from relaykit.push._sender import PushSender
    from relaykit.server._engine import TaskEngine

__all__ = ["JWKS_PATH", "STATUS_PATH", "JWKSEndpoint", "PushStatusEndpoint"]

JWKS_PATH = "/.well-known/jwks.json"

log = logging.getLogger("relaykit.push")


class PushStatusEndpoint:
    """``GET /relaykit/push/status/{task_id}`` (see the module docstring)."""

    def __init__(self, sender: PushSender, engine: TaskEngine, auth: Auth) -> None:
        self.sender = sender
        self.engine = engine
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            principal = await authenticate(scope, self.auth, "HTTP")
            check_version(scope)
            task_id = str(scope.get("path_params", {}).get("task_id", ""))
            tenant = next((v for k, v in query_params(scope) if k == "tenant"), "")
            if self.auth.interceptors:
                await self.auth.authorize("PushStatus", principal, {"taskId": task_id, "tenant": tenant})
            call = call_context(scope, tenant, principal)
            await self.engine.get_task(task_id, call, tenant=tenant)
            rows = await self.sender.health(task_id, tenant=tenant or call.tenant, owner=call.user)
            await send_bytes(send, 200, json.dumps(status_json(task_id, rows)).encode(), b"application/json")
        except A2AError as exc:
            body = pydantic_core.to_json(exc.to_status())
            await send_bytes(send, exc.http_status, body, b"application/json", auth_headers(exc))
        except Exception:
            log.exception("push status request failed")
            error = InternalError()
            await send_bytes(send, error.http_status, pydantic_core.to_json(error.to_status()), b"application/json")


class JWKSEndpoint:
    """``GET /.well-known/jwks.json``: the push and card signing keys, cacheable for five minutes."""

    def __init__(self, jwks: dict[str, Any]) -> None:
        self.body = json.dumps(jwks).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extra = [(b"cache-control", b"public, max-age=300"), (b"access-control-allow-origin", b"*")]
        await send_bytes(send, 200, self.body, b"application/json", extra)
