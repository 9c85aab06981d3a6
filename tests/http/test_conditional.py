"""The agent card's conditional GET (``relaykit.http._conditional``): RFC 9110 §13.2.2, step by step.

Each case revalidates the card with the validators it was served with (``ETag``, ``Last-Modified``), as a cache or a
client that polls the card does; the app runs in-process (``httpx.ASGITransport``).
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import AsyncIterator
from email.utils import formatdate, parsedate_tz
from typing import Any

import httpx
import pytest

from relaykit import agent
from relaykit.http import create_app
from relaykit.http._conditional import evaluate

CARD = "/.well-known/agent-card.json"


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    """Echoes text."""
    return context.text


class Served:
    """The card as first served: its ETag and Last-Modified, and a way to ask for it again with given headers."""

    def __init__(self, http: httpx.AsyncClient, first: httpx.Response) -> None:
        self.http = http
        self.etag = first.headers["etag"]
        self.last_modified = first.headers["last-modified"]
        parsed = parsedate_tz(self.last_modified)
        assert parsed is not None
        self.seconds = calendar.timegm((*parsed[:6], 0, 0, 0))

    async def status(self, headers: list[tuple[str, str]]) -> int:
        return (await self.http.get(CARD, headers=headers)).status_code


@pytest.fixture
async def card() -> AsyncIterator[Served]:
    app = create_app(echo, store="memory", public_url="http://test")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=10) as http:
        first = await http.get(CARD)
        assert first.status_code == 200
        yield Served(http, first)
    await app.state.relaykit.stop()


def date(seconds: int, form: str = "imf") -> str:
    text = formatdate(seconds, usegmt=True)  # IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    if form == "rfc850":  # "Sunday, 06-Nov-94 08:49:37 GMT"
        day, rest = text.split(", ", 1)
        d, mon, year, clock, zone = rest.split(" ")
        full = {"Mon": "Monday", "Tue": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday", "Fri": "Friday"}
        full |= {"Sat": "Saturday", "Sun": "Sunday"}
        return f"{full[day]}, {d}-{mon}-{year[2:]} {clock} {zone}"
    if form == "asctime":  # "Sun Nov  6 08:49:37 1994"
        day, rest = text.split(", ", 1)
        d, mon, year, clock, _zone = rest.split(" ")
        return f"{day} {mon} {int(d):2d} {clock} {year}"
    return text


async def test_if_modified_since_the_served_last_modified_is_not_modified(card: Served) -> None:
    assert await card.status([("If-Modified-Since", card.last_modified)]) == 304
    for form in ("rfc850", "asctime"):  # the obsolete formats a recipient must also accept (§5.6.7)
        assert await card.status([("If-Modified-Since", date(card.seconds, form))]) == 304, form
    assert await card.status([("If-Modified-Since", date(card.seconds + 60))]) == 304
    assert await card.status([("If-Modified-Since", date(card.seconds - 1))]) == 200
    assert await card.status([("If-Modified-Since", "not a date")]) == 200
    # A date header with two members has no single date to compare: ignored (§13.1.3).
    twice = [("If-Modified-Since", card.last_modified), ("If-Modified-Since", card.last_modified)]
    assert await card.status(twice) == 200


async def test_if_none_match_uses_weak_comparison_and_star(card: Served) -> None:
    assert await card.status([("If-None-Match", card.etag)]) == 304
    assert await card.status([("If-None-Match", f"W/{card.etag}")]) == 304
    assert await card.status([("If-None-Match", "*")]) == 304
    assert await card.status([("If-None-Match", f'"other", W/{card.etag}')]) == 304
    # Several field lines are one list (§5.3).
    assert await card.status([("If-None-Match", '"other"'), ("If-None-Match", card.etag)]) == 304
    assert await card.status([("If-None-Match", '"other"')]) == 200


async def test_if_none_match_wins_over_if_modified_since(card: Served) -> None:
    # §13.1.3: If-Modified-Since is evaluated only when If-None-Match is absent.
    assert await card.status([("If-None-Match", '"other"'), ("If-Modified-Since", card.last_modified)]) == 200
    assert await card.status([("If-None-Match", card.etag), ("If-Modified-Since", date(card.seconds - 60))]) == 304


async def test_if_match_and_if_unmodified_since_come_first(card: Served) -> None:
    assert await card.status([("If-Match", card.etag)]) == 200
    assert await card.status([("If-Match", "*")]) == 200
    # If-Match compares strongly: a weak tag never matches (§13.1.1).
    assert await card.status([("If-Match", f"W/{card.etag}")]) == 412
    assert await card.status([("If-Match", '"other"'), ("If-None-Match", card.etag)]) == 412
    assert await card.status([("If-Unmodified-Since", date(card.seconds - 60))]) == 412
    assert await card.status([("If-Unmodified-Since", card.last_modified)]) == 200
    # If-Unmodified-Since is not looked at when If-Match is present (§13.2.2 step 2).
    assert await card.status([("If-Match", card.etag), ("If-Unmodified-Since", date(card.seconds - 60))]) == 200
    refused = await card.http.get(CARD, headers=[("If-Match", '"other"')])
    assert "cache-control" not in refused.headers  # a 412 with explicit freshness could be cached


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], 200),
        ([(b"if-none-match", b'"e"')], 304),
        ([(b"if-none-match", b'W/"e"')], 304),
        ([(b"if-none-match", b" * ")], 304),
        ([(b"if-none-match", b'"e,"')], 200),  # a comma is an etagc: no match by splitting on it
        ([(b"if-match", b'"e"'), (b"if-match", b'"f"')], 200),
        ([(b"if-modified-since", b"Thu, 01 Jan 1970 00:16:40 GMT")], 304),  # 1000 s: equal
        ([(b"if-modified-since", b"Thu, 01 Jan 1970 00:16:39 GMT")], 200),
        ([(b"if-modified-since", b"Thu, 01 Jan 1970 01:16:40 +0100")], 304),  # a zone offset, the same instant
    ],
)
def test_evaluate(headers: list[tuple[bytes, bytes]], expected: int) -> None:
    scope: dict[str, Any] = {"headers": headers}
    assert evaluate(scope, b'"e"', 1000) == expected


def _growth_exponent(sizes: list[int], times: list[float]) -> float:
    """The least-squares slope of log(time) against log(size): 1 for a linear cost, 2 for a quadratic one."""
    xs = [math.log(n) for n in sizes]
    ys = [math.log(t) for t in times]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)


@pytest.mark.parametrize("name", [b"if-none-match", b"if-match"])
def test_entity_tag_lists_cost_linear_time(name: bytes) -> None:
    """A list of spaces after an unclosed quote (anyone may send it, on the public card) costs time linear in its
    length: it used to be quadratic (a 15 KB header held the event loop for seconds). The growth exponent over four
    doublings must stay near 1 (2 is quadratic); process time, the best of three rounds, each size repeated so that
    a measurement is well above the clock's resolution."""
    sizes = [2_000, 4_000, 8_000, 16_000]
    repeat = 200
    best = [math.inf] * len(sizes)
    for _ in range(3):
        for i, n in enumerate(sizes):
            scope: dict[str, Any] = {"headers": [(name, b'"a' + b" " * n + b"x")]}
            t = time.process_time()
            for _ in range(repeat):
                evaluate(scope, b'"e"', 1000)
            best[i] = min(best[i], time.process_time() - t)
    exponent = _growth_exponent(sizes, best)
    assert exponent < 1.4, f"times {best}, exponent {exponent:.2f}"
    # And still a correct answer: no tag in it matches (If-None-Match: 200; If-Match: 412).
    assert evaluate({"headers": [(name, b'"a   x')]}, b'"e"', 1000) == (200 if name == b"if-none-match" else 412)
    # A tag after garbage and spaces is still found.
    assert evaluate({"headers": [(name, b'junk   , W/"e",  "e"')]}, b'"e"', 1000) == (
        304 if name == b"if-none-match" else 200
    )
