"""A2A 1.0 request and response messages: the parameters of each operation and the pages ListTasks and
ListTaskPushNotificationConfigs answer with.

Shapes follow ``lf.a2a.v1`` field for field. Invariants checked at construction: ids a client chooses are
``_model.Id``s (bounded length, no NUL); ``historyLength`` and ``pageSize`` are never negative, and ListTasks'
``pageSize`` is 1..100. ``SendMessageResponse`` and ``StreamResponse`` are in ``_types``, next to what they carry.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_serializer
from pydantic.json_schema import SkipJsonSchema

from relaykit._enums import TaskState
from relaykit._model import A2AModel, Id, Struct, Timestamp
from relaykit._types import Message, Task, TaskPushNotificationConfig

__all__ = [
    "CancelTaskRequest",
    "DeleteTaskPushNotificationConfigRequest",
    "GetExtendedAgentCardRequest",
    "GetTaskPushNotificationConfigRequest",
    "GetTaskRequest",
    "ListTaskPushNotificationConfigsRequest",
    "ListTaskPushNotificationConfigsResponse",
    "ListTasksRequest",
    "ListTasksResponse",
    "SendMessageConfiguration",
    "SendMessageRequest",
    "SubscribeToTaskRequest",
]

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
    # Not on the wire: the request asked for includeArtifacts (set by the handler), so every task's ``artifacts`` is
    # emitted, ``[]`` for a task that has none (below). No binding encodes the flag itself.
    artifacts_included: bool = Field(default=False, exclude=True, alias="relaykitArtifactsIncluded")

    @model_serializer(mode="wrap")
    def _always_all(self, handler: Any) -> dict[str, Any]:
        # ProtoJSON would drop an empty token or a zero count, but the spec marks all four REQUIRED and says the
        # token is always present: emit them unconditionally.
        out: dict[str, Any] = handler(self)
        out.setdefault("tasks", [])
        out.setdefault("nextPageToken", "")
        out.setdefault("pageSize", self.page_size)
        out.setdefault("totalSize", self.total_size)
        if self.artifacts_included:
            # Spec §3.1.4: with includeArtifacts the field is present with its actual content, "an empty array if the
            # task has no artifacts", so a reader can tell "none" from "not asked for". ProtoJSON omits an empty
            # repeated field, but every ProtoJSON parser accepts a present empty list as the same value (the
            # a2a-sdk's own server emits it so), so nothing that reads the page strictly is broken by it. Only
            # when asked: the default page is unchanged and costs one flag test more.
            for task in out["tasks"]:
                task.setdefault("artifacts", [])
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
    # Not on the wire (nor in the OpenAPI document): "0.3" when the A2A 0.3 codec made the request. A 0.3 get that
    # names only the task (``id`` empty) answers the task's default config, as 0.3 servers did (RequestHandler).
    protocol_version: SkipJsonSchema[str] = Field(default="", exclude=True, alias="relaykitProtocolVersion")


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
