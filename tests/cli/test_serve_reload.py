"""``relaykit serve --reload``: uvicorn's reload worker rebuilds the app from the original command line.

The command line travels to the worker process in an environment variable (JSON: an environment variable cannot
hold a NUL separator). A real subprocess on a free 127.0.0.1 port, watching only a directory of its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
from support.servers import REPO_ROOT, start_serve

TIMEOUT = 20.0


def test_reload_serves_the_agent_from_the_command_line(tmp_path: Path) -> None:
    app_dir, log_dir = tmp_path / "app", tmp_path / "logs"
    app_dir.mkdir()
    log_dir.mkdir()
    shutil.copy(REPO_ROOT / "examples" / "echo.py", app_dir / "echo.py")
    server = start_serve("echo.py", log_dir, cwd=app_dir, args=("--reload",))
    try:
        with httpx.Client(timeout=TIMEOUT) as http:
            card = http.get(f"{server.url}/.well-known/agent-card.json").json()
            assert card["supportedInterfaces"][0]["url"] == f"{server.url}/"  # --public-url reached the worker
            body = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "reloaded"}]}}
            reply = http.post(f"{server.url}/message:send", json=body, headers={"A2A-Version": "1.0"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["task"]["artifacts"][0]["parts"] == [{"text": "reloaded"}]
    finally:
        server.stop()
