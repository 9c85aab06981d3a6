"""The one operation table: every A2A 1.0 operation with its request/response types, streaming flag, REST route and
gRPC name (digest §3.1). Every binding is generated from it; none lists operations of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from relaykit._card import AgentCard
from relaykit._model import A2AModel
from relaykit._requests import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from relaykit._types import SendMessageResponse, StreamResponse, Task, TaskPushNotificationConfig

__all__ = ["OPERATIONS", "OPERATIONS_BY_NAME", "Operation", "Route"]


@dataclass(frozen=True, slots=True)
class Route:
    """One REST route: verb and path template (``{name}`` = one path segment)."""

    method: str
    path: str
    body: bool


@dataclass(frozen=True, slots=True)
class Operation:
    """One A2A operation as every binding sees it."""

    name: str
    request: type[A2AModel]
    response: type[A2AModel] | None  # None: google.protobuf.Empty
    streaming: bool
    routes: tuple[Route, ...]
    handler: str  # RequestHandler method name

    @property
    def grpc_name(self) -> str:
        """gRPC rpc name (the same as the JSON-RPC method name)."""
        return self.name


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "SendMessage",
        SendMessageRequest,
        SendMessageResponse,
        False,
        (Route("POST", "/message:send", True),),
        "send_message",
    ),
    Operation(
        "SendStreamingMessage",
        SendMessageRequest,
        StreamResponse,
        True,
        (Route("POST", "/message:stream", True),),
        "send_streaming_message",
    ),
    Operation("GetTask", GetTaskRequest, Task, False, (Route("GET", "/tasks/{id}", False),), "get_task"),
    Operation("ListTasks", ListTasksRequest, ListTasksResponse, False, (Route("GET", "/tasks", False),), "list_tasks"),
    Operation(
        "CancelTask", CancelTaskRequest, Task, False, (Route("POST", "/tasks/{id}:cancel", True),), "cancel_task"
    ),
    # The spec text says POST, the proto GET (digest §9 #1): serve both.
    Operation(
        "SubscribeToTask",
        SubscribeToTaskRequest,
        StreamResponse,
        True,
        (Route("POST", "/tasks/{id}:subscribe", True), Route("GET", "/tasks/{id}:subscribe", False)),
        "subscribe_to_task",
    ),
    Operation(
        "CreateTaskPushNotificationConfig",
        TaskPushNotificationConfig,
        TaskPushNotificationConfig,
        False,
        (Route("POST", "/tasks/{taskId}/pushNotificationConfigs", True),),
        "create_push_config",
    ),
    Operation(
        "GetTaskPushNotificationConfig",
        GetTaskPushNotificationConfigRequest,
        TaskPushNotificationConfig,
        False,
        (Route("GET", "/tasks/{taskId}/pushNotificationConfigs/{id}", False),),
        "get_push_config",
    ),
    Operation(
        "ListTaskPushNotificationConfigs",
        ListTaskPushNotificationConfigsRequest,
        ListTaskPushNotificationConfigsResponse,
        False,
        (Route("GET", "/tasks/{taskId}/pushNotificationConfigs", False),),
        "list_push_configs",
    ),
    Operation(
        "DeleteTaskPushNotificationConfig",
        DeleteTaskPushNotificationConfigRequest,
        None,
        False,
        (Route("DELETE", "/tasks/{taskId}/pushNotificationConfigs/{id}", False),),
        "delete_push_config",
    ),
    Operation(
        "GetExtendedAgentCard",
        GetExtendedAgentCardRequest,
        AgentCard,
        False,
        (Route("GET", "/extendedAgentCard", False),),
        "get_extended_card",
    ),
)

OPERATIONS_BY_NAME: dict[str, Operation] = {op.name: op for op in OPERATIONS}
