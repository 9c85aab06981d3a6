"""Timestamps: ``utc_now`` is UTC truncated to the millisecond; ``format_timestamp`` is RFC 3339 with ms and ``Z``."""

import random
from datetime import UTC, datetime, timedelta, timezone

from relaykit._model import format_timestamp, utc_now

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _reference(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:"
        f"{value.second:02d}.{value.microsecond // 1000:03d}Z"
    )


def test_utc_now_is_utc_whole_milliseconds() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    stamps = [utc_now() for _ in range(200)]
    after = datetime.now(UTC)
    for stamp in stamps:
        assert stamp.tzinfo is UTC
        assert stamp.microsecond % 1000 == 0
        assert before <= stamp <= after
    assert stamps == sorted(stamps)


def test_whole_milliseconds_convert_exactly() -> None:
    # utc_now builds its datetime from ms / 1000 as a float: exact for every millisecond up to 2200.
    rng = random.Random(7)
    limit = int((datetime(2200, 1, 1, tzinfo=UTC) - _EPOCH).total_seconds() * 1000)
    for ms in [0, 1, 999, 1000, limit - 1, *(rng.randrange(limit) for _ in range(20000))]:
        assert datetime.fromtimestamp(ms / 1000, UTC) == _EPOCH + timedelta(milliseconds=ms)


def test_format_matches_reference() -> None:
    rng = random.Random(11)
    zones = [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
    values = [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]
    for _ in range(2000):
        when = _EPOCH + timedelta(microseconds=rng.randrange(-(10**15), 10**16))
        values.append(when.astimezone(rng.choice(zones[1:])))
        values.append(when.replace(tzinfo=None))
    for value in values:
        assert format_timestamp(value) == _reference(value)
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, 678999, tzinfo=UTC)) == "2026-01-02T03:04:05.678Z"
