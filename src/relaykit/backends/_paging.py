"""The ListTasks keyset cursor, shared by every store: ``(status timestamp in µs, task id)`` of a page's last task.

Opaque to clients (URL-safe base64); a token that does not decode is a client error (``ValueError``).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from relaykit._types import Task

__all__ = ["decode_token", "encode_token", "sort_key", "timestamp_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
    """The key a cursor names; ``ValueError`` if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        ts, _, task_id = raw.partition(":")
        if not task_id:
            raise ValueError
        return int(ts), task_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"invalid page token {token!r}") from exc
