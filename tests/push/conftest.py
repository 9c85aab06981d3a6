"""Fixtures of the push tests (helpers live in ``push_helpers.py``, which test modules import by name).

This directory has no ``__init__.py`` (like ``tests/http``): its modules keep unique basenames instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from push_helpers import Recorder, pem
from support.credential_watch import credential_watch, pytest_sessionfinish  # noqa: F401  (no credential in any log)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="session")
def ec_pem() -> bytes:
    return pem(ec.generate_private_key(ec.SECP256R1()))


@pytest.fixture(scope="session")
def rsa_pem() -> bytes:
    return pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path
