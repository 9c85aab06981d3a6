"""The JavaScript SDK (@a2a-js/sdk 1.3.0 from npm) in a directory of its own, made once and cached, for the tests
that drive it with ``node`` (card signatures both ways).

Where: ``$A2A_JS_SDK_DIR`` when set (used as it is), else ``$RELAYKIT_TEST_CACHE/a2a-js-sdk-1.3.0`` (default
``~/.cache/relaykit-tests``), made with ``npm install`` of the exact versions below into a temporary directory next to
it and renamed into place when complete, under a file lock; every step bounded. ``js_sdk_dir()`` returns the
directory or raises ``JsSdkUnavailable`` with the reason; the tests skip with it locally and fail under ``CI=true``,
where node and npm are on the machine and the registry is reachable.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from support.sdk03 import cache_root

PACKAGES = ("@a2a-js/sdk@1.3.0", "jose@6.2.18")  # jose: the SDK's own dependency, which the test script loads too
NPM_TIMEOUT = 300.0


class JsSdkUnavailable(RuntimeError):
    """node, npm or the package could not be had."""


def _works(directory: Path) -> bool:
    return (directory / "node_modules" / "@a2a-js" / "sdk").is_dir() and (directory / "node_modules" / "jose").is_dir()


def js_sdk_dir() -> Path:
    """The directory whose ``node_modules`` holds @a2a-js/sdk 1.3.0 and jose, made first if needed."""
    if shutil.which("node") is None:
        raise JsSdkUnavailable("node is not installed")
    given = os.environ.get("A2A_JS_SDK_DIR")
    if given:
        if not _works(Path(given)):
            raise JsSdkUnavailable(f"A2A_JS_SDK_DIR={given} has no node_modules/@a2a-js/sdk and jose")
        return Path(given)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / "a2a-js-sdk-1.3.0"
    if _works(target):
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise JsSdkUnavailable("npm is not installed")
    with (root / ".a2a-js-sdk-1.3.0.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be making it right now
        if _works(target):
            return target
        with tempfile.TemporaryDirectory(prefix=".a2a-js-sdk-", dir=root) as tmp:
            work = Path(tmp) / "sdk"
            work.mkdir()
            command = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(work), *PACKAGES]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=NPM_TIMEOUT, check=False)
            except subprocess.TimeoutExpired:
                raise JsSdkUnavailable(f"npm install did not finish in {NPM_TIMEOUT:g} s") from None
            if done.returncode != 0 or not _works(work):
                raise JsSdkUnavailable(f"npm install failed: {(done.stderr or done.stdout)[-800:]}")
            if target.exists():
                shutil.rmtree(target)
            work.rename(target)
    return target
