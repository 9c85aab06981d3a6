"""ListTasks helpers shared by every store: the keyset cursor and the trimmed decode of a listed task.

The cursor is ``(status timestamp in µs, task id)`` of a page's last task, opaque to clients (URL-safe base64); a
token that does not decode to one the stores can look up (a timestamp in BIGINT range, an id without NUL) is a
client error (``PageTokenError``), raised before any store sees it. ``listed_task`` drops what the page does not carry
(artifacts, history beyond ``historyLength``) from the parsed JSON before validation: validating a part costs far
more than parsing it, so a listed task costs what the page returns. A stored task that cannot be read is left out
of its page (``listed_tasks``, logged by id): the owner still lists the others, and the cursor moves past it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pydantic_core

from relaykit._types import Task
from relaykit.backends._base import PageTokenError, unreadable_rows

__all__ = ["decode_token", "dropped_fields", "encode_token", "listed_task", "listed_tasks", "sort_key", "timestamp_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The stores keep the status timestamp as a signed 64-bit integer (SQLite INTEGER, PostgreSQL BIGINT); a status
# before 1970 has a negative one, and its cursor is as valid as any.
_MIN_TS, _MAX_TS = -(2**63), 2**63 - 1


def timestamp_us(value: datetime | None) -> int:
    """Microseconds since the epoch (0 for a task with no status timestamp)."""
    if value is None:
        return 0
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def sort_key(task: Task) -> tuple[int, str]:
    """The ListTasks order key: newest status first, ties by id (both descending)."""
    return (timestamp_us(task.status.timestamp), task.id)


def encode_token(key: tuple[int, str]) -> str:
    """Cursor text for the position after ``key``."""
    raw = f"{key[0]}:{key[1]}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_token(token: str) -> tuple[int, str]:
    """The key a cursor names; ``PageTokenError`` if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        ts, _, task_id = raw.partition(":")
        key = int(ts)
        if not task_id or "\x00" in task_id or not _MIN_TS <= key <= _MAX_TS:
            raise ValueError
    except ValueError as exc:  # UnicodeDecodeError and binascii.Error are ValueErrors
        raise PageTokenError(f"invalid page token {token!r}") from exc
    return key, task_id


def dropped_fields(history_length: int | None, include_artifacts: bool) -> tuple[str, ...]:
    """The top-level task fields a ListTasks page leaves out entirely: the SQL stores drop them in the database (its
    JSON functions run in C, off the event loop), so the process never parses them."""
    fields: tuple[str, ...] = () if include_artifacts else ("artifacts",)
    return (*fields, "history") if history_length == 0 else fields


def listed_task(body: bytes | str, history_length: int | None, include_artifacts: bool) -> Task:
    """A stored task as a ListTasks page carries it: artifacts only when asked, the newest ``history_length``
    messages (all when None)."""
    if include_artifacts and history_length is None:
        return Task.from_json(body)
    data: dict[str, Any] = pydantic_core.from_json(body)
    if not include_artifacts:
        data.pop("artifacts", None)
    history = data.get("history")
    if history_length is not None and history and len(history) > history_length:
        data["history"] = history[len(history) - history_length :] if history_length else []
    return Task.model_validate(data)


def listed_tasks(
    rows: Iterable[tuple[str, bytes | str]], history_length: int | None, include_artifacts: bool
) -> list[Task]:
    """``listed_task`` of each ``(task id, stored body)`` of a page, leaving out (and logging the ids of) the tasks
    that cannot be read: one unreadable row must not make the whole listing fail."""
    tasks: list[Task] = []
    unreadable: list[str] = []
    for task_id, body in rows:
        try:
            tasks.append(listed_task(body, history_length, include_artifacts))
        except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
            unreadable.append(task_id)
    unreadable_rows("ListTasks", unreadable)
    return tasks
