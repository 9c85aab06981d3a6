"""One webhook delivery attempt: the HTTP client (connecting through the SSRF guard, no redirects, no proxies from
the environment), the headers of a notification, and the POST with its outcome ``(ok, error, retry_after)``."""

from __future__ import annotations

import asyncio
import contextvars
import logging

import httpcore
import httpx

from relaykit._types import TaskPushNotificationConfig
from relaykit.backends._base import OutboxEntry
from relaykit.push._policy import DeliveryPolicy
from relaykit.push._signing import SIGNATURE_HEADER, PushSigner
from relaykit.push._ssrf import GuardedBackend, WebhookGuard

__all__ = ["EVENT_ID_HEADER", "USER_AGENT", "post_webhook", "quiet_webhook_logs", "webhook_client", "webhook_headers"]

EVENT_ID_HEADER = "X-Relaykit-Event-Id"
USER_AGENT = "relaykit-push/0.1"

# Set while a webhook request is in flight: httpx logs every request URL at INFO, and a webhook URL may carry a
# secret in its query string. Its log records are dropped inside deliveries (the health record has the outcome).
_DELIVERING: contextvars.ContextVar[bool] = contextvars.ContextVar("relaykit_push_delivering", default=False)


class _QuietDeliveries(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _DELIVERING.get()


_QUIET = _QuietDeliveries()
_MAX_RESPONSE = 64 * 1024  # bytes of a webhook's response body read (and thrown away) so the connection is reused


def quiet_webhook_logs() -> None:
    """Drop httpx's request log lines inside deliveries (installed once)."""
    if _QUIET not in logging.getLogger("httpx").filters:
        logging.getLogger("httpx").addFilter(_QUIET)


def webhook_client(guard: WebhookGuard, policy: DeliveryPolicy) -> httpx.AsyncClient:
    """The client deliveries share: httpx's pool, but connecting through the SSRF guard."""
    ssl_context = httpx.create_ssl_context()
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, trust_env=False)
    # The pool httpx would build, but connecting through the SSRF guard (httpx has no backend parameter).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=policy.concurrency,
        max_keepalive_connections=min(policy.concurrency, 32),
        keepalive_expiry=30.0,
        network_backend=GuardedBackend(guard),
    )
    return httpx.AsyncClient(
        transport=transport,
        timeout=policy.timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"user-agent": USER_AGENT},
    )


def webhook_headers(
    entry: OutboxEntry, config: TaskPushNotificationConfig, signer: PushSigner | None
) -> dict[str, str]:
    """The headers of one delivery attempt of ``entry`` to ``config``."""
    media = "application/json" if config.protocol_version else "application/a2a+json"
    headers = {"content-type": media, EVENT_ID_HEADER: entry.event_id}
    auth = config.authentication
    if auth is not None and auth.scheme:
        headers["authorization"] = f"{auth.scheme} {auth.credentials}" if auth.credentials else auth.scheme
    if config.token:
        headers["x-a2a-notification-token"] = config.token
    if signer is not None:
        headers[SIGNATURE_HEADER] = signer.sign(body=entry.body, task_id=entry.task_id, event_id=entry.event_id)
    return headers


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: ignored, the backoff applies


async def post_webhook(
    http: httpx.AsyncClient,
    entry: OutboxEntry,
    config: TaskPushNotificationConfig,
    headers: dict[str, str],
    within: float,
) -> tuple[bool, str, float | None]:
    """One POST of ``entry`` to ``config.url`` within ``within`` seconds: ``(ok, error, retry_after)``."""
    quiet = _DELIVERING.set(True)
    try:
        async with asyncio.timeout(within):
            async with http.stream("POST", config.url, content=entry.body, headers=headers) as response:
                status = response.status_code
                retry_after = _retry_after(response.headers.get("retry-after"))
                size = 0
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > _MAX_RESPONSE:
                        break
    except (TimeoutError, httpx.TimeoutException):
        return False, f"timed out after {within:g} s", None
    except (httpx.LocalProtocolError, httpx.InvalidURL, UnicodeError) as exc:
        # A request that could not be written: a header value httpx cannot encode as ASCII (UnicodeEncodeError) or
        # h11 refuses (CR/LF: LocalProtocolError), or a URL it cannot use. Their messages quote the offending value,
        # which may be a credential: the error (shown to the config's owner, logged) names the kind alone.
        return False, f"{type(exc).__name__}: the request could not be sent (invalid header value or URL)", None
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"[:500], None
    finally:
        _DELIVERING.reset(quiet)
    if 200 <= status < 300:
        return True, "", None
    return False, f"HTTP {status}", retry_after
