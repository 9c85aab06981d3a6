"""Push notifications: durable, ordered, retried webhook delivery; signed webhooks; an SSRF guard; a receiver.

Serving side (wired by ``create_app``; see ``push_*`` options there):

* ``PushSender``: the engine hook that queues each task event for the task's push configs in the outbox, and the
  delivery loop (per (task, config) in order, at least once, retries with backoff, dead letters, health);
* ``DeliveryPolicy``: timeouts, retries, backoff, give-up limits;
* ``WebhookGuard``: which webhook URLs may be reached (``push_allow`` / ``--push-allow`` opens private ones);
* ``PushSigner``: signs deliveries (``X-A2A-Signature`` JWT) and serves the JWKS.

Receiving side: ``WebhookReceiver`` (an ASGI app) and ``verify_request`` (for your own web framework).

>>> from relaykit.push import WebhookReceiver
>>> app = WebhookReceiver(print, token="secret")
"""

from relaykit.backends._base import DeliveryHealth, OutboxEntry, PushOutbox
from relaykit.backends.memory import MemoryPushOutbox
from relaykit.push._config_cache import ConfigCache
from relaykit.push._outbox import open_outbox
from relaykit.push._policy import DeliveryPolicy
from relaykit.push._receiver import WebhookReceiver
from relaykit.push._secrets import SealedPushConfigStore, new_secrets_key
from relaykit.push._sender import EVENT_ID_HEADER as EVENT_ID_HEADER
from relaykit.push._sender import PushEvents, PushSender
from relaykit.push._signing import SIGNATURE_HEADER as SIGNATURE_HEADER
from relaykit.push._signing import PushSigner, SignatureError, verify_request
from relaykit.push._ssrf import WebhookGuard, WebhookRefusedError, address_problem

# The header names are importable from here too, outside ``__all__``: SIGNATURE_HEADER, EVENT_ID_HEADER.
__all__ = [
    "ConfigCache",
    "DeliveryHealth",
    "DeliveryPolicy",
    "MemoryPushOutbox",
    "OutboxEntry",
    "PushEvents",
    "PushOutbox",
    "PushSender",
    "PushSigner",
    "SealedPushConfigStore",
    "SignatureError",
    "WebhookGuard",
    "WebhookReceiver",
    "WebhookRefusedError",
    "address_problem",
    "new_secrets_key",
    "open_outbox",
    "verify_request",
]
