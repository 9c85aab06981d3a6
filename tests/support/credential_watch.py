"""No credential in any log: a watch over the push and auth tests (their ``conftest.py`` turns it on).

Credentials are learnt from what the tests really send, not from a list kept by hand: every request an ``httpx``
client of the test process sends (the tests' own calls, relaykit's clients and its push sender) gives its
``Authorization`` credential (without the scheme), ``X-API-Key``, ``X-A2A-Notification-Token``, and the ``token`` /
``credentials`` / ``password`` strings of a JSON body (push configs sent to a server in another process). Too short
values (under ``MIN_LENGTH`` characters, e.g. ``"x"`` or ``"tok"``) are left out: they would match ordinary text.

Log output watched: every record logged in the test process while a watched test runs (the root logger at INFO and
``relaykit`` at DEBUG, whatever the test's own level), and everything written by the server processes
``support.servers`` started (their log files). A test fails at teardown when a credential known by then appears in
its output; at the end of the session, the output of all watched tests is checked once more against all the
credentials learnt, so a credential learnt in a later test is still caught in an earlier test's output.
gRPC metadata is not seen (no ``httpx``): the gRPC tests' credentials are also sent over HTTP in the same tests.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support import servers

MIN_LENGTH = 6
_BODY_FIELDS = re.compile(rb'"(?:token|credentials|password)"\s*:\s*"([^"\\]{6,512})"')


class CredentialWatch:
    """The credentials seen on the wire and the log text of the watched tests."""

    def __init__(self) -> None:
        self.credentials: set[str] = set()
        self.outputs: list[tuple[str, str]] = []  # (test id, its log text)

    def learn(self, value: str) -> None:
        value = value.strip()
        if len(value) >= MIN_LENGTH:
            self.credentials.add(value)

    def learn_request(self, request: httpx.Request) -> None:
        headers = request.headers
        authorization = headers.get("authorization", "")
        if authorization:
            scheme, _, credential = authorization.partition(" ")
            self.learn(credential)
            if scheme.lower() == "basic":
                try:
                    user_password = base64.b64decode(credential, validate=True).decode()
                except ValueError:
                    user_password = ""
                self.learn(user_password.partition(":")[2])
        for name in ("x-api-key", "x-a2a-notification-token"):
            self.learn(headers.get(name, ""))
        content = request.content if isinstance(request.stream, httpx.ByteStream) else b""
        if content and b'"' in content:
            for found in _BODY_FIELDS.finditer(content):
                self.learn(found.group(1).decode(errors="replace"))

    def leaks(self, text: str) -> list[str]:
        """The known credentials that appear in ``text``."""
        return sorted(c for c in self.credentials if c in text)


WATCH = CredentialWatch()
_PATCHED: list[Any] = []


def _patch_httpx() -> None:
    """Learn from every request sent by an httpx client of this process (once per session)."""
    if _PATCHED:
        return
    for cls in (httpx.AsyncClient, httpx.Client):
        original = cls.send

        def send(self: Any, request: httpx.Request, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            WATCH.learn_request(request)
            return __original(self, request, *args, **kwargs)

        cls.send = send  # type: ignore[method-assign]
        _PATCHED.append((cls, original))


class Capture(logging.Handler):
    """The log records of one test, as text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.started = 0  # how many server logs support.servers had started before the test

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a bad format string is the test's business, not a leak
            text = str(record.msg)
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)


@pytest.fixture(autouse=True)
def credential_watch(request: pytest.FixtureRequest) -> Iterator[Capture]:
    """Capture the test's log output; at teardown, fail on any known credential in it."""
    _patch_httpx()
    capture = Capture()
    root, own = logging.getLogger(), logging.getLogger("relaykit")
    levels = root.level, own.level
    root.addHandler(capture)
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)
    own.setLevel(logging.DEBUG)
    capture.started = len(servers.LAUNCHED_LOGS)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(levels[0])
        own.setLevel(levels[1])
    WATCH.outputs.append((request.node.nodeid, check(request.node.nodeid, capture)))


def check(test: str, capture: Capture) -> str:
    """The test's whole log output (its records, and the logs of the server processes it started); an
    ``AssertionError`` naming the credentials found in it."""
    text = "\n".join(capture.lines)
    for path in servers.LAUNCHED_LOGS[capture.started :]:
        try:
            text += "\n" + path.read_text(errors="replace")
        except OSError:
            continue
    leaked = WATCH.leaks(text)
    assert not leaked, f"credentials in the log output of {test}: {leaked}"
    return text


def check_session() -> list[str]:
    """Every watched test's output against every credential learnt in the session: ``test id: credentials``."""
    return [f"{test}: {found}" for test, text in WATCH.outputs if (found := WATCH.leaks(text))]


_REPORTED: list[bool] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session-end check (imported by each watched directory's conftest; runs once)."""
    if _REPORTED or not WATCH.outputs:
        return
    _REPORTED.append(True)
    leaks = check_session()
    if leaks:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("credentials in log output (session check):\n" + "\n".join(leaks), red=True)
