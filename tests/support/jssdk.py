"""The JavaScript SDK (@a2a-js/sdk from npm) in a directory of its own per version line, made once and cached, for
the tests that drive it with ``node``: 1.3.0 (card signatures both ways) and 0.3.14, the newest of its A2A 0.3 line
(interop over 0.3 both ways, ``tests/v03/test_js_sdk03.py``).

Where: ``$A2A_JS_SDK_DIR`` (1.3.0) or ``$A2A_JS_SDK03_DIR`` (0.3.14) when set (used as it is), else
``$RELAYKIT_TEST_CACHE/a2a-js-sdk-VERSION`` (default ``~/.cache/relaykit-tests``), made with ``npm install`` of the
exact versions below into a temporary directory next to it and renamed into place when complete, under a file lock;
every step bounded. ``js_sdk_dir(version)`` returns the directory or raises ``JsSdkUnavailable`` with the reason; the
tests skip with it locally and fail under ``CI=true``, where node and npm are on the machine and the registry is
reachable.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from support.sdk03 import cache_root

# Exact versions. jose: 1.3.0's own dependency, which the signing script loads too; express, @grpc/grpc-js and
# @bufbuild/protobuf: 0.3.14's optional peer dependencies for its HTTP server and its gRPC server and client (the 0.3
# tests run both ways on each).
PACKAGES: dict[str, tuple[str, ...]] = {
    "1.3.0": ("@a2a-js/sdk@1.3.0", "jose@6.2.18"),
    "0.3.14": ("@a2a-js/sdk@0.3.14", "express@5.1.0", "@grpc/grpc-js@1.14.7", "@bufbuild/protobuf@2.17.0"),
}
ENV = {"1.3.0": "A2A_JS_SDK_DIR", "0.3.14": "A2A_JS_SDK03_DIR"}
NPM_TIMEOUT = 300.0


class JsSdkUnavailable(RuntimeError):
    """node, npm or the package could not be had."""


def _works(directory: Path, version: str) -> bool:
    names = (spec.rsplit("@", 1)[0] for spec in PACKAGES[version])
    return all((directory / "node_modules" / name).is_dir() for name in names)


def js_sdk_dir(version: str = "1.3.0") -> Path:
    """The directory whose ``node_modules`` holds @a2a-js/sdk ``version`` and its companions, made first if needed."""
    if shutil.which("node") is None:
        raise JsSdkUnavailable("node is not installed")
    given = os.environ.get(ENV[version])
    if given:
        if not _works(Path(given), version):
            raise JsSdkUnavailable(f"{ENV[version]}={given} lacks node_modules for {', '.join(PACKAGES[version])}")
        return Path(given)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"a2a-js-sdk-{version}"
    if _works(target, version):
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise JsSdkUnavailable("npm is not installed")
    with (root / f".a2a-js-sdk-{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be making it right now
        if _works(target, version):
            return target
        with tempfile.TemporaryDirectory(prefix=".a2a-js-sdk-", dir=root) as tmp:
            work = Path(tmp) / "sdk"
            work.mkdir()
            command = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(work)]
            try:
                done = subprocess.run(
                    [*command, *PACKAGES[version]], capture_output=True, text=True, timeout=NPM_TIMEOUT, check=False
                )
            except subprocess.TimeoutExpired:
                raise JsSdkUnavailable(f"npm install did not finish in {NPM_TIMEOUT:g} s") from None
            if done.returncode != 0 or not _works(work, version):
                raise JsSdkUnavailable(f"npm install failed: {(done.stderr or done.stdout)[-800:]}")
            if target.exists():
                shutil.rmtree(target)
            work.rename(target)
    return target
