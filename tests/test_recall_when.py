"""The time a query names lifts the messages of that time; a query that names none ranks as
before."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_recall_support import open_core, say

from chronicle_engine.recall.when import _PATTERNS, Moment, named_time


def ts(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()


def test_dates_written_out_are_read():
    assert named_time("What did Tim say on 16 November, 2023?") == Moment(2023, 11, 16)
    assert named_time("the book he finished on 8th December, 2023") == Moment(2023, 12, 8)
    assert named_time("shared on December 1,2023") == Moment(2023, 12, 1)
    assert named_time("What did John share in January 2024?") == Moment(2024, 1, None)
    assert named_time("What deal did John get in December?") == Moment(None, 12, None)
    assert named_time("an ankle injury in 2023") == Moment(2023, None, None)
    assert named_time("on 45 May, 2023") == Moment(2023, 5, None)  # no such day: the month


@pytest.mark.parametrize(
    "query", ["May I ask what he said?", "last week", "5 days ago", "room 2023"]
)
def test_nothing_relative_or_ambiguous_is_read(query):
    assert named_time(query) is None


def test_a_moment_holds_its_own_time():
    day = Moment(2023, 5, 21)
    assert day.holds(ts(2023, 5, 21, 13)) and day.holds(ts(2023, 5, 22, 9))
    assert not day.holds(ts(2023, 5, 24)) and not day.holds(0.0)
    assert Moment(None, 12, None).holds(ts(2021, 12, 3))
    assert not Moment(2023, 12, None).holds(ts(2022, 12, 3))
    assert Moment(2023, None, None).holds(ts(2023, 2, 1))
    assert not Moment(2023, 2, 30).holds(ts(2023, 3, 2))  # no such day: holds nothing


@pytest.fixture
def core(tmp_path):
    c = open_core("memory", tmp_path)
    yield c
    c.shutdown()


def test_the_named_time_lifts_its_messages(core):
    may = say(
        core,
        "s1",
        "Signed with the Hawks today, what a day for basketball!",
        created_at="2023-05-21T18:00:00+00:00",
    )
    august = say(
        core,
        "s2",
        "Basketball camp was great, the Hawks signed two new players.",
        created_at="2023-08-02T18:00:00+00:00",
    )
    plain = core.recall.search("Hawks signed basketball", scope="messages")
    dated = core.recall.search(
        "Which team did he sign with on 21 May, 2023? Hawks basketball", scope="messages"
    )
    assert plain[0]["id"] == f"m{august}"
    assert dated[0]["id"] == f"m{may}"


_WORDS = [
    "in",
    "on",
    "of",
    "during",
    "May",
    "may",
    "Sept.",
    "\u017fep",
    "apr\u0130l",
    "JUNE",
    "dec",
]
_WORDS += ["21st", "3", "2023", "1999", "x2020", ",", "I", "turn", "the", "logs"]


@given(st.lists(st.sampled_from(_WORDS), max_size=7).map(" ".join))
def test_a_query_names_a_time_exactly_when_a_pattern_reads_one(query: str) -> None:
    # (the days here are all real ones: a pattern's match of an impossible day is skipped)
    matched = any(pattern.search(query) for pattern in _PATTERNS)
    assert (named_time(query) is not None) == matched
