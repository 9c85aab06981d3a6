"""Conditional GET of a static representation (the agent card): RFC 9110 §13 preconditions against its validators.

Rules, in the order of RFC 9110 §13.2.2 (a later step is reached only when the earlier ones let the request through):

1. ``If-Match`` present: unless ``*`` or one of its entity tags equals ours by *strong* comparison, 412;
2. otherwise ``If-Unmodified-Since`` (a valid date): modified after it, 412;
3. ``If-None-Match`` present: ``*``, or one of its tags equal to ours by *weak* comparison (``W/"x"`` matches
   ``"x"``, §13.1.2), 304 — and ``If-Modified-Since`` is then not looked at;
4. only when ``If-None-Match`` is absent, ``If-Modified-Since`` (a valid date): not modified since, 304;
5. otherwise 200.

Several field lines of a list-valued header are one list (§5.3); a date header sent more than once, or that is no
HTTP-date (any of the three formats of §5.6.7), is ignored (§13.1.3, §13.1.4). Dates have one-second resolution,
as ``Last-Modified`` has.
"""

from __future__ import annotations

import calendar
import re
from email.utils import parsedate_tz

from relaykit.http._asgi import Scope

__all__ = ["evaluate"]

_NAMES = frozenset({b"if-match", b"if-none-match", b"if-modified-since", b"if-unmodified-since"})
_LISTS = frozenset({b"if-match", b"if-none-match"})
# No leading ``\s*``: ``findall`` tries every position anyway, and with it a header of many spaces and no closing
# quote cost O(n²) (each space restarted a scan of all the spaces after it): 15 KB of them stalled the event loop for
# seconds, on the public card, before any authentication. Without it each position fails in O(1), and a quote that is
# never closed is scanned once (no quote can follow it), so the cost is linear in the header.
_TAG = re.compile(rb'(W/)?("[^"]*")')


def evaluate(scope: Scope, etag: bytes, modified: int) -> int:
    """200, 304 or 412 for a GET/HEAD of a representation with strong ``etag`` (quoted) modified at ``modified``
    (seconds since the epoch)."""
    found: dict[bytes, bytes | None] = {}
    for key, value in scope["headers"]:
        if key in _NAMES:
            if key not in found:
                found[key] = value
            elif key in _LISTS:
                found[key] = (found[key] or b"") + b"," + value
            else:
                found[key] = None  # a date given twice: no single date to compare with, so ignored
    if not found:
        return 200  # an unconditional request, the usual one
    if b"if-match" in found:
        value = found[b"if-match"] or b""
        if value.strip() != b"*" and etag not in {tag for weak, tag in _TAG.findall(value) if not weak}:
            return 412
    else:
        since = _http_date(found.get(b"if-unmodified-since"))
        if since is not None and modified > since:
            return 412
    if b"if-none-match" in found:
        value = found[b"if-none-match"] or b""
        if value.strip() == b"*" or etag in {tag for _weak, tag in _TAG.findall(value)}:
            return 304
        return 200
    since = _http_date(found.get(b"if-modified-since"))
    if since is not None and modified <= since:
        return 304
    return 200


def _http_date(value: bytes | None) -> int | None:
    """Seconds since the epoch of an HTTP-date (IMF-fixdate, RFC 850 or asctime: all GMT), or None."""
    if value is None:
        return None
    parsed = parsedate_tz(value.decode("latin-1"))
    if parsed is None:
        return None
    # asctime carries no zone (parsedate_tz gives None): HTTP-dates are GMT whatever the format.
    return calendar.timegm((*parsed[:6], 0, 0, 0)) - (parsed[9] or 0)
