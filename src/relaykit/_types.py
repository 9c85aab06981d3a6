"""A2A 1.0 data objects: tasks, messages, parts, artifacts, stream events and request/response messages.

Shapes follow ``lf.a2a.v1`` (``specification/a2a.proto``) field for field; encoding rules live in ``_model``.
Invariants checked at construction (so nothing malformed enters the engine or leaves a binding):

* a ``Part`` carries exactly one of ``text | raw | url | data``;
* ``StreamResponse`` / ``SendMessageResponse`` carry exactly one payload;
* a ``Message`` has a non-UNSPECIFIED role and between one and ``MAX_PARTS`` parts; an ``Artifact`` at least one;
* ids a client chooses are ``_model.Id``s (bounded length, no NUL);
* ``historyLength`` / ``pageSize`` are never negative.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated, Any, Self, cast

import pydantic_core
from pydantic import Field, GetCoreSchemaHandler, PlainSerializer, field_validator, model_serializer, model_validator
from pydantic_core import CoreSchema, core_schema

from relaykit._model import A2AModel, Base64Bytes, Id, Struct, Timestamp

__all__ = [
    "JSON_NULL",
    "MAX_PARTS",
    "Artifact",
    "AuthenticationInfo",
    "CancelTaskRequest",
    "DeleteTaskPushNotificationConfigRequest",
    "GetExtendedAgentCardRequest",
    "GetTaskPushNotificationConfigRequest",
    "GetTaskRequest",
    "ListTaskPushNotificationConfigsRequest",
    "ListTaskPushNotificationConfigsResponse",
    "ListTasksRequest",
    "ListTasksResponse",
    "Message",
    "Part",
    "Role",
    "SendMessageConfiguration",
    "SendMessageRequest",
    "SendMessageResponse",
    "StreamResponse",
    "SubscribeToTaskRequest",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskPushNotificationConfig",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdateEvent",
    "new_id",
    "stream_json",
]


def new_id() -> str:
    """A fresh opaque identifier (UUID4 text), as the spec suggests for task, context and message ids.

    Formatted straight from 16 random bytes (version 4, RFC 4122 variant): the same ids as ``str(uuid.uuid4())``
    at a fraction of the cost, and a request makes three of them. The bytes come from ``os.urandom`` in batches:
    one ``getrandom`` system call per id cost more than the rest of making it.
    """
    try:
        h = _RANDOM.pop()
    except IndexError:
        h = _refill()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


# The variant nibble (RFC 4122: 10xx) for each random hex digit: a dict lookup rather than int(digit, 16) & 3.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}

# Random 16-byte values as hex, each handed out once: ``list.pop`` and ``list.extend`` are atomic, so threads never
# share one (two threads refilling at once just add two fresh batches). Emptied in a forked child, which must not
# hand out its parent's values.
_RANDOM: list[str] = []
_BATCH = 256


def _refill() -> str:
    data = os.urandom(16 * _BATCH).hex()
    batch = [data[i : i + 32] for i in range(0, len(data), 32)]
    h = batch.pop()
    _RANDOM.extend(batch)
    return h


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_RANDOM.clear)


class _ProtoEnum(StrEnum):
    """A proto enum: wire value is the proto name; input also takes the number and the 0.3 lower-case names."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        # JSON output is the member's own text (a StrEnum is its value): pydantic's enum serializer would read
        # ``.value``, a Python-level property, for every enum of every encoded object.
        schema = {**handler(source), "serialization": core_schema.to_string_ser_schema(when_used="json")}
        return cast(CoreSchema, schema)

    @classmethod
    def _missing_(cls, value: object) -> Any:
        # Tolerant input (digest §2: parsers may accept the integer; 0.3 peers send lower-case names).
        if isinstance(value, int) and not isinstance(value, bool):
            members = list(cls)
            if 0 <= value < len(members):
                return members[value]
            return None
        if isinstance(value, str):
            if value.isdigit():
                return cls._missing_(int(value))
            return _LEGACY_NAMES.get(cls.__name__, {}).get(value.lower())
        return None


class TaskState(_ProtoEnum):
    """Lifecycle state of a task. Terminal: COMPLETED, FAILED, CANCELED, REJECTED; interrupted: INPUT/AUTH_REQUIRED."""

    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    REJECTED = "TASK_STATE_REJECTED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"

    @property
    def is_terminal(self) -> bool:
        """True for COMPLETED, FAILED, CANCELED and REJECTED."""
        return self in _TERMINAL

    @property
    def is_interrupted(self) -> bool:
        """True for INPUT_REQUIRED and AUTH_REQUIRED."""
        return self in _INTERRUPTED


class Role(_ProtoEnum):
    """Author of a message: ``USER`` (client to server) or ``AGENT`` (server to client)."""

    UNSPECIFIED = "ROLE_UNSPECIFIED"
    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"


_TERMINAL = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
_INTERRUPTED = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})
_LEGACY_NAMES: dict[str, dict[str, Any]] = {
    "TaskState": {
        "submitted": TaskState.SUBMITTED,
        "working": TaskState.WORKING,
        "completed": TaskState.COMPLETED,
        "failed": TaskState.FAILED,
        "canceled": TaskState.CANCELED,
        "cancelled": TaskState.CANCELED,
        "task_state_cancelled": TaskState.CANCELED,
        "input-required": TaskState.INPUT_REQUIRED,
        "rejected": TaskState.REJECTED,
        "auth-required": TaskState.AUTH_REQUIRED,
        "unknown": TaskState.UNSPECIFIED,
    },
    "Role": {"user": Role.USER, "agent": Role.AGENT},
}

# --- content -----------------------------------------------------------------------------------------------

_PART_KINDS = ("text", "raw", "url", "data")


class _JsonNull:
    """The value of a data part that holds JSON ``null`` (``Part(data=None)`` explicitly, or ``{"data": null}``)."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "JSON_NULL"

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return 0


JSON_NULL: Any = _JsonNull()


def _null_out(value: Any) -> Any:
    return None if value is JSON_NULL else value


class Part(A2AModel):
    """One piece of content: exactly one of ``text``, ``raw`` (bytes), ``url`` or ``data`` (any JSON value).

    >>> Part(text="hello").to_json()
    b'{"text":"hello"}'
    >>> Part(raw=b"\\x89PNG", media_type="image/png").to_json()
    b'{"raw":"iVBORw==","mediaType":"image/png"}'
    """

    text: str | None = None
    raw: Base64Bytes | None = None
    url: str | None = None
    # ``data`` may legitimately be JSON null: an explicit null is held as ``JSON_NULL`` (falsy, encodes as null), so
    # ``None`` keeps meaning "not a data part" and default-omission needs no per-part serializer hook.
    data: Annotated[Any, PlainSerializer(_null_out)] = None
    metadata: Struct | None = None
    filename: str = ""
    media_type: str = ""

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        count = (self.text is not None) + (self.raw is not None) + (self.url is not None)
        if self.data is not None:
            count += 1
        elif "data" in self.__pydantic_fields_set__:
            self.data = JSON_NULL
            count += 1
        if count != 1:
            raise ValueError(
                "a Part must carry exactly one of text, raw, url or data"
                + (f" (it has {count})" if count else " (it has none)")
            )
        return self

    @property
    def kind(self) -> str:
        """Which content member is set: ``"text"``, ``"raw"``, ``"url"`` or ``"data"``."""
        for name in _PART_KINDS:
            if getattr(self, name) is not None:
                return name
        return "data"

    @classmethod
    def from_bytes(cls, raw: bytes, *, media_type: str = "", filename: str = "") -> Part:
        """A part holding inline file bytes."""
        return cls(raw=raw, media_type=media_type, filename=filename)

    @classmethod
    def from_url(cls, url: str, *, media_type: str = "", filename: str = "") -> Part:
        """A part referring to a file by URL."""
        return cls(url=url, media_type=media_type, filename=filename)

    @classmethod
    def from_data(cls, data: Any, *, media_type: str = "") -> Part:
        """A part holding structured JSON data (object, array or scalar)."""
        return cls(data=data, media_type=media_type)


def _parts(content: str | Part | list[Part]) -> list[Part]:
    if type(content) is str:
        return [Part._trusted(text=content)]  # what Part(text=content) validates to, at a fraction of the cost
    if isinstance(content, str):
        return [Part(text=content)]
    if isinstance(content, Part):
        return [content]
    return list(content)


def _joined_text(parts: list[Part]) -> str:
    return "".join([p.text for p in parts if p.text is not None])


# Parts per message a client may send (documented in docs/limits.md): far above any real message, far below what
# would let one request cost seconds of validation.
MAX_PARTS = 1000


class Message(A2AModel):
    """One turn of communication between a client (``ROLE_USER``) and an agent (``ROLE_AGENT``).

    >>> m = Message.user("hi")
    >>> m.role, m.text
    (<Role.USER: 'ROLE_USER'>, 'hi')
    """

    message_id: Id
    context_id: Id = ""
    task_id: Id = ""
    role: Role
    # Capped at decode: pydantic-core stops at the first part over the cap, so an 800k-part message costs 1,001
    # part validations, not 800k.
    parts: list[Part] = Field(max_length=MAX_PARTS)
    metadata: Struct | None = None
    extensions: list[str] = Field(default_factory=list)
    reference_task_ids: list[Id] = Field(default_factory=list)

    # Field validators (not one model validator) so a violation names the field: "message.parts", not "message".
    @field_validator("role")
    @classmethod
    def _known_role(cls, role: Role) -> Role:
        if role is Role.UNSPECIFIED:
            raise ValueError("role must be ROLE_USER or ROLE_AGENT")
        return role

    @field_validator("parts")
    @classmethod
    def _some_parts(cls, parts: list[Part]) -> list[Part]:
        if not parts:
            raise ValueError("a message needs at least one part")
        return parts

    @property
    def text(self) -> str:
        """The concatenated text of the message's text parts."""
        return _joined_text(self.parts)

    @classmethod
    def user(
        cls,
        content: str | Part | list[Part],
        *,
        task_id: str = "",
        context_id: str = "",
        message_id: str | None = None,
        metadata: Struct | None = None,
    ) -> Message:
        """A client message; a fresh ``messageId`` unless one is given."""
        return cls._make(Role.USER, content, task_id, context_id, message_id, metadata)

    @classmethod
    def agent(
        cls,
        content: str | Part | list[Part],
        *,
        task_id: str = "",
        context_id: str = "",
        message_id: str | None = None,
        metadata: Struct | None = None,
    ) -> Message:
        """An agent message; a fresh ``messageId`` unless one is given."""
        return cls._make(Role.AGENT, content, task_id, context_id, message_id, metadata)

    @classmethod
    def _make(
        cls,
        role: Role,
        content: str | Part | list[Part],
        task_id: str,
        context_id: str,
        message_id: str | None,
        metadata: Struct | None,
    ) -> Message:
        return cls(
            message_id=message_id or new_id(),
            role=role,
            parts=_parts(content),
            task_id=task_id,
            context_id=context_id,
            metadata=metadata,
        )


class Artifact(A2AModel):
    """An output of a task, made of parts.

    >>> Artifact.text("result", artifact_id="a1").to_json()
    b'{"artifactId":"a1","parts":[{"text":"result"}]}'
    """

    artifact_id: str
    name: str = ""
    description: str = ""
    parts: list[Part]
    metadata: Struct | None = None
    extensions: list[str] = Field(default_factory=list)

    @field_validator("parts")
    @classmethod
    def _some_parts(cls, parts: list[Part]) -> list[Part]:
        if not parts:
            raise ValueError("an artifact needs at least one part")
        return parts

    @classmethod
    def text(cls, text: str, *, artifact_id: str | None = None, name: str = "", description: str = "") -> Artifact:
        """An artifact with one text part."""
        return cls(artifact_id=artifact_id or new_id(), parts=[Part(text=text)], name=name, description=description)

    @classmethod
    def of(
        cls,
        content: str | Part | list[Part],
        *,
        artifact_id: str | None = None,
        name: str = "",
        description: str = "",
        metadata: Struct | None = None,
    ) -> Artifact:
        """An artifact from text, a part or a list of parts."""
        if type(content) is str and cls is Artifact and metadata is None and type(name) is type(description) is str:
            # The common case (a text artifact) built as validation would build it: every value is already valid.
            artifact_id = artifact_id or new_id()
            if type(artifact_id) is str:
                return cls._trusted(
                    artifact_id=artifact_id,
                    parts=[Part._trusted(text=content)],
                    name=name,
                    description=description,
                    metadata=None,
                )
        return cls(
            artifact_id=artifact_id or new_id(),
            parts=_parts(content),
            name=name,
            description=description,
            metadata=metadata,
        )

    @property
    def text_content(self) -> str:
        """The concatenated text of the artifact's text parts."""
        return _joined_text(self.parts)


# --- tasks -------------------------------------------------------------------------------------------------


class TaskStatus(A2AModel):
    """A task's state, the agent's optional status message, and when it was recorded."""

    state: TaskState
    message: Message | None = None
    timestamp: Timestamp | None = None


class Task(A2AModel):
    """The unit of work: id, context, status, artifacts and history."""

    id: str
    context_id: str = ""
    status: TaskStatus
    artifacts: list[Artifact] = Field(default_factory=list)
    history: list[Message] = Field(default_factory=list)
    metadata: Struct | None = None

    @property
    def state(self) -> TaskState:
        """Shortcut for ``task.status.state``."""
        return self.status.state


class TaskStatusUpdateEvent(A2AModel):
    """A change of a task's status."""

    task_id: str
    context_id: str
    status: TaskStatus
    metadata: Struct | None = None


class TaskArtifactUpdateEvent(A2AModel):
    """A new artifact, a replacement, or a chunk appended to an earlier artifact with the same id."""

    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False
    metadata: Struct | None = None


Event = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent

_PAYLOADS = ("task", "message", "status_update", "artifact_update")


class StreamResponse(A2AModel):
    """One streamed event: exactly one of ``task``, ``message``, ``statusUpdate`` or ``artifactUpdate``."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> Self:
        count = sum(getattr(self, n) is not None for n in _PAYLOADS)
        if count != 1:
            raise ValueError("a StreamResponse carries exactly one of task, message, statusUpdate, artifactUpdate")
        return self

    @property
    def payload(self) -> Event:
        """The event this response carries."""
        for name in _PAYLOADS:
            value = getattr(self, name)
            if value is not None:
                return value  # type: ignore[no-any-return]
        raise AssertionError("unreachable: validated to carry one payload")

    @classmethod
    def of(cls, event: Event) -> StreamResponse:
        """Wrap an event in its oneof member."""
        if isinstance(event, TaskStatusUpdateEvent):
            return cls(status_update=event)
        if isinstance(event, TaskArtifactUpdateEvent):
            return cls(artifact_update=event)
        if isinstance(event, Task):
            return cls(task=event)
        return cls(message=event)


class SendMessageResponse(A2AModel):
    """The result of SendMessage: exactly one of ``task`` or ``message``."""

    task: Task | None = None
    message: Message | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> Self:
        if (self.task is None) == (self.message is None):
            raise ValueError("a SendMessageResponse carries exactly one of task or message")
        return self

    @property
    def payload(self) -> Task | Message:
        """The task or message this response carries."""
        return self.task if self.task is not None else self.message  # type: ignore[return-value]


# --- push notification configs -----------------------------------------------------------------------------


class AuthenticationInfo(A2AModel):
    """Credentials a webhook call carries: ``Authorization: <scheme> <credentials>``."""

    scheme: str
    credentials: str = ""


class TaskPushNotificationConfig(A2AModel):
    """Where and how to deliver push notifications for one task."""

    tenant: Id = ""
    id: Id = ""
    task_id: Id = ""
    url: str
    token: str = ""
    authentication: AuthenticationInfo | None = None
    # Not on the wire: the protocol version the config was registered with ("" = 1.0; "0.3": its webhook receives
    # the task in the 0.3 shape). Stores keep it (``to_record``); no binding ever encodes it for a client.
    protocol_version: str = Field(default="", exclude=True, alias="relaykitProtocolVersion")

    def to_record(self) -> bytes:
        """The JSON a store keeps: the wire JSON plus the registration's protocol version, when not 1.0."""
        data = self.to_json()
        if not self.protocol_version:
            return data
        return data[:-1] + b',"relaykitProtocolVersion":' + pydantic_core.to_json(self.protocol_version) + b"}"


# --- requests ----------------------------------------------------------------------------------------------


# The range checks below are field validators (their messages name the rule); these tell JSON Schema (the OpenAPI
# description, relaykit._openapi) the same ranges.
_AT_LEAST_0: dict[str, Any] = {"minimum": 0}
_PAGE_SIZE: dict[str, Any] = {"minimum": 1, "maximum": 100}


def _non_negative(value: int | None) -> int | None:
    if value is not None and value < 0:
        raise ValueError(f"must not be negative (got {value})")
    return value


class SendMessageConfiguration(A2AModel):
    """Options of a SendMessage call; blocking unless ``returnImmediately``."""

    accepted_output_modes: list[str] = Field(default_factory=list)
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = Field(default=None, json_schema_extra=_AT_LEAST_0)
    return_immediately: bool = False

    _history = field_validator("history_length")(_non_negative)


class SendMessageRequest(A2AModel):
    """SendMessage / SendStreamingMessage parameters."""

    tenant: Id = ""
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: Struct | None = None


class GetTaskRequest(A2AModel):
    """GetTask parameters."""

    tenant: Id = ""
    id: Id
    history_length: int | None = Field(default=None, json_schema_extra=_AT_LEAST_0)

    _history = field_validator("history_length")(_non_negative)


class ListTasksRequest(A2AModel):
    """ListTasks parameters: filters, cursor pagination, history trimming."""

    tenant: Id = ""
    context_id: Id = ""
    status: TaskState = TaskState.UNSPECIFIED
    page_size: int | None = Field(default=None, json_schema_extra=_PAGE_SIZE)
    page_token: Id = ""
    history_length: int | None = Field(default=None, json_schema_extra=_AT_LEAST_0)
    status_timestamp_after: Timestamp | None = None
    include_artifacts: bool | None = None

    _history = field_validator("history_length")(_non_negative)

    @field_validator("page_size")
    @classmethod
    def _page_size(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 100:
            raise ValueError(f"must be between 1 and 100 (got {value})")
        return value


class ListTasksResponse(A2AModel):
    """One page of ListTasks. All four fields are REQUIRED and always emitted (``nextPageToken`` is ``""`` last)."""

    tasks: list[Task] = Field(default_factory=list)
    next_page_token: str = ""
    page_size: int = 0
    total_size: int = 0

    @model_serializer(mode="wrap")
    def _always_all(self, handler: Any) -> dict[str, Any]:
        # ProtoJSON would drop an empty token or a zero count, but the spec marks all four REQUIRED and says the
        # token is always present: emit them unconditionally.
        out: dict[str, Any] = handler(self)
        out.setdefault("tasks", [])
        out.setdefault("nextPageToken", "")
        out.setdefault("pageSize", self.page_size)
        out.setdefault("totalSize", self.total_size)
        return out


class CancelTaskRequest(A2AModel):
    """CancelTask parameters."""

    tenant: Id = ""
    id: Id
    metadata: Struct | None = None


class SubscribeToTaskRequest(A2AModel):
    """SubscribeToTask parameters."""

    tenant: Id = ""
    id: Id


class GetTaskPushNotificationConfigRequest(A2AModel):
    """GetTaskPushNotificationConfig parameters."""

    tenant: Id = ""
    task_id: Id
    id: Id


class DeleteTaskPushNotificationConfigRequest(A2AModel):
    """DeleteTaskPushNotificationConfig parameters."""

    tenant: Id = ""
    task_id: Id
    id: Id


class ListTaskPushNotificationConfigsRequest(A2AModel):
    """ListTaskPushNotificationConfigs parameters (``pageSize`` 0 = server default)."""

    tenant: Id = ""
    task_id: Id
    page_size: int = Field(default=0, json_schema_extra=_AT_LEAST_0)
    page_token: Id = ""

    _page_size = field_validator("page_size")(_non_negative)


class ListTaskPushNotificationConfigsResponse(A2AModel):
    """One page of push configs of a task."""

    configs: list[TaskPushNotificationConfig] = Field(default_factory=list)
    next_page_token: str = ""


class GetExtendedAgentCardRequest(A2AModel):
    """GetExtendedAgentCard parameters."""

    tenant: Id = ""


_STREAM_KEYS: dict[type, bytes] = {
    Task: b'{"task":',
    Message: b'{"message":',
    TaskStatusUpdateEvent: b'{"statusUpdate":',
    TaskArtifactUpdateEvent: b'{"artifactUpdate":',
}


def stream_json(event: Event, body: bytes | None = None) -> bytes:
    """The ``StreamResponse`` JSON of an event (or of an already-encoded one, ``body``), built by concatenation."""
    key = _STREAM_KEYS.get(type(event))
    if key is None:
        return StreamResponse.of(event).to_json()
    return key + (body if body is not None else event.to_json()) + b"}"
