"""One error tree, one table, and the wire encoders/decoders for it.

    A2AError
    ├── TaskNotFoundError                 -32001  404  NOT_FOUND            TASK_NOT_FOUND
    ├── TaskNotCancelableError            -32002  400  FAILED_PRECONDITION  TASK_NOT_CANCELABLE
    ├── PushNotificationNotSupportedError -32003  400  FAILED_PRECONDITION  PUSH_NOTIFICATION_NOT_SUPPORTED
    ├── UnsupportedOperationError         -32004  400  FAILED_PRECONDITION  UNSUPPORTED_OPERATION
    ├── ContentTypeNotSupportedError      -32005  400  INVALID_ARGUMENT     CONTENT_TYPE_NOT_SUPPORTED
    ├── InvalidAgentResponseError         -32006  500  INTERNAL             INVALID_AGENT_RESPONSE
    ├── ExtendedAgentCardNotConfiguredError -32007 400 FAILED_PRECONDITION  EXTENDED_AGENT_CARD_NOT_CONFIGURED
    ├── ExtensionSupportRequiredError     -32008  400  FAILED_PRECONDITION  EXTENSION_SUPPORT_REQUIRED
    ├── VersionNotSupportedError          -32009  400  FAILED_PRECONDITION  VERSION_NOT_SUPPORTED
    ├── JSONParseError                    -32700  400  INVALID_ARGUMENT     INVALID_REQUEST
    ├── InvalidRequestError               -32600  400  INVALID_ARGUMENT     INVALID_REQUEST
    │   └── PayloadTooLargeError          -32600  413  INVALID_ARGUMENT     INVALID_REQUEST
    ├── MethodNotFoundError               -32601  404  NOT_FOUND            METHOD_NOT_FOUND
    ├── InvalidParamsError                -32602  400  INVALID_ARGUMENT     INVALID_PARAMS
    ├── InternalError                     -32603  500  INTERNAL             INTERNAL_ERROR
    ├── AuthenticationRequiredError       -32000  401  UNAUTHENTICATED      UNAUTHENTICATED
    ├── PermissionDeniedError             -32000  403  PERMISSION_DENIED    PERMISSION_DENIED
    ├── ResourceExhaustedError            -32000  429  RESOURCE_EXHAUSTED   RESOURCE_EXHAUSTED
    ├── ServiceUnavailableError           -32000  503  UNAVAILABLE          UNAVAILABLE
    └── client side: A2AClientError
        ├── A2AConnectionError, A2ATimeoutError, A2AReconnectError, A2AInvalidCardError, A2AResponseTooLargeError
        ├── A2AInsecureCredentialsError (refused before sending: credentials in clear to a non-loopback host)
        └── A2ATaskOutcomeError (carries the final Task)
            ├── A2ATaskFailedError, A2ATaskRejectedError
            └── A2ATaskAuthRequiredError, A2ATaskInputRequiredError (interrupted, and nothing answered)

The A2A rows are spec v1.0.1 §5.4 (digest §6.1); the standard JSON-RPC rows follow a2a-sdk's REST/gRPC mapping
(digest §6.2). The spec reserves no JSON-RPC code for the generic categories (auth, overload, outage), so they use the
JSON-RPC "server error" code -32000 and are told apart by ``ErrorInfo.reason``, which is what clients should read.
A decoded error whose reason and code the table does not know is an ``InternalError`` that keeps the wire's ``code``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pydantic import ValidationError

    from relaykit._types import Task

__all__ = [
    "A2AClientError",
    "A2AConnectionError",
    "A2AError",
    "A2AInsecureCredentialsError",
    "A2AInvalidCardError",
    "A2AReconnectError",
    "A2AResponseTooLargeError",
    "A2ATaskAuthRequiredError",
    "A2ATaskFailedError",
    "A2ATaskInputRequiredError",
    "A2ATaskOutcomeError",
    "A2ATaskRejectedError",
    "A2ATimeoutError",
    "ArtifactTooLargeError",
    "AuthenticationRequiredError",
    "ContentTypeNotSupportedError",
    "ExtendedAgentCardNotConfiguredError",
    "ExtensionSupportRequiredError",
    "InternalError",
    "InvalidAgentResponseError",
    "InvalidParamsError",
    "InvalidRequestError",
    "JSONParseError",
    "MethodNotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PushNotificationNotSupportedError",
    "ResourceExhaustedError",
    "ServiceUnavailableError",
    "TaskNotCancelableError",
    "TaskNotFoundError",
    "UnsupportedOperationError",
    "VersionNotSupportedError",
    "error_from_grpc",
    "error_from_jsonrpc",
    "error_from_status",
    "invalid_params",
]

DOMAIN = "a2a-protocol.org"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"

# gRPC status names to their numeric codes (google.rpc.Code).
GRPC_CODES: dict[str, int] = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}


class A2AError(Exception):
    """Base of every relaykit error; server-side ones carry their wire identity as class attributes.

    >>> err = TaskNotFoundError(task_id="t-1")
    >>> (err.code, err.http_status, err.grpc_status, err.reason, str(err))
    (-32001, 404, 'NOT_FOUND', 'TASK_NOT_FOUND', 'Task not found')
    """

    code: ClassVar[int] = -32603
    http_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    reason: ClassVar[str] = "INTERNAL_ERROR"
    default_message: ClassVar[str] = "Internal error"

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: dict[str, str] | None = None,
        field_violations: list[tuple[str, str]] | None = None,
        details: list[dict[str, Any]] | None = None,
        **info: str,
    ) -> None:
        self.message = message or self.default_message
        # ErrorInfo metadata values are strings on the wire; keyword extras (task_id=…) become camelCase keys.
        meta = dict(metadata or {})
        for key, value in info.items():
            meta[_camel(key)] = str(value)
        self.metadata = meta
        self.field_violations = field_violations or []
        self.details = details
        super().__init__(self.message)

    def to_details(self) -> list[dict[str, Any]]:
        """The ``@type`` detail objects: an ErrorInfo, plus a BadRequest for field violations."""
        if self.details is not None:
            return self.details
        out: list[dict[str, Any]] = [
            {"@type": ERROR_INFO_TYPE, "reason": self.reason, "domain": DOMAIN, "metadata": self.metadata}
        ]
        if self.field_violations:
            out.append(
                {
                    "@type": BAD_REQUEST_TYPE,
                    "fieldViolations": [{"field": f, "description": d} for f, d in self.field_violations],
                }
            )
        return out

    def to_jsonrpc(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member: ``{"code", "message", "data": [ErrorInfo, …]}``."""
        return {"code": self.code, "message": self.message, "data": self.to_details()}

    def to_status(self) -> dict[str, Any]:
        """The REST google.rpc.Status body: ``{"error": {"code", "status", "message", "details"}}``."""
        return {
            "error": {
                "code": self.http_status,
                "status": self.grpc_status,
                "message": self.message,
                "details": self.to_details(),
            }
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


class TaskNotFoundError(A2AError):
    """The task does not exist, or the caller may not see it (the two answer alike)."""

    code, http_status, grpc_status, reason = -32001, 404, "NOT_FOUND", "TASK_NOT_FOUND"
    default_message = "Task not found"


class TaskNotCancelableError(A2AError):
    """The task is terminal or the executor refuses to cancel."""

    code, http_status, grpc_status, reason = -32002, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"
    default_message = "Task cannot be canceled"


class PushNotificationNotSupportedError(A2AError):
    """Push notifications are not enabled on this agent."""

    code, http_status, grpc_status = -32003, 400, "FAILED_PRECONDITION"
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"
    default_message = "Push Notification is not supported"


class UnsupportedOperationError(A2AError):
    """The operation is not supported here, or not in the task's current state."""

    code, http_status, grpc_status, reason = -32004, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"
    default_message = "This operation is not supported"


class ContentTypeNotSupportedError(A2AError):
    """A media type in the request is not supported."""

    code, http_status, grpc_status, reason = -32005, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"
    default_message = "Incompatible content types"


class InvalidAgentResponseError(A2AError):
    """The agent produced output that breaks the protocol (e.g. a Message after a Task)."""

    code, http_status, grpc_status, reason = -32006, 500, "INTERNAL", "INVALID_AGENT_RESPONSE"
    default_message = "Invalid agent response"


class ExtendedAgentCardNotConfiguredError(A2AError):
    """The card advertises an extended card, but none is configured."""

    code, http_status, grpc_status = -32007, 400, "FAILED_PRECONDITION"
    reason = "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    default_message = "Authenticated Extended Card is not configured"


class ExtensionSupportRequiredError(A2AError):
    """A required extension was not activated by the client."""

    code, http_status, grpc_status, reason = -32008, 400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED"
    default_message = "Extension support required"


class VersionNotSupportedError(A2AError):
    """The requested A2A version is not served here."""

    code, http_status, grpc_status, reason = -32009, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"
    default_message = "Version not supported"


class ArtifactTooLargeError(InvalidAgentResponseError):
    """The agent published more artifact bytes than the server allows (``max_artifact_bytes``); the task FAILS with
    this error's message."""


class JSONParseError(A2AError):
    """The request body is not valid JSON."""

    code, http_status, grpc_status, reason = -32700, 400, "INVALID_ARGUMENT", "INVALID_REQUEST"
    default_message = "Invalid JSON payload"


class InvalidRequestError(A2AError):
    """The request is not a valid JSON-RPC request / HTTP request."""

    code, http_status, grpc_status, reason = -32600, 400, "INVALID_ARGUMENT", "INVALID_REQUEST"
    default_message = "Invalid request"


class PayloadTooLargeError(InvalidRequestError):
    """The request body exceeds the configured limit (HTTP 413)."""

    http_status = 413
    default_message = "Request body too large"


class MethodNotFoundError(A2AError):
    """No such method or route."""

    code, http_status, grpc_status, reason = -32601, 404, "NOT_FOUND", "METHOD_NOT_FOUND"
    default_message = "Method not found"


class InvalidParamsError(A2AError):
    """Parameters fail validation: a missing REQUIRED field, a wrong type, a value out of range."""

    code, http_status, grpc_status, reason = -32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS"
    default_message = "Invalid parameters"


class InternalError(A2AError):
    """An unexpected server failure (details are logged, never sent).

    Decoded by a client, it also stands for an error whose reason and code the table does not know (a -32000 "Server
    error" without an ErrorInfo, a vendor's -32050): that instance's ``code`` is the code the server sent.
    """


class AuthenticationRequiredError(A2AError):
    """Credentials are missing or invalid; ``challenges`` are the ``WWW-Authenticate`` values a 401 carries."""

    code, http_status, grpc_status, reason = -32000, 401, "UNAUTHENTICATED", "UNAUTHENTICATED"
    default_message = "Authentication required"
    challenges: tuple[str, ...] = ()

    def www_authenticate(self) -> list[str]:
        """The challenges a refusal carries: ``WWW-Authenticate`` headers on HTTP, ``www-authenticate`` trailing
        metadata on gRPC (the same values, so a client learns how to authenticate on either); ``Bearer`` when no
        scheme is known."""
        return list(self.challenges) or ['Bearer realm="a2a"']


class PermissionDeniedError(A2AError):
    """The caller is authenticated but not allowed to do this."""

    code, http_status, grpc_status, reason = -32000, 403, "PERMISSION_DENIED", "PERMISSION_DENIED"
    default_message = "Permission denied"


class ResourceExhaustedError(A2AError):
    """A configured limit was reached (concurrent executions, queued messages, subscribers)."""

    code, http_status, grpc_status, reason = -32000, 429, "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"
    default_message = "Resource limit reached"


class ServiceUnavailableError(A2AError):
    """A backing service (store, bus) is unreachable, or the server is shutting down."""

    code, http_status, grpc_status, reason = -32000, 503, "UNAVAILABLE", "UNAVAILABLE"
    default_message = "Service unavailable"


# --- client-side errors ------------------------------------------------------------------------------------


class A2AClientError(A2AError):
    """Raised by the client for failures that did not come from the server's error table."""


class A2AConnectionError(A2AClientError):
    """The server could not be reached, or the connection broke."""

    default_message = "Could not connect to the agent"


class A2ATimeoutError(A2AClientError):
    """A request or stream timed out."""

    default_message = "The agent did not answer in time"


class A2AReconnectError(A2AConnectionError):
    """A dropped stream could not be resumed within the allowed attempts."""

    default_message = "Stream could not be resumed"

    def __init__(self, message: str | None = None, *, attempts: int = 0) -> None:
        self.attempts = attempts
        super().__init__(message or f"Stream could not be resumed after {attempts} attempts")


class A2AInvalidCardError(A2AClientError):
    """The agent card is unusable (no interface this client can speak, bad JSON, bad signature)."""

    default_message = "Invalid agent card"


class A2AResponseTooLargeError(A2AClientError):
    """The agent sent more than the client accepts (``Client(max_response_bytes=…)``) in one response body, agent
    card or stream event; the client stopped reading and closed the connection."""

    default_message = "The agent's response is too large"


class A2AInsecureCredentialsError(A2AClientError):
    """The client refused to send credentials (an auth header, a URL's userinfo) over a connection without TLS to a
    host that is not loopback; nothing was sent. ``Client(allow_insecure_credentials=True)`` allows it."""

    default_message = "Refused to send credentials without TLS to a remote host"


class A2ATaskOutcomeError(A2AClientError):
    """A task ended in a state the caller treats as failure; ``task`` is the final Task."""

    def __init__(self, task: Task, message: str | None = None) -> None:
        self.task = task
        text = ""
        if task.status.message is not None:
            text = task.status.message.text
        super().__init__(message or text or f"task {task.id} ended {task.status.state.value}")


class A2ATaskFailedError(A2ATaskOutcomeError):
    """The task ended FAILED."""


class A2ATaskRejectedError(A2ATaskOutcomeError):
    """The task ended REJECTED."""


class A2ATaskAuthRequiredError(A2ATaskOutcomeError):
    """The task paused in AUTH_REQUIRED and no handler resolved it."""


class A2ATaskInputRequiredError(A2ATaskOutcomeError):
    """The task paused in INPUT_REQUIRED and no ``on_input_required`` handler answered it."""


# --- decoding wire errors back into classes ----------------------------------------------------------------

_SERVER_ERRORS: tuple[type[A2AError], ...] = (
    TaskNotFoundError,
    TaskNotCancelableError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
    ContentTypeNotSupportedError,
    InvalidAgentResponseError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    VersionNotSupportedError,
    JSONParseError,
    InvalidRequestError,
    MethodNotFoundError,
    InvalidParamsError,
    InternalError,
    AuthenticationRequiredError,
    PermissionDeniedError,
    ResourceExhaustedError,
    ServiceUnavailableError,
)
# Classify by ErrorInfo.reason first (the spec's advice), then by code; the first class listed wins a tie.
_BY_REASON: dict[str, type[A2AError]] = {}
_BY_CODE: dict[int, type[A2AError]] = {}
_BY_HTTP: dict[int, type[A2AError]] = {}
for _cls in _SERVER_ERRORS:
    _BY_REASON.setdefault(_cls.reason, _cls)
    _BY_CODE.setdefault(_cls.code, _cls)
# -32000 is JSON-RPC's generic "server error": four classes share it and only their reason tells them apart, so the
# code alone names none of them (it used to name AuthenticationRequiredError: a "busy" read as an auth failure).
del _BY_CODE[-32000]
_BY_REASON["INVALID_REQUEST"] = InvalidRequestError
_BY_HTTP.update(
    {
        401: AuthenticationRequiredError,
        403: PermissionDeniedError,
        # A 404 without an A2A error body is an unknown route (an A2A "not found" always carries its ErrorInfo).
        404: MethodNotFoundError,
        413: PayloadTooLargeError,
        429: ResourceExhaustedError,
        503: ServiceUnavailableError,
        500: InternalError,
    }
)


def _reason_of(details: Any) -> tuple[str | None, dict[str, str]]:
    if isinstance(details, list):
        for item in details:
            if isinstance(item, dict) and str(item.get("@type", "")).endswith("google.rpc.ErrorInfo"):
                meta = item.get("metadata") or {}
                return item.get("reason"), {str(k): str(v) for k, v in meta.items()}
    return None, {}


def _build(cls: type[A2AError], message: Any, meta: dict[str, str], details: Any) -> A2AError:
    err = cls(str(message) if message else None, metadata=meta)
    if isinstance(details, list):
        err.details = details
    return err


def error_from_jsonrpc(error: dict[str, Any]) -> A2AError:
    """Turn a JSON-RPC ``error`` object into the matching ``A2AError`` subclass; one the table does not know is an
    ``InternalError`` with the wire's code and message."""
    reason, meta = _reason_of(error.get("data"))
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = None
    cls = _BY_REASON.get(reason or "") if reason else None
    if cls is None or (code is not None and cls.code != code and code in _BY_CODE):
        cls = _BY_CODE.get(code) if code is not None else None
    if cls is None:
        err = _build(InternalError, error.get("message"), meta, error.get("data"))
        if code is not None:
            # This error's own code (a ClassVar elsewhere): a caller, or a proxy passing it on, sees what was sent.
            err.code = code  # type: ignore[misc]
        return err
    return _build(cls, error.get("message"), meta, error.get("data"))


def error_from_status(http_status: int, body: Any) -> A2AError:
    """Turn a REST error response (google.rpc.Status body, or anything else) into an ``A2AError``."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        reason, meta = _reason_of(err.get("details"))
        cls = _BY_REASON.get(reason or "")
        if cls is InvalidRequestError and http_status == 413:
            cls = PayloadTooLargeError
        if cls is None:
            cls = _BY_HTTP.get(http_status, InvalidParamsError if http_status == 400 else InternalError)
        return _build(cls, err.get("message"), meta, err.get("details"))
    cls = _BY_HTTP.get(http_status, InvalidRequestError if 400 <= http_status < 500 else InternalError)
    return cls(f"HTTP {http_status}")


def error_from_grpc(status_name: str, message: str, details: list[dict[str, Any]] | None) -> A2AError:
    """Turn a gRPC status (name, message, decoded details) into an ``A2AError``."""
    reason, meta = _reason_of(details)
    cls = _BY_REASON.get(reason or "")
    if cls is None:
        cls = {
            "NOT_FOUND": TaskNotFoundError,
            "INVALID_ARGUMENT": InvalidParamsError,
            "UNAUTHENTICATED": AuthenticationRequiredError,
            "PERMISSION_DENIED": PermissionDeniedError,
            "RESOURCE_EXHAUSTED": ResourceExhaustedError,
            "UNAVAILABLE": ServiceUnavailableError,
            "UNIMPLEMENTED": UnsupportedOperationError,
        }.get(status_name, InternalError)
    return _build(cls, message, meta, details)


def invalid_params(exc: ValidationError, prefix: str = "") -> InvalidParamsError:
    """A pydantic validation failure as InvalidParams, naming each bad field the way the client spelled it.

    Every binding decodes into the same models, so this is the one translation of pydantic's errors (JSON-RPC, REST
    and gRPC alike).
    """
    violations: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        msg = err["msg"].removeprefix("Value error, ")
        violations.append((prefix + loc if loc else prefix.rstrip(".") or "(request)", msg))
    first = violations[0]
    summary = f"{first[0]}: {first[1]}" if first[0] else first[1]
    if len(violations) > 1:
        summary += f" (and {len(violations) - 1} more)"
    return InvalidParamsError(f"invalid parameters: {summary}", field_violations=violations)
