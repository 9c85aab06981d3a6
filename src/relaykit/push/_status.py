"""relaykit's own read-only HTTP endpoints for push: delivery status per task, and the signing keys (JWKS).

``GET /relaykit/push/status/{taskId}[?tenant=T]`` (needs ``A2A-Version: 1.0`` like every A2A call, and is scoped
like GetTask: a task the caller may not see answers 404 TaskNotFound) returns::

    {"taskId": "…", "configs": [{"configId": "…", "url": "…", "delivered": 3, "failures": 1,
      "consecutiveFailures": 0, "pending": 0, "dead": 0, "lastSuccess": "2026-…Z", "lastFailure": "2026-…Z",
      "lastError": "HTTP 503"}]}

``GET /.well-known/jwks.json``: the public keys that verify ``X-A2A-Signature`` (only with a signing key).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pydantic_core

from relaykit._errors import A2AError, InternalError
from relaykit._model import format_timestamp
from relaykit.backends._base import DeliveryHealth
from relaykit.push._signing import PushSigner

if TYPE_CHECKING:
    from relaykit.http._asgi import Receive, Scope, Send
    from relaykit.push._sender import PushSender
    from relaykit.server._engine import TaskEngine

__all__ = ["STATUS_PATH", "JWKSEndpoint", "PushStatusEndpoint", "health_json", "status_json"]

STATUS_PATH = "/relaykit/push/status/{task_id}"

log = logging.getLogger("relaykit.push")


def health_json(health: DeliveryHealth) -> dict[str, Any]:
    """One config's delivery health as the status endpoint's JSON."""
    return {
        "configId": health.config_id,
        "url": health.url,
        "delivered": health.delivered,
        "failures": health.failures,
        "consecutiveFailures": health.consecutive_failures,
        "pending": health.pending,
        "dead": health.dead,
        "lastSuccess": format_timestamp(health.last_success) if health.last_success else None,
        "lastFailure": format_timestamp(health.last_failure) if health.last_failure else None,
        "lastError": health.last_error,
    }


def status_json(task_id: str, rows: Iterable[DeliveryHealth]) -> dict[str, Any]:
    """The status endpoint's body."""
    return {"taskId": task_id, "configs": [health_json(h) for h in rows]}


class PushStatusEndpoint:
    """``GET /relaykit/push/status/{task_id}`` (see the module docstring)."""

    def __init__(self, sender: PushSender, engine: TaskEngine) -> None:
        self.sender = sender
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Imported here: relaykit.http imports this module (create_app), and relaykit.push must import alone.
        from relaykit.http._asgi import call_context, check_version, query_params, send_bytes

        try:
            check_version(scope)
            task_id = str(scope.get("path_params", {}).get("task_id", ""))
            tenant = next((v for k, v in query_params(scope) if k == "tenant"), "")
            call = call_context(scope, tenant)
            await self.engine.get_task(task_id, call, tenant=tenant)
            rows = await self.sender.health(task_id, tenant=tenant or call.tenant, owner=call.user)
            await send_bytes(send, 200, json.dumps(status_json(task_id, rows)).encode(), b"application/json")
        except A2AError as exc:
            await send_bytes(send, exc.http_status, pydantic_core.to_json(exc.to_status()), b"application/json")
        except Exception:
            log.exception("push status request failed")
            error = InternalError()
            await send_bytes(send, error.http_status, pydantic_core.to_json(error.to_status()), b"application/json")


class JWKSEndpoint:
    """``GET /.well-known/jwks.json``: the push signing keys, cacheable for five minutes."""

    def __init__(self, signer: PushSigner) -> None:
        self.body = json.dumps(signer.jwks()).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from relaykit.http._asgi import send_bytes

        extra = [(b"cache-control", b"public, max-age=300"), (b"access-control-allow-origin", b"*")]
        await send_bytes(send, 200, self.body, b"application/json", extra)
