"""``--log-format json``: one JSON object per line, with the task, context, trace and span ids where known.

Invariants: a line holds the logger's message and the ids, never a request body; credentials never reach a log
line in the first place (webhook URLs and headers are not logged, the work queue drops credential headers).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = ["JSONFormatter", "use_json_logs"]


class JSONFormatter(logging.Formatter):
    """Formats a record as one JSON object: ``time``, ``level``, ``logger``, ``message``, and ``task_id``,
    ``context_id``, ``trace_id``, ``span_id`` where known (``exc_info`` as ``exception``)."""

    def format(self, record: logging.LogRecord) -> str:
        from relaykit.telemetry._seam import current_ids

        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(current_ids())
        for key in ("task_id", "context_id", "request_id"):
            value = getattr(record, key, None)
            if value:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def use_json_logs(level: int | str = logging.INFO) -> None:
    """Send every log record to stderr as a JSON line (replaces the root logger's handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
