"""A2A errors as gRPC statuses: the code of the error table and a ``google.rpc.Status`` with packed details.

The status travels in the ``grpc-status-details-bin`` trailer: an ``ErrorInfo`` (domain ``a2a-protocol.org``) and, for
validation failures, a ``BadRequest`` with one field violation per bad field (digest §6.1/6.2).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2, json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from relaykit._errors import BAD_REQUEST_TYPE, ERROR_INFO_TYPE, GRPC_CODES, A2AError, AuthenticationRequiredError

__all__ = ["error_status"]


def _pack(detail: dict[str, Any]) -> any_pb2.Any | None:
    kind = detail.get("@type")
    packed = any_pb2.Any()
    if kind == ERROR_INFO_TYPE:
        info = error_details_pb2.ErrorInfo(
            reason=str(detail.get("reason", "")),
            domain=str(detail.get("domain", "")),
            metadata={str(k): str(v) for k, v in (detail.get("metadata") or {}).items()},
        )
        packed.Pack(info)
        return packed
    if kind == BAD_REQUEST_TYPE:
        violations = [
            error_details_pb2.BadRequest.FieldViolation(
                field=str(v.get("field", "")), description=str(v.get("description", ""))
            )
            for v in detail.get("fieldViolations") or []
            if isinstance(v, dict)
        ]
        packed.Pack(error_details_pb2.BadRequest(field_violations=violations))
        return packed
    try:
        json_format.ParseDict(detail, packed)
    except (json_format.ParseError, TypeError, KeyError):
        return None  # a detail type this process does not know: leave it out rather than fail the error
    return packed


def error_status(exc: A2AError) -> grpc.Status:
    """The gRPC status of an error: its code, its message, and the details in ``grpc-status-details-bin``.

    UNAUTHENTICATED also carries the challenges (``www-authenticate``, one entry per scheme) as trailing metadata:
    gRPC has no ``WWW-Authenticate`` header, and without them a client cannot tell which credential is expected.
    """
    details = [d for d in (_pack(item) for item in exc.to_details()) if d is not None]
    status = status_pb2.Status(code=GRPC_CODES.get(exc.grpc_status, 13), message=exc.message, details=details)
    result = rpc_status.to_status(status)
    if isinstance(exc, AuthenticationRequiredError):
        challenges = tuple(("www-authenticate", c) for c in exc.www_authenticate())
        result = result._replace(trailing_metadata=(*result.trailing_metadata, *challenges))
    return result
