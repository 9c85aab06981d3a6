"""The official a2a-sdk 0.3.26 (PyPI) in a virtual environment of its own, made once and cached, for the A2A 0.3
interop tests (``tests/v03``). relaykit's own environment pins a2a-sdk 1.3.0, so 0.3.26 can only run beside it, as a
subprocess with its own interpreter.

Where: ``$RELAYKIT_TEST_CACHE/a2a-sdk-0.3.26`` (default ``~/.cache/relaykit-tests``). Made with ``python -m venv``
and ``pip install 'a2a-sdk[http-server,grpc,signing]==0.3.26' uvicorn`` into a temporary directory next to it,
renamed into place when complete (a half-made environment is never used), under a file lock (parallel sessions wait
for one another). Every step is bounded. ``sdk03_python()`` returns the interpreter, or raises ``SdkUnavailable``
with the reason; the fixture skips with it locally and fails under ``CI=true``, where the environment must be made.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SDK_VERSION = "0.3.26"
# signing: PyJWT, for the SDK's card signer and verifier (tests/v03/test_card_signing_sdk03.py).
REQUIREMENTS = (f"a2a-sdk[http-server,grpc,signing]=={SDK_VERSION}", "uvicorn")
VENV_TIMEOUT = 120.0  # seconds for python -m venv
PIP_TIMEOUT = 600.0  # seconds for the install (a cold cache downloads grpcio and protobuf wheels)


class SdkUnavailable(RuntimeError):
    """The a2a-sdk 0.3.26 environment could not be made (no network to PyPI, say)."""


def in_ci() -> bool:
    """Whether this run is CI (``CI=true``), where the environment must be made rather than skipped."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def cache_root() -> Path:
    return Path(os.environ.get("RELAYKIT_TEST_CACHE") or Path.home() / ".cache" / "relaykit-tests")


def _works(python: Path) -> bool:
    if not python.exists():
        return False
    # An environment made before the signing extra was asked for fails this (no jwt) and is made again.
    probe = (
        "import importlib.metadata as m, a2a.client, a2a.utils.signing, grpc, uvicorn;"
        f" assert m.version('a2a-sdk') == '{SDK_VERSION}'"
    )
    try:
        return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=60, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _make(target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as tmp:
        venv = Path(tmp) / "venv"
        steps = [
            ([sys.executable, "-m", "venv", str(venv)], VENV_TIMEOUT),
            ([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *REQUIREMENTS], PIP_TIMEOUT),
        ]
        for command, timeout in steps:
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                raise SdkUnavailable(f"{' '.join(command[:4])}… did not finish in {timeout:g} s") from None
            if done.returncode != 0:
                raise SdkUnavailable(f"{' '.join(command[:4])}… failed: {(done.stderr or done.stdout)[-800:]}")
        if target.exists():
            shutil.rmtree(target)
        venv.rename(target)


def sdk03_python() -> Path:
    """The interpreter of the cached a2a-sdk 0.3.26 environment, made first if needed."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"a2a-sdk-{SDK_VERSION}"
    python = target / "bin" / "python"
    if _works(python):
        return python
    with (root / f".a2a-sdk-{SDK_VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be making it right now
        if not _works(python):
            _make(target)
    if not _works(python):
        raise SdkUnavailable(f"{target} was made but a2a-sdk {SDK_VERSION} does not import there")
    return python
