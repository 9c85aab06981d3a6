"""Call metadata of the gRPC binding: what a call carries in (version, extensions, resume point, client
certificate) and what the binding sends back (activated extensions).

* ``a2a-version`` is required on the 1.0 service: missing or empty means 0.3, and anything but 1.x is
  ``VersionNotSupportedError``, as on HTTP; the 0.3 service takes none or 0.x.
* ``a2a-extensions`` (and ``x-a2a-extensions``) may come as several entries: they are one list, joined.
* ``last-event-id`` (SubscribeToTask) resumes after that event id, as SSE ``Last-Event-ID``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from relaykit._errors import VersionNotSupportedError
from relaykit._input import parse_event_id
from relaykit._proto import RESUME_FROM, SERVICE_NAME
from relaykit._v03 import _grpc as v03
from relaykit.server._context import CallContext

__all__ = [
    "call_metadata",
    "check_v03_version",
    "check_v10_version",
    "extension_metadata",
    "peer_certificate",
    "resume_point",
]

SUPPORTED_VERSIONS = ("1.0",)


def check_v10_version(value: str | None) -> None:
    text = (value or "").strip()
    if not text:
        raise VersionNotSupportedError(
            "missing a2a-version metadata: this server speaks A2A 1.0 only (send a2a-version: 1.0)",
            requested="0.3",
            supported="1.0",
        )
    if ".".join(text.split(".")[:2]) not in SUPPORTED_VERSIONS:
        raise VersionNotSupportedError(
            f"A2A version {text} is not supported; this server speaks 1.0", requested=text, supported="1.0"
        )


def check_v03_version(value: str | None) -> None:
    # The 0.3 service: no version (0.3 clients send none) or 0.x.
    text = (value or "").strip()
    if text and text.split(".", 1)[0] != "0":
        raise VersionNotSupportedError(
            f"A2A version {text} on the A2A 0.3 service {v03.SERVICE_NAME}: use {SERVICE_NAME} for 1.0",
            requested=text,
            supported="0.3",
        )


# Keys whose repeated entries are one comma-separated list (HTTP/2 field semantics, RFC 9110 §5.3): every entry
# counts. Any other repeated key keeps its first value (a second ``authorization`` is not appended to the first).
_LIST_KEYS = frozenset({"a2a-extensions", "x-a2a-extensions"})


def call_metadata(context: Any) -> dict[str, str]:
    """The call's text metadata, one value per key: the first, or for a list-valued key all of them joined."""
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            if key not in out:
                out[key] = value
            elif key in _LIST_KEYS:  # only a repeated key gets here: the usual call pays nothing for it
                out[key] = f"{out[key]},{value}"
    return out


def peer_certificate(context: Any) -> bytes | None:
    """The DER client certificate a mutual-TLS channel verified, if any."""
    auth_context = context.auth_context() or {}
    pem = auth_context.get("x509_pem_cert")
    if not pem:
        return None
    return ssl.PEM_cert_to_DER_cert(pem[0].decode("ascii"))


def resume_point(metadata: Mapping[str, str]) -> int | None:
    return parse_event_id(metadata.get(RESUME_FROM, ""), "last-event-id")


def extension_metadata(call: CallContext, *, v03: bool = False) -> tuple[tuple[str, str], ...]:
    """The activated extensions to echo; to a 0.3 call in 0.3's key (``x-a2a-extensions``) too."""
    if not call.activated_extensions:
        return ()
    value = ", ".join(sorted(call.activated_extensions))
    if v03:
        return (("a2a-extensions", value), ("x-a2a-extensions", value))
    return (("a2a-extensions", value),)
