"""Push delivery status as JSON: the body of ``GET /relaykit/push/status/{taskId}`` (served by the HTTP binding,
``relaykit.http``) and of ``relaykit push status`` (which can also read a store directly).

``GET /relaykit/push/status/{taskId}[?tenant=T]`` (needs ``A2A-Version: 1.0`` like every A2A call, and is scoped
like GetTask: a task the caller may not see answers 404 TaskNotFound) returns::

    {"taskId": "…", "configs": [{"configId": "…", "url": "…", "delivered": 3, "failures": 1,
      "consecutiveFailures": 0, "pending": 0, "dead": 0, "lastSuccess": "2026-…Z", "lastFailure": "2026-…Z",
      "lastError": "HTTP 503", "suspended": false}]}

``suspended``: the serving process stopped delivering to this config (its receiver kept failing; ``relaykit.push.
_suspend``); always false when read from a store directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from relaykit._model import format_timestamp
from relaykit.backends._base import DeliveryHealth

__all__ = ["STATUS_PATH", "health_json", "status_json"]

STATUS_PATH = "/relaykit/push/status/{task_id}"


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
        "suspended": health.suspended,
    }


def status_json(task_id: str, rows: Iterable[DeliveryHealth]) -> dict[str, Any]:
    """The status endpoint's body."""
    return {"taskId": task_id, "configs": [health_json(h) for h in rows]}
