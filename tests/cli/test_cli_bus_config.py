"""Choosing the event bus (CONTRACT "Store grammar … Bus grammar"): refusals are one clear line and exit code 2.

These start no server: every case is refused before anything listens or connects (the store is never opened).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REDIS = "redis://127.0.0.1:6379/0"
Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_an_unknown_bus_is_refused(cli: Cli, tmp_path: Path) -> None:
    result = cli("serve", "examples/echo.py", "--store", "memory", "--bus", "kafka://localhost")
    assert result.returncode == 2
    assert "unknown bus 'kafka://localhost'" in result.stderr
    assert "use memory or redis://" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_redis_bus_with_a_sqlite_store_is_refused(cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / "one.db"
    result = cli("serve", "examples/echo.py", "--store", f"sqlite:///{db}", "--bus", REDIS)
    assert result.returncode == 2
    assert "SQLite store serves one process" in result.stderr
    assert "postgresql://" in result.stderr
    assert not db.exists()  # refused before the file was created


def test_the_bus_comes_from_relaykit_bus_when_no_flag_is_given(tmp_path: Path) -> None:
    from support.servers import REPO_ROOT, environ

    db = tmp_path / "one.db"
    result = subprocess.run(
        [sys.executable, "-m", "relaykit.cli", "serve", "examples/echo.py", "--store", f"sqlite:///{db}"],
        cwd=REPO_ROOT,
        env=environ({"RELAYKIT_BUS": REDIS, "RELAYKIT_STORE": None}),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "SQLite store serves one process" in result.stderr


def test_a_worker_needs_the_redis_bus(cli: Cli) -> None:
    result = cli("worker", "examples/echo.py", "--store", "memory")
    assert result.returncode == 2
    assert "needs --bus redis://" in result.stderr
