"""The a2a-sdk server process for the client tests (``relaykit serve`` processes come from ``support.servers``).

``start_sdk(…)`` starts ``_sdk_server.py`` on a free port and waits (a bounded poll) until its card answers 200.
"""

from __future__ import annotations

import sys
from pathlib import Path

from support.servers import ServerProcess, start_process

HERE = Path(__file__).resolve().parent


def start_sdk(log_dir: Path, *, public_url: str | None = None, port: int | None = None) -> ServerProcess:
    """The a2a-sdk 1.3.0 server script ``_sdk_server.py`` (JSON-RPC at ``/``, REST at the root)."""

    def command(p: int) -> list[str]:
        return [sys.executable, str(HERE / "_sdk_server.py"), "--port", str(p)] + (
            ["--public-url", public_url] if public_url else []
        )

    return start_process(command, log_dir, name="sdk-server", port=port, ready_path="/.well-known/agent-card.json")
