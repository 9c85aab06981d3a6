"""The credential watch of the push and auth tests (``support.credential_watch``) can fail: a credential really sent
to a server is learnt from the wire, and a log line carrying it fails the check the watch runs at teardown."""

from __future__ import annotations

import logging

import httpx
import pytest
from push_helpers import Recorder
from support.credential_watch import WATCH, Capture, check


def test_a_leaked_push_token_in_a_log_line_is_caught(recorder: Recorder, credential_watch: Capture) -> None:
    token = "watch-proof-token-7f3a"
    assert token not in WATCH.credentials
    httpx.post(recorder.url("/hook"), content=b"{}", headers={"X-A2A-Notification-Token": token}, timeout=10)
    assert token in WATCH.credentials  # learnt from the request as sent
    check("before the leak", credential_watch)
    logging.getLogger("relaykit.push").warning("delivering with token %s", token)
    with pytest.raises(AssertionError, match=token):
        check("the planted leak", credential_watch)
    # Take the planted line back out, or the same check fails this test at its teardown.
    credential_watch.lines[:] = [line for line in credential_watch.lines if token not in line]
