"""Suspending a push config whose receiver keeps failing (issue 14, Build 4).

A config is suspended once its deliveries failed ``after`` times in a row **and** the first of those failures is at
least ``seconds`` old: a receiver that is down for a moment (a deploy, a restart) still gets every notification with
its retries, one that stays down stops costing the server requests. From then on:

* the config's queued notifications become dead letters ("suspended: …", visible in ``relaykit push status``), and
  new notifications for it are dropped before they are written (not attempted, not stored); the suspension is
  logged once, and counted in the ``a2a.push.deliveries`` metric as outcome ``suspended`` (one per dropped
  notification) when metrics are on;
* re-registering the config (CreateTaskPushNotificationConfig with its id, any replica of this process's own
  writes) resumes it, with a fresh count.

The state is this process's (the sender that delivers a stream is the one that counts its failures); both tables
are bounded (the oldest entries are forgotten first).
"""

from __future__ import annotations

import collections
import logging

from relaykit.backends._base import StreamKey

__all__ = ["Suspensions"]

log = logging.getLogger("relaykit.push")

_MAX_TRACKED = 65536


class Suspensions:
    """Failure streaks and suspended configs, keyed by ``(tenant, owner, task id, config id)``.

    >>> s = Suspensions(after=2, seconds=0.0)
    >>> key = ("", "anonymous", "t1", "c1")
    >>> s.failed(key, 100.0, "HTTP 500"), s.failed(key, 101.0, "HTTP 500"), s.suspended(key)
    (False, True, True)
    >>> s.resume(key); s.suspended(key)
    False
    """

    def __init__(self, after: int = 10, seconds: float = 60.0) -> None:
        self.after = after
        self.seconds = seconds
        self._streaks: collections.OrderedDict[StreamKey, tuple[int, float]] = collections.OrderedDict()
        self._suspended: collections.OrderedDict[StreamKey, str] = collections.OrderedDict()

    def __bool__(self) -> bool:
        """Whether any config is suspended (the engine hook's one test per event when none is)."""
        return bool(self._suspended)

    def suspended(self, key: StreamKey) -> bool:
        return key in self._suspended

    def reason(self, key: StreamKey) -> str:
        """Why ``key`` is suspended ("" when it is not)."""
        return self._suspended.get(key, "")

    def succeeded(self, key: StreamKey) -> None:
        self._streaks.pop(key, None)

    def failed(self, key: StreamKey, now: float, error: str) -> bool:
        """Count a failed delivery; True when it suspends the config (then it is logged, once)."""
        if self.after <= 0:
            return False
        count, since = self._streaks.pop(key, (0, now))
        count += 1
        if count >= self.after and now - since >= self.seconds:
            reason = f"suspended: the receiver failed {count} deliveries in a row over {now - since:.0f} s ({error})"
            self._suspended[key] = reason
            while len(self._suspended) > _MAX_TRACKED:
                self._suspended.popitem(last=False)
            log.warning(
                "task %s: push config %s suspended after %d failed deliveries in %.0f s (last: %s); "
                "register the config again to resume",
                key[2],
                key[3],
                count,
                now - since,
                error,
            )
            return True
        self._streaks[key] = (count, since)
        while len(self._streaks) > _MAX_TRACKED:
            self._streaks.popitem(last=False)
        return False

    def resume(self, key: StreamKey) -> None:
        """The config was registered again: deliver to it, counting from zero."""
        self._streaks.pop(key, None)
        if self._suspended.pop(key, None) is not None:
            log.info("task %s: push config %s registered again; its notifications resume", key[2], key[3])
