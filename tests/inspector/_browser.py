"""Helpers of the inspector's browser tests: where Chromium is, how it is launched, where screenshots go."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TIMEOUT_MS = 15_000  # any one wait in a page (a loaded 2-core machine runs several servers at once)
LAUNCH_TIMEOUT_MS = 30_000
STREAM_DELAY = "0.2"  # seconds between examples/stream.py's chunks: slow enough to see them arrive one by one
SLOW_SECONDS = "60"  # examples/slow.py works longer than any test waits (the test cancels it)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def screenshot_dir() -> Path:
    path = Path(
        os.environ.get("RELAYKIT_SCREENSHOTS") or Path(tempfile.gettempdir()) / "relaykit-inspector-screenshots"
    )
    path.mkdir(parents=True, exist_ok=True)
    return path


SHOTS: list[Path] = []  # every screenshot written in this run


def shot(page: Any, name: str) -> Path:
    """A full-page screenshot of ``page`` as ``<screenshot dir>/<name>.png``."""
    path = screenshot_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    SHOTS.append(path)
    return path


def missing(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def chromium_path() -> str | None:
    configured = os.environ.get("RELAYKIT_CHROMIUM")
    if configured:
        return configured if Path(configured).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")
