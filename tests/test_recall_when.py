"""The time a query names lifts the messages of that time; a query that names none ranks as
before."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_recall_support import core_on, say

from chronicle_engine.recall import search
from chronicle_engine.recall.text import tokens
from chronicle_engine.recall.when import Moment, Span, _patterns, named_time


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
    assert named_time("What did we decide on 2023-05-21?") == Moment(2023, 5, 21)
    assert named_time("the log of 2023-05-21T10:00:00Z") == Moment(2023, 5, 21)


@pytest.mark.parametrize(
    "query",
    ["ticket 2023-13-01", "build 12023-05-21", "id 2023-05-21-7", "v2023-5-21", "x 2023-05-2"],
)
def test_what_only_looks_like_an_iso_date_names_none(query):
    assert named_time(query) is None


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


@pytest.fixture(params=["memory", "postgres"])
def core(request, tmp_path):
    with core_on(request.param, request, tmp_path) as c:
        yield c


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
    matched = any(pattern.search(query) for pattern in _patterns())
    assert (named_time(query) is not None) == matched


# Wednesday 22 March 2023, 11:50 UTC: when the relative times below are asked.
ASKED = ts(2023, 3, 22, 11, 50)


def day(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("query", "start", "end", "phrase"),
    [
        ("What did I cook 5 days ago?", "2023-03-16 00:00", "2023-03-19 00:00", "5 days ago"),
        (
            "which book did I finish a week ago",
            "2023-03-11 23:50",
            "2023-03-18 23:50",
            "a week ago",
        ),
        ("two months ago", "2023-01-06 11:50", "2023-02-05 11:50", "two months ago"),
        ("what did I buy yesterday", "2023-03-20 00:00", "2023-03-23 00:00", "yesterday"),
        ("the artist from last Friday", "2023-03-16 00:00", "2023-03-19 00:00", "last Friday"),
        ("last Wednesday", "2023-03-14 00:00", "2023-03-17 00:00", "last Wednesday"),
        ("a hike last weekend", "2023-03-17 00:00", "2023-03-21 00:00", "last weekend"),
        ("last week", "2023-03-12 00:00", "2023-03-21 00:00", "last week"),
        ("last month", "2023-01-31 00:00", "2023-03-02 00:00", "last month"),
        ("last year", "2021-12-31 00:00", "2023-01-02 00:00", "last year"),
        ("over the last 3 days", "2023-03-19 11:50", "2023-03-23 11:50", "over the last 3 days"),
        ("in the past two weeks", "2023-03-08 11:50", "2023-03-23 11:50", "in the past two weeks"),
    ],
)
def test_relative_times_count_from_when_the_query_is_asked(query, start, end, phrase):
    span = named_time(query, ASKED)
    assert isinstance(span, Span)
    assert (span.start, span.end, span.phrase) == (day(start), day(end), phrase)


@pytest.mark.parametrize(
    "query",
    ["How many days ago did I buy it?", "the last time I went", "a few weeks ago", "recently"],
)
def test_relative_words_that_name_no_span_are_not_read(query):
    assert named_time(query, ASKED) is None


def test_a_date_written_out_comes_before_a_relative_time():
    assert named_time("on 16 November, 2023, not yesterday", ASKED) == Moment(2023, 11, 16)


@given(
    st.lists(
        st.sampled_from(
            [
                "5",
                "a",
                "two",
                "days",
                "week",
                "ago",
                "last",
                "past",
                "in",
                "the",
                "month",
                "Friday",
                "weekend",
                "yesterday",
                "over",
                "year",
                "I",
                "laſt",  # letters whose case folding is an ASCII letter's ("ſ" is "s")
                "FRİDAY",
                "ſix",
            ]
        ),
        max_size=6,
    ).map(" ".join),
    st.floats(min_value=ts(2000, 1, 1), max_value=ts(2090, 1, 1)),
)
def test_a_relative_span_is_never_empty_and_never_all_future(query: str, now: float) -> None:
    span = named_time(query, now)
    if span is not None:
        assert isinstance(span, Span)
        assert span.start < span.end and span.start <= now
        assert span.phrase and span.phrase in query


def test_the_relative_time_lifts_its_messages_and_leaves_its_words_out(core):
    core.recall.index.clock = lambda: ASKED
    earlier = say(
        core,
        "s1",
        "Pottery class: two days ago I made a bowl, a week ago a cup.",
        created_at="2023-02-02T18:00:00+00:00",
    )
    that_day = say(
        core,
        "s2",
        "Finished the pottery class project, a blue vase.",
        created_at="2023-03-17T18:00:00+00:00",
    )
    plain = core.recall.search("pottery class days ago", scope="messages")
    assert plain[0]["id"] == f"m{earlier}"
    dated = core.recall.search("What did I make in pottery class 5 days ago?", scope="messages")
    assert dated[0]["id"] == f"m{that_day}"
    # Asked 40 days later, "5 days ago" is after the newest message: it names nothing here, and
    # the query ranks as one naming no time, its words kept ("days ago", "made").
    core.recall.index.clock = lambda: ASKED + 40 * 86_400
    later = core.recall.search("What did I make in pottery class 5 days ago?", scope="messages")
    assert [hit["id"] for hit in later] == [f"m{earlier}", f"m{that_day}"]


def _holds_by_calendar(moment: Moment, ts: float) -> bool:
    """What a moment holds, read off the calendar date of `ts` (the reference `holds` keeps
    to without building a datetime for each row)."""
    if not ts:
        return False
    when = datetime.fromtimestamp(ts, UTC)
    if moment.day is not None and moment.month is not None and moment.year is not None:
        try:
            day = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
        except ValueError:
            return False
        return abs((when - day).total_seconds() - 43_200) <= 129_600
    if moment.year is not None and when.year != moment.year:
        return False
    return moment.month is None or when.month == moment.month


@given(
    st.sampled_from([None, 1999, 2023, 2024]),
    st.sampled_from([None, *range(1, 13)]),
    st.sampled_from([None, 1, 15, 28, 29, 30, 31]),
    st.integers(min_value=-40, max_value=40),
    st.sampled_from([0.0, 0.5, -0.5, 1e-6, -1e-6, 4e4]),
)
def test_a_moment_holds_what_its_calendar_dates_hold(year, month, day, days, shift):
    moment = Moment(year, month, day if month and year else None)
    # times around the moment's own first day (its boundaries are where a shortcut would slip)
    first = datetime(year or 2023, month or 6, min(day or 1, 28), tzinfo=UTC)
    at = (first + timedelta(days=days)).timestamp() + shift
    assert moment.holds(at) == _holds_by_calendar(moment, at)
    assert not moment.holds(0.0)


@pytest.mark.parametrize(
    "query", ["LAST FRİDAY", "ſix days ago", "laſt ſunday", "a FORTNİGHT ago", "fİve weeks ago"]
)
def test_letters_that_fold_to_ascii_ones_name_no_relative_time(query):
    # Only ASCII spellings are read: "İ" and "ſ" fold to "i" and "s" but lower-case otherwise,
    # and read as a weekday or a unit they named none (a query that raised instead of searching).
    assert named_time(query, ASKED) is None


def test_a_query_in_such_letters_is_searched(store_core):
    store_core.capture.capture_messages("s", [{"role": "user", "content": "the boiler was fixed"}])
    assert store_core.recall.search("the boiler LAST FRİDAY", scope="messages")


_TIME_PIECES = [
    *_WORDS,
    *("5 days ago", "a week ago", "yesterday", "last Friday", "last weekend", "LAST MONTH"),
    *("in the past two weeks", "over the last 3 days", "Chicago", "lasting", "pasta", "agog"),
    *("last_week", "ago_", "may_", "in may.x", "in Sept.", "in mayo", "in may-day", "May2023"),
    *("laſt Friday", "FRİDAY", "ſix days ago", "yeſterday", "in ſep", "in Aprİl", "turn 12:"),
]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from(_TIME_PIECES), max_size=6),
    st.sampled_from([" ", "  ", "\t", ", ", "-", "_", ""]),
    st.one_of(st.none(), st.floats(min_value=ts(2000, 1, 1), max_value=ts(2090, 1, 1))),
)
def test_the_query_tokens_never_skip_a_time_the_text_names(
    pieces: list[str], sep: str, now: float | None
) -> None:
    # Given the query's tokens, named_time skips its text scans for an ASCII query none of
    # whose words is a month's or a relative time's: the answer must be the same either way.
    query = sep.join(pieces)
    assert named_time(query, now, set(tokens(query))) == named_time(query, now)


# -- the named time as a word of the query (search.MessageSearch._add_time) ----------------------


def _dated(core, session: str, day: str, *turns: tuple[str, str]) -> list[int]:
    return [
        say(core, session, text, name=name, created_at=f"{day}T18:00:00+00:00")
        for name, text in turns
    ]


def _a_year_of_chats(core) -> int:
    """Joanna and Nate over 2022; their July chat tells where she went without the word the
    question asks with. Returns the seq of that answer."""
    _dated(
        core,
        "may",
        "2022-05-12",
        ("Joanna", "I would love to travel somewhere new this summer."),
        ("Nate", "Travel is great, you should plan a trip!"),
    )
    july = _dated(
        core,
        "july",
        "2022-07-10",
        ("Nate", "Long time no talk, what have you been up to?"),
        ("Joanna", "I went to Woodhaven, a small town in the Midwest. Lovely old library."),
        ("Nate", "Sounds peaceful, glad you had fun."),
    )
    _dated(
        core,
        "september",
        "2022-09-14",
        ("Joanna", "No more travel for me this year, the screenplay needs me."),
        ("Nate", "Travel can wait, the screenplay cannot!"),
    )
    _dated(
        core,
        "november",
        "2022-11-20",
        ("Joanna", "My sister wants to travel with me to Spain next spring."),
        ("Joanna", "Travel insurance is so confusing, any tips?"),
    )
    return july[1]


def test_a_named_time_finds_an_answer_told_in_other_words(core):
    woodhaven = f"m{_a_year_of_chats(core)}"

    def ids(query: str) -> list[str]:
        return [hit["id"] for hit in core.recall.search(query, scope="messages", limit=3)]

    # Without the time, the turns that say "travel" rank first and the answer is not among them.
    assert woodhaven not in ids("Where did Joanna travel to?")
    # The time is a word every message of July 2022 holds, as rare as July's messages are.
    assert ids("Where did Joanna travel to in July 2022?")[0] == woodhaven
    assert ids("Where did Joanna travel to in July?")[0] == woodhaven  # July of any year
    assert ids("Where did Joanna travel to on 10 July, 2022?")[0] == woodhaven
    assert ids("Where did Joanna travel to on 2022-07-10?")[0] == woodhaven  # ISO 8601
    # Narrowed to a session, the time's candidates stay within it.
    assert woodhaven not in [
        hit["id"]
        for hit in core.recall.search(
            "Where did Joanna travel to in July 2022?", scope="session", session_id="may"
        )
    ]


def test_a_time_that_holds_no_message_changes_nothing(core):
    _a_year_of_chats(core)
    plain = core.recall.search("Where did Joanna travel to?", scope="messages")
    unheld = core.recall.search("Where did Joanna travel to in March 2021?", scope="messages")
    assert [h["id"] for h in unheld] == [h["id"] for h in plain]


# Whole seconds: `holds` reads a month of any year off a datetime, which rounds a time to the
# microsecond, so a time a fraction of a microsecond before a month's start is read as in it.
_AROUND = st.integers(min_value=int(ts(1900, 1, 1)), max_value=int(ts(2100, 1, 1))).map(float)


@given(
    st.sampled_from([None, 1901, 1969, 1970, 1999, 2023, 2024]),
    st.sampled_from([None, *range(1, 13)]),
    st.sampled_from([None, 1, 15, 29, 30, 31]),
    st.integers(min_value=-40, max_value=40),
    st.sampled_from([0.0, 0.5, -0.5, 1e-6, -1e-6, 4e4]),
    _AROUND,
    _AROUND,
)
@settings(max_examples=400)
def test_a_moments_stretches_hold_what_it_holds(year, month, day, days, shift, a, b):
    moment = Moment(year, month, day if month and year else None)
    if year is None and month is None:
        moment = Moment(2023, None, None)
    first, last = min(a, b), max(a, b)
    stretches = moment.stretches(lambda: (first, last))
    start = datetime(year or 2023, month or 6, min(day or 1, 28), tzinfo=UTC)
    for at in ((start + timedelta(days=days)).timestamp() + shift, first, last, 0.0):
        held = any(lo <= at < hi for lo, hi in stretches)
        # A month of any year is read between the memory's first and last year only, and only
        # when those span fewer than a hundred years.
        years = [datetime.fromtimestamp(t, UTC).year for t in (first, last)]
        in_reach = moment.year is not None or (
            years[1] - years[0] < 100
            and years[0] <= datetime.fromtimestamp(at, UTC).year <= years[1]
        )
        assert held == (moment.holds(at) and in_reach)


@pytest.mark.parametrize(
    "moment",
    [Moment(2023, 5, 21), Moment(2023, 5, None), Moment(2023, 12, None), Moment(1969, None, None)],
)
def test_a_stretch_holds_the_last_instant_its_moment_holds(moment):
    first, last = moment._bounds
    stretches = moment.stretches(lambda: None)
    for at in (first, last):
        assert moment.holds(at) and any(lo <= at < hi for lo, hi in stretches)
    after = math.nextafter(last, math.inf)
    assert not moment.holds(after) and not any(lo <= after < hi for lo, hi in stretches)


@given(
    st.floats(min_value=-3e9, max_value=4e9, allow_nan=False),
    st.floats(min_value=0.0, max_value=3e7, allow_nan=False),
    st.sampled_from([0.0, 1e-6, -1e-6, 0.5, -0.5]),
)
def test_a_spans_stretches_hold_what_it_holds(start, length, shift):
    span = Span(start, start + length)
    stretches = span.stretches(lambda: None)
    for at in (start + shift, start + length + shift, start + length / 2, 0.0, -0.0):
        assert any(lo <= at < hi for lo, hi in stretches) == span.holds(at)


def test_far_off_and_early_dates_leave_dated_queries_working(core):
    """A message dated far in the future (typed or imported wrong) or before 1970: a query
    naming a month of any year still answers, from the years it can read."""
    planted = say(
        core, "garden", "Planted tomatoes by the fence.", created_at="1965-03-05T10:00:00+00:00"
    )
    recent = say(
        core, "garden2", "Tomatoes need more water.", created_at="2024-06-05T10:00:00+00:00"
    )
    for far in (
        "2600-01-01T00:00:00+00:00",
        "9999-12-31T00:00:00+00:00",
        "9999-12-31T23:00:00-05:00",
    ):
        say(core, "odd", "A note about tomatoes from a broken clock.", created_at=far)
    for query in ("tomatoes in March", "tomatoes in December", "tomatoes in December 2024"):
        assert core.recall.search(query, scope="messages")  # no error, still answered
    assert {h["id"] for h in core.recall.search("tomatoes in 1965", scope="messages")[:1]} == {
        f"m{planted}"
    }
    assert f"m{recent}" in {h["id"] for h in core.recall.search("tomatoes", scope="messages")}


def test_early_dates_are_read_as_any_other(core):
    planted = say(
        core, "garden", "Planted tomatoes by the fence.", created_at="1965-03-05T10:00:00+00:00"
    )
    say(
        core,
        "garden2",
        "Tomatoes and basil, lovely tomatoes.",
        created_at="2024-06-05T10:00:00+00:00",
    )
    assert core.recall.search("tomatoes in March", scope="messages")[0]["id"] == f"m{planted}"


def test_the_times_best_matches_join_the_candidates(core):
    """The answer is not among the 100 best matches of the question's words (130 turns say
    "travel" and "Joanna"); the time's own matches bring it in."""
    for i in range(130):
        say(
            core,
            f"s{i}",
            f"Travel plans number {i}, Joanna loves to travel",
            name="Joanna",
            created_at=f"2022-0{1 + i % 5}-0{1 + i % 9}T18:00:00+00:00",
        )
    answer = say(
        core,
        "july",
        "I went to Woodhaven, a small town.",
        name="Joanna",
        created_at="2022-07-10T18:00:00+00:00",
    )
    found = core.recall.search(
        "Where did Joanna travel to in July 2022?", scope="messages", limit=5
    )
    assert found[0]["id"] == f"m{answer}"


def test_a_time_over_the_match_budget_is_left_to_the_boost(request, tmp_path, monkeypatch):
    """A time that holds more messages than `match_budget` is not scored as a word: the search
    ranks as it did before the time was one (the boost alone); within the budget it is. The
    query's words match fewer messages than either budget, so they are scored in both."""

    def ranked(budget: int, as_word: bool) -> list[tuple[str, float]]:
        with core_on("memory", request, tmp_path, recall__match_budget=budget) as core:
            for i in range(10):
                say(
                    core,
                    f"jan{i}",
                    f"Quiet day {i}.",
                    name="Nate",
                    created_at="2022-01-10T18:00:00+00:00",
                )
            for i in range(4):
                say(
                    core,
                    f"jul{i}",
                    f"Small talk {i}.",
                    name="Nate",
                    created_at="2022-07-10T18:00:00+00:00",
                )
            say(
                core,
                "july",
                "Back from travel.",
                name="Joanna",
                created_at="2022-07-10T19:00:00+00:00",
            )
            say(
                core,
                "may",
                "I would love to travel.",
                name="Joanna",
                created_at="2022-05-10T18:00:00+00:00",
            )
            say(
                core,
                "sep",
                "No travel this year.",
                name="Joanna",
                created_at="2022-09-10T18:00:00+00:00",
            )
            with monkeypatch.context() as patch:
                if not as_word:
                    patch.setattr(search.MessageSearch, "_add_time", lambda *args: None)
                hits = core.recall.search(
                    "Where did Joanna travel to in July 2022?", scope="messages"
                )
                return [(h["id"], h["score"]) for h in hits]

    # July holds five messages: over a budget of 3, within one of 6.
    assert ranked(3, as_word=True) == ranked(3, as_word=False)
    assert ranked(6, as_word=True) != ranked(6, as_word=False)


def test_counting_a_time_stops_at_the_cap(core):
    from chronicle_engine.recall.reach import Told

    for month in range(1, 6):
        for i in range(10):
            say(core, f"m{month}", f"note {i}", created_at=f"2022-0{month}-10T18:00:00+00:00")
    months = [Moment(2022, m, None) for m in range(1, 6)]
    told = Told(1, tuple(s for m in months for s in m.stretches(lambda: None)))
    core.recall.catch_up()
    with core.recall.index.reading("counting") as conn:
        scope = conn.execute("SELECT n FROM recall_scopes").fetchone()[0]
        told = Told(int(scope), told.stretches)
        assert search._held(conn, told, 12) == 12
        assert search._held(conn, told, 1000) == 50
        assert search._held(conn, Told(int(scope), ()), 5) == 0
