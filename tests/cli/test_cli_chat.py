"""``relaykit chat``: from piped stdin and from a terminal (a pty), against the ``examples/`` agents."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
import uuid
from collections.abc import Callable

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_chat_from_piped_stdin_answers_the_question(cli: Cli, examples: dict[str, str]) -> None:
    result = cli("chat", examples["ask"], stdin="hello\nAda\n")
    assert result.returncode == 0, result
    assert result.stdout.splitlines() == ["agent: What is your name?", "agent: Nice to meet you, Ada!"]
    assert "you>" not in result.stdout + result.stderr  # no prompts when stdin is not a terminal


def test_chat_continues_one_context(cli: Cli, examples: dict[str, str]) -> None:
    context = f"chat-{uuid.uuid4()}"
    result = cli("chat", "--context", context, examples["ask"], stdin="hello\nAda\n\nhello again\nGrace\n")
    assert result.returncode == 0, result
    assert result.stdout.splitlines() == [
        "agent: What is your name?",
        "agent: Nice to meet you, Ada!",
        "agent: What is your name?",
        "agent: Nice to meet you, Grace!",
    ]
    listed = cli("list", examples["ask"], "--context", context, "--state", "completed")
    assert listed.returncode == 0, listed
    assert len(listed.stdout.splitlines()) == 3  # header + the two tasks of this conversation


def test_chat_streams_artifacts(cli: Cli, examples: dict[str, str]) -> None:
    result = cli("chat", examples["stream"], stdin="3\n2\n")
    assert result.returncode == 0, result
    assert result.stdout.splitlines() == ["agent: chunk 0chunk 1chunk 2", "agent: chunk 0chunk 1"]


def test_chat_with_empty_input_ends_at_once(cli: Cli, examples: dict[str, str]) -> None:
    result = cli("chat", examples["echo"], stdin="")
    assert (result.returncode, result.stdout) == (0, "")


def _read_until(fd: int, needle: bytes, seen: bytearray, timeout: float = 15.0) -> bytes:
    """Read the pty until ``needle`` appears after what was consumed before; bounded by ``timeout``."""
    start = len(seen)
    deadline = time.monotonic() + timeout
    while needle not in seen[start:]:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {needle!r} within {timeout}s; terminal shows: {bytes(seen[start:])!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        assert chunk, f"the terminal closed before {needle!r}; it showed: {bytes(seen[start:])!r}"
        seen.extend(chunk)
    end = seen.index(needle, start) + len(needle)
    shown = bytes(seen[start:end])
    del seen[:end]
    return shown


def test_chat_in_a_terminal(cli_process: Callable[..., subprocess.Popen[bytes]], examples: dict[str, str]) -> None:
    master, slave = pty.openpty()
    proc = cli_process(
        "chat",
        examples["ask"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,  # the pty becomes its controlling terminal, as in a real shell
    )
    os.close(slave)
    seen = bytearray()
    try:
        banner = _read_until(master, b"you> ", seen)
        assert b"Chatting with ask at " in banner
        os.write(master, b"hello\n")
        turn = _read_until(master, b"you> ", seen)
        assert b"agent: What is your name?" in turn
        os.write(master, b"Ada\n")
        turn = _read_until(master, b"you> ", seen)
        assert b"agent: Nice to meet you, Ada!" in turn
        os.write(master, b"\x04")  # Ctrl-D: end of input
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(master)
