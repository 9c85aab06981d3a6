"""Options that cannot mean anything are refused before anything listens: one clear line, exit code 2."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_an_extended_card_needs_a_way_to_authenticate(cli: Cli, tmp_path: Path) -> None:
    # It goes to authenticated callers only: with no auth option it could never be served, yet would be advertised.
    extended = tmp_path / "extended.json"
    extended.write_text(json.dumps({"name": "more", "description": "d", "version": "1"}))
    result = cli("serve", "examples/echo.py", "--store", "memory", "--extended-card", str(extended))
    assert result.returncode == 2
    assert "--extended-card is served to authenticated callers only" in result.stderr
    assert "--api-keys" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_key_file_giving_one_key_to_two_owners_is_refused(cli: Cli, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("alice same\nbob same\n")
    result = cli("serve", "examples/echo.py", "--store", "memory", "--api-keys", str(keys))
    assert result.returncode == 2
    assert f"--api-keys: {keys}:2: this key is already given to 'alice'" in result.stderr
    assert "same" not in result.stderr.replace("--api-keys", "")  # the key itself is never printed
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--executor-timeout", "-1", "must be a number of seconds above 0"),
        ("--executor-timeout", "0", "must be a number of seconds above 0"),
        ("--keepalive", "0", "must be a number of seconds above 0"),
        ("--grace", "-5", "must be a number of seconds, 0 or more"),
        ("--grace", "nan", "not a finite number"),
    ],
)
def test_durations_out_of_range_are_refused(cli: Cli, option: str, value: str, message: str) -> None:
    result = cli("serve", "examples/echo.py", "--store", "memory", option, value)
    assert result.returncode == 2
    assert f"argument {option}: {message}" in result.stderr


@pytest.mark.parametrize("option", ["--max-history-bytes", "--max-artifact-bytes"])
@pytest.mark.parametrize(("value", "message"), [("-1", "0 or more"), ("1e6", "not a whole number of bytes")])
def test_task_limits_out_of_range_are_refused(cli: Cli, option: str, value: str, message: str) -> None:
    result = cli("serve", "examples/echo.py", "--store", "memory", option, value)
    assert result.returncode == 2
    assert f"argument {option}: " in result.stderr
    assert message in result.stderr


def test_task_limits_reach_the_engine() -> None:
    """``--max-history-bytes`` and ``--max-artifact-bytes`` set the engine's limits (0: off); not given, the engine
    keeps create_app's defaults (16 MiB, 64 MiB). ``relaykit worker`` reads them the same way."""
    from relaykit.cli import build_parser
    from relaykit.cli._options import task_limits
    from relaykit.cli._serve import build_server

    parser = build_parser()
    base = ["serve", "examples/echo.py", "--store", "memory"]
    engine = build_server(parser.parse_args([*base, "--max-history-bytes", "1000", "--max-artifact-bytes", "0"])).engine
    assert (engine.max_history_bytes, engine.max_artifact_bytes) == (1000, 0)
    engine = build_server(parser.parse_args(base)).engine
    assert (engine.max_history_bytes, engine.max_artifact_bytes) == (16 * 1024 * 1024, 64 * 1024 * 1024)
    worker = parser.parse_args(["worker", "examples/echo.py", "--max-history-bytes", "5", "--max-artifact-bytes", "7"])
    assert task_limits(worker) == {"max_history_bytes": 5, "max_artifact_bytes": 7}
