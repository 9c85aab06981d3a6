"""A2A 1.0 data objects: parts, messages, artifacts, tasks, the stream events and the responses that carry them,
and push notification configs.

Shapes follow ``lf.a2a.v1`` (``specification/a2a.proto``) field for field; encoding rules live in ``_model``; the
enums in ``_enums``, ids in ``_ids``, the operations' request/response messages in ``_requests``.
Invariants checked at construction (so nothing malformed enters the engine or leaves a binding):

* a ``Part`` carries exactly one of ``text | raw | url | data``;
* ``StreamResponse`` / ``SendMessageResponse`` carry exactly one payload;
* a ``Message`` has a non-UNSPECIFIED role and between one and ``MAX_PARTS`` parts; an ``Artifact`` at least one;
* ids a client chooses are ``_model.Id``s (bounded length, no NUL).
"""

from __future__ import annotations

from typing import Annotated, Any, Self

import pydantic_core
from pydantic import Field, PlainSerializer, field_validator, model_validator

from relaykit._enums import Role, TaskState
from relaykit._ids import new_id
from relaykit._model import A2AModel, Base64Bytes, Id, Struct, Timestamp

__all__ = [
    "JSON_NULL",
    "MAX_PARTS",
    "Artifact",
    "AuthenticationInfo",
    "Event",
    "Message",
    "Part",
    "SendMessageResponse",
    "StreamResponse",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskPushNotificationConfig",
    "TaskStatus",
    "TaskStatusUpdateEvent",
    "stream_json",
]


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
