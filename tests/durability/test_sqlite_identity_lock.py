"""Gap 8 (issue 19): the SQLite owner lock is on the file, not its path. A second server opening the same database
through a hard link is refused (one line, exit 2), and the first server's running task is left alone (not failed
"server restarted"). Also the store-level refusal, in one process, through a hard link and a bind-like second path.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tests.cluster.client import get_task, message, open_stream
from tests.support.servers import REPO_ROOT, environ, free_port, start_serve

from relaykit.backends._base import StoreLockedError
from relaykit.backends.sqlite import SQLiteTaskStore

AGENT = "tests/cluster/agents.py:agent"


async def test_a_hard_link_to_a_served_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    logs = tmp_path / "logs"
    logs.mkdir()
    first = start_serve(AGENT, logs, store=f"sqlite:///{db}")
    try:
        async with httpx.AsyncClient() as http, open_stream(http, first.url, message("100 0.5")) as stream:
            running = await stream.until(lambda e: e.chunk == "chunk 0")
            (tmp_path / "other").mkdir()
            link = tmp_path / "other" / "same.db"
            os.link(db, link)
            command = [sys.executable, "-m", "relaykit.cli", "serve", AGENT, "--store", f"sqlite:///{link}"]
            second = await asyncio.to_thread(
                subprocess.run,
                [*command, "--port", str(free_port()), "--host", "127.0.0.1"],
                cwd=REPO_ROOT,
                env=environ({"RELAYKIT_DEBUG": None}),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert running.task_id is not None
            task = await get_task(http, first.url, running.task_id)
    finally:
        first.stop()
    assert second.returncode == 2, second
    [line] = second.stderr.splitlines()
    assert "already serving" in line
    assert "hard link" in line
    assert task["status"]["state"] == "TASK_STATE_WORKING"


async def test_the_store_refuses_the_same_file_under_another_name(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    owner = SQLiteTaskStore(db)
    await owner.start()
    try:
        os.link(db, tmp_path / "linked.db")
        for other in (tmp_path / "linked.db",):
            second = SQLiteTaskStore(other)
            with pytest.raises(StoreLockedError, match="under another name"):
                await second.start()
            await second.close()
        # The refused stores left the owner working.
        assert await owner.get("nothing") is None
    finally:
        await owner.close()
    # Released: the other name opens now.
    again = SQLiteTaskStore(tmp_path / "linked.db")
    await again.start()
    await again.close()
