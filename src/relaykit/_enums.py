"""The proto enums of A2A 1.0: ``TaskState`` and ``Role``.

The wire value is the proto name (``TASK_STATE_WORKING``); input also takes the enum number and the 0.3 lower-case
names (``working``, ``input-required``). The terminal and interrupted states are defined here, once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, cast

from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

__all__ = ["Role", "TaskState"]


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
