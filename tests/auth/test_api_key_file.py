"""The ``--api-keys`` file: what it accepts, and lines that would give a caller the wrong identity refused at load."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from relaykit.auth import APIKeyAuthenticator
from relaykit.auth._apikey import load_api_keys


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _file(tmp_path: Path, text: str, encoding: str = "utf-8") -> Path:
    path = tmp_path / "keys"
    path.write_text(text, encoding=encoding)
    return path


def test_plain_and_digest_entries_comments_and_blank_lines(tmp_path: Path) -> None:
    text = f"# owners\n\nalice a-key  # laptop\r\nbob sha256:{_sha('b-key')}\nbob SHA256:{_sha('b2')}\n"
    path = _file(tmp_path, text)
    table = load_api_keys(path)
    assert table == {
        hashlib.sha256(b"a-key").digest(): "alice",
        hashlib.sha256(b"b-key").digest(): "bob",
        hashlib.sha256(b"b2").digest(): "bob",  # the prefix in any case is a digest, never a literal key
    }


def test_a_byte_order_mark_is_not_part_of_the_first_owner(tmp_path: Path) -> None:
    table = load_api_keys(_file(tmp_path, "alice a-key\n", encoding="utf-8-sig"))
    assert list(table.values()) == ["alice"]


def test_one_key_for_two_owners_is_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, f"alice same-key\nbob sha256:{_sha('same-key')}\n")
    with pytest.raises(ValueError, match=r"keys:2: this key is already given to 'alice'"):
        load_api_keys(path)
    # The same key twice for one owner is harmless.
    assert list(load_api_keys(_file(tmp_path, "alice k\nalice k\n")).values()) == ["alice"]
    with pytest.raises(ValueError, match="already"):
        APIKeyAuthenticator({"alice": "k", "bob": "sha256:" + _sha("k")})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alice\n", "expected 'PRINCIPAL KEY'"),
        ("alice k extra\n", "expected 'PRINCIPAL KEY'"),
        ("alice sha256:abc\n", "64 hex digits"),
        ("# only a comment\n", "holds no API key"),
    ],
)
def test_malformed_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_api_keys(_file(tmp_path, text))


def test_a_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_bytes(b"alice \xff\xfe\n")
    with pytest.raises(ValueError, match=r"keys: not UTF-8"):
        load_api_keys(path)
