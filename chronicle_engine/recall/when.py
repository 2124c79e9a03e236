"""The time a query names: "on 21 May, 2023", "in August 2023", "in December", "during 2022".

Invariant: only dates written out are read (a day with its month and year, a month with or
without its year, a year after a preposition); nothing relative ("last week") and nothing
guessed. A query that names no time gets None, and ranking is unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["Moment", "named_time"]

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
_PATTERNS = (
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE),
    # a month or a year alone only after a preposition: "May I ..." names no month
    re.compile(
        rf"\b(?:in|on|during|of|since|by|early|late|mid)\s+{_MONTH}(?![\w-])", re.IGNORECASE
    ),
    re.compile(rf"\b(?:in|during|of|since|by)\s+{_YEAR}\b", re.IGNORECASE),
)


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
        when = datetime.fromtimestamp(ts, UTC)
        if self.day is not None and self.month is not None and self.year is not None:
            try:
                day = datetime(self.year, self.month, self.day, tzinfo=UTC)
            except ValueError:
                return False
            return abs((when - day).total_seconds() - 43_200) <= 129_600
        if self.year is not None and when.year != self.year:
            return False
        return self.month is None or when.month == self.month


# Every pattern needs a year or a month, and every month's name starts with its first three
# letters: a query with neither (most of them) is answered without running the patterns, which
# cost far more than a turn's other reading of its query. Case-folded, as IGNORECASE matches
# ("ſep" is "sep").
_YEAR_SEEN = re.compile(r"(?:19|20)\d\d")
_MONTH_STARTS = tuple(sorted({name[:3] for name in _MONTHS}))


def named_time(query: str) -> Moment | None:
    """The first time `query` names, or None."""
    query = query or ""
    if _YEAR_SEEN.search(query) is None:
        folded = query.casefold()
        if not any(start in folded for start in _MONTH_STARTS):
            return None
    for pattern in _PATTERNS:
        found = pattern.search(query)
        if found is None:
            continue
        parts = found.groupdict()
        # By its first three letters, case-folded: IGNORECASE also matches "ſep" or "Aprİl",
        # which no lower-cased key spells.
        month = _MONTHS[parts["month"].casefold()[:3]] if parts.get("month") else None
        year = int(parts["year"]) if parts.get("year") else None
        day = int(parts["day"]) if parts.get("day") else None
        if day is not None and not 1 <= day <= 31:
            continue
        return Moment(year, month, day)
    return None
