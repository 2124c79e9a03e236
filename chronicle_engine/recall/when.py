"""The time a query names: "on 21 May, 2023", "on 2023-05-21", "in August 2023", "in December",
"during 2022", and, counted from when it is asked, "5 days ago", "a week ago", "yesterday",
"last Friday", "last month", "in the past two weeks".

Invariants: a date written out is read as written (a day with its month and year, a month with
or without its year, a year after a preposition); a relative time is read only when the caller
says when the query is asked (`now`), as a span of that clock's time, in UTC. Nothing is
guessed: "recently", "the other day" or "a few weeks ago" name no span, and a query that names
no time gets None, so its ranking is unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache, cached_property

__all__ = ["Moment", "Span", "Stretches", "named_time"]

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"


@cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    """The dates a query may write out, compiled on the first query that holds a year or a
    month's name (most hold neither, and the patterns cost ~2 ms to compile)."""
    return (
        # ISO 8601's calendar date, as a developer writes one ("on 2023-05-21", "2023-05-21T10:00")
        re.compile(
            rf"(?<![\w-]){_YEAR}-(?P<number>0[1-9]|1[0-2])-(?P<day>0[1-9]|[12]\d|3[01])(?![\d-])"
        ),
        re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE),
        re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", re.IGNORECASE),
        re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE),
        # a month or a year alone only after a preposition: "May I ..." names no month
        re.compile(
            rf"\b(?:in|on|during|of|since|by|early|late|mid)\s+{_MONTH}(?![\w-])", re.IGNORECASE
        ),
        re.compile(rf"\b(?:in|during|of|since|by)\s+{_YEAR}\b", re.IGNORECASE),
    )


_DAY_S = 86_400.0


@dataclass(frozen=True)
class Moment:
    """A year, a month (of a year, or of any year) or a day, as a query names it."""

    year: int | None
    month: int | None
    day: int | None

    def holds(self, ts: float) -> bool:
        """Whether the time `ts` (UTC seconds) falls within this moment (a day: within a day of
        it, as a conversation's date and the time it tells of may straddle midnight)."""
        if not ts:
            return False
        bounds = self._bounds
        if bounds is not None:  # ranking asks this of every row it reads: no datetime for each
            return bounds[0] <= ts <= bounds[1]
        if self.month is None:
            return True
        try:
            return datetime.fromtimestamp(ts, UTC).month == self.month
        except (OverflowError, OSError, ValueError):  # a time past the calendar's years
            return False

    def stretches(self, first_and_last: Callable[[], tuple[float, float] | None]) -> Stretches:
        """The times this moment holds, as `Stretches`. A month of any year is that month of
        every year from the oldest to the newest time of the memory (`first_and_last`, asked
        only then)."""
        if self._bounds is not None:
            bounds = [self._bounds]
        elif self.month is not None and (years := _years(first_and_last())) is not None:
            bounds = [b for y in years if (b := Moment(y, self.month, None)._bounds)]
        else:
            bounds = []
        # `holds` takes both ends; a stretch ends just after the last second it holds.
        return _stretches((lo, math.nextafter(hi, math.inf)) for lo, hi in bounds if lo <= hi)

    @cached_property
    def _bounds(self) -> tuple[float, float] | None:
        """The first and last second (UTC) this moment holds: a day (with a day of slack either
        side), a month of a year, or a year; None for a month of any year. A day that does not
        exist (30 February) holds nothing."""
        if self.year is None:
            return None
        if self.day is not None and self.month is not None:
            try:
                day = datetime(self.year, self.month, self.day, tzinfo=UTC).timestamp()
            except ValueError:
                return (1.0, 0.0)
            return (day - _DAY_S, day + 2 * _DAY_S)
        start = datetime(self.year, self.month or 1, 1, tzinfo=UTC)
        try:
            if self.month is None:
                end = datetime(self.year + 1, 1, 1, tzinfo=UTC)
            else:
                end = (start + timedelta(days=31)).replace(day=1)
        except (OverflowError, ValueError):  # December of 9999: the calendar's last month
            return (start.timestamp(), datetime.max.replace(tzinfo=UTC).timestamp())
        return (start.timestamp(), end.timestamp() - 1e-6)


# Every pattern needs a year or a month, and every month's name starts with its first three
# letters: a query with neither (most of them) is answered without running the patterns, which
# cost far more than a turn's other reading of its query. Case-folded, as IGNORECASE matches
# ("ſep" is "sep").
_YEAR_SEEN = re.compile(r"(?:19|20)\d\d")
_MONTH_STARTS = tuple(sorted({name[:3] for name in _MONTHS}))


def named_time(
    query: str, now: float | None = None, words: Collection[str] | None = None
) -> Moment | Span | None:
    """The first date `query` writes out, else (when `now`, UTC seconds, says when it is asked)
    the time it names relative to then, else None. `words`, when the caller has them, are the
    query's `text.tokens` (lower-cased words): an ASCII query none of whose words is a month's
    name or a relative time's is then answered without searching its text."""
    query = query or ""
    if _YEAR_SEEN.search(query) is None:
        if words is not None and query.isascii():
            if _MONTHS.keys().isdisjoint(words):
                return None if now is None else relative_time(query, now, words)
        elif not any(start in query.casefold() for start in _MONTH_STARTS):
            return None if now is None else relative_time(query, now)
    for pattern in _patterns():
        found = pattern.search(query)
        if found is None:
            continue
        parts = found.groupdict()
        # By its first three letters, case-folded: IGNORECASE also matches "ſep" or "Aprİl",
        # which no lower-cased key spells.
        month = _MONTHS[parts["month"].casefold()[:3]] if parts.get("month") else None
        month = int(parts["number"]) if parts.get("number") else month
        year = int(parts["year"]) if parts.get("year") else None
        day = int(parts["day"]) if parts.get("day") else None
        if day is not None and not 1 <= day <= 31:
            continue
        return Moment(year, month, day)
    return None if now is None else relative_time(query, now)


@dataclass(frozen=True)
class Span:
    """A stretch of time, [start, end) in UTC seconds, that a query names relative to when it
    is asked."""

    start: float
    end: float
    phrase: str = field(default="", compare=False)
    """The words of the query that named it ("5 days ago")."""

    def holds(self, ts: float) -> bool:
        return bool(ts) and self.start <= ts < self.end

    def stretches(self, first_and_last: Callable[[], tuple[float, float] | None]) -> Stretches:
        """This span as `Stretches` (one, or none when it is empty)."""
        return _stretches([(self.start, self.end)])


Stretches = tuple[tuple[float, float], ...]
"""The times a `Moment` or `Span` holds, each [start, end) in UTC seconds: `holds(ts)` is true
exactly when some stretch has start <= ts < end. No stretch holds 0, a row without a time."""

_MOST_YEARS = 100
"""A month of any year is read in at most this many years of a memory (the years its messages
span); a memory whose times span more (a date far off, typed or imported wrong) gets no
stretches for it, so a query's statements stay few. `holds` still lifts that month's messages."""


def _years(first_and_last: tuple[float, float] | None) -> range | None:
    """The calendar years from a memory's first time to its last (None past `_MOST_YEARS`, or
    past the calendar)."""
    if first_and_last is None:
        return None
    try:
        first, last = (datetime.fromtimestamp(t, UTC).year for t in first_and_last)
    except (OverflowError, OSError, ValueError):
        return None
    return range(first, last + 1) if last - first < _MOST_YEARS else None


def _stretches(bounds: Iterable[tuple[float, float]]) -> Stretches:
    """Non-empty [start, end) ranges, each split around 0 (a row without a time)."""
    out: list[tuple[float, float]] = []
    for start, end in bounds:
        if start < 0.0 < end or start == 0.0:
            out += [(start, 0.0)] if start < 0.0 else []
            start = math.ulp(0.0)
        if start < end:
            out.append((start, end))
    return tuple(out)


_UNIT_DAYS = {"day": 1.0, "week": 7.0, "fortnight": 14.0, "month": 30.0, "year": 365.0}
_NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_NUMBERS = {word: n for n, word in enumerate(_NUMBER_WORDS, start=1)} | {"a": 1, "an": 1}
_COUNT = r"(?P<count>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"
_UNIT = r"(?P<unit>day|week|fortnight|month|year)s?"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@cache
def _relative() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The relative times, compiled on the first query that holds one of `_RELATIVE_WORDS`."""
    ascii_ci = re.IGNORECASE | re.ASCII
    return (
        ("ago", re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+ago\b", ascii_ci)),
        ("yesterday", re.compile(r"\byesterday\b", ascii_ci)),
        ("weekday", re.compile(rf"\blast\s+(?P<weekday>{'|'.join(_WEEKDAYS)})\b", ascii_ci)),
        ("weekend", re.compile(r"\blast\s+weekend\b", ascii_ci)),
        (
            "past",
            re.compile(
                rf"\b(?:in|over|during|within|for)\s+the\s+(?:past|last)\s+(?:{_COUNT}\s+)?{_UNIT}",
                ascii_ci,
            ),
        ),
        ("last", re.compile(r"\blast\s+(?P<unit>week|month|year)\b", ascii_ci)),
    )


_RELATIVE_SEEN = re.compile(r"ago|yesterday|last|past", re.IGNORECASE | re.ASCII)
# Each relative pattern holds one of these as a whole word (between a word boundary or a space
# and a space or a word boundary), so an ASCII query holds it among its lower-cased tokens.
_RELATIVE_WORDS = frozenset(("ago", "yesterday", "last", "past"))


def _day_of(moment: datetime, phrase: str) -> Span:
    """A calendar day as `Moment.holds` reads one: the day before and after it too (a
    conversation's date and the time it tells of may straddle midnight, or a time zone)."""
    start = datetime(moment.year, moment.month, moment.day, tzinfo=UTC).timestamp()
    return Span(start - _DAY_S, start + 2 * _DAY_S, phrase)


def relative_time(query: str, now: float, words: Collection[str] | None = None) -> Span | None:
    """The span of time `query` names relative to `now` (UTC seconds), or None.

    "N days ago", "yesterday" and "last Friday" (the last Friday before today) name a calendar
    day, with a day of slack either side as a date written out has; "last weekend" the last
    Saturday and Sunday, so too; "N weeks/months/years ago" the stretch within half a unit of
    that moment; "last week/month/year" the calendar week (Monday first), month or year before
    the current one, with a day of slack; "in the past N days/weeks/months" everything since
    then. `words` as `named_time` takes them."""
    if not query:
        return None
    if words is not None and query.isascii():
        if _RELATIVE_WORDS.isdisjoint(words):
            return None
    elif _RELATIVE_SEEN.search(query) is None:
        return None
    at = datetime.fromtimestamp(now, UTC)
    for kind, pattern in _relative():
        found = pattern.search(query)
        if found is None:
            continue
        parts = found.groupdict()
        phrase = found.group(0)
        count_word = (parts.get("count") or "1").lower()
        count = int(count_word) if count_word.isdigit() else _NUMBERS[count_word]
        days = _UNIT_DAYS[parts["unit"].lower()] if parts.get("unit") else 1.0
        if kind == "yesterday":
            return _day_of(at - timedelta(days=1), phrase)
        if kind == "ago":
            if days == 1.0:
                return _day_of(at - timedelta(days=count), phrase)
            half = 0.5 * days * _DAY_S
            then = now - count * days * _DAY_S
            return Span(then - half, then + half, phrase)
        if kind == "weekday":
            back = (at.weekday() - _WEEKDAYS.index(parts["weekday"].lower()) - 1) % 7 + 1
            return _day_of(at - timedelta(days=back), phrase)
        if kind == "weekend":
            saturday = at - timedelta(days=(at.weekday() - 6) % 7 + 1)
            start = _day_of(saturday, phrase).start
            return Span(start, start + 4 * _DAY_S, phrase)
        if kind == "past":
            return Span(now - count * days * _DAY_S, now + _DAY_S, phrase)
        return _calendar_before(at, parts["unit"].lower(), phrase)
    return None


def _calendar_before(at: datetime, unit: str, phrase: str) -> Span:
    """The calendar week (Monday first), month or year before the one holding `at`, with a day
    of slack either side."""
    today = datetime(at.year, at.month, at.day, tzinfo=UTC)
    if unit == "week":
        end = today - timedelta(days=at.weekday())
        start = end - timedelta(days=7)
    elif unit == "month":
        end = today.replace(day=1)
        start = (end - timedelta(days=1)).replace(day=1)
    else:
        end = today.replace(month=1, day=1)
        start = end.replace(year=end.year - 1)
    return Span(start.timestamp() - _DAY_S, end.timestamp() + _DAY_S, phrase)
