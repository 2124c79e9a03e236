"""`Reach`: its SQL and its Python test agree on every message (reach.py's invariant), a time
the query names included."""

from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from chronicle_engine.recall.reach import Reach, Told, Window

_SESSIONS = ["a", "b", "c", None]
_ROWS = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=60),
        st.sampled_from(_SESSIONS),
        st.sampled_from([0.0, 5.0, 9.999, 10.0, 10.5, 20.0, 20.000001, 35.0]),
    ),
    max_size=25,
    unique_by=lambda row: row[0],
)
_STRETCHES = st.lists(
    st.tuples(st.sampled_from([1e-300, 5.0, 10.0, 12.0]), st.sampled_from([10.0, 20.0, 40.0])),
    max_size=3,
).map(tuple)


@given(
    _ROWS,
    st.none() | st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True).map(tuple),
    st.none() | st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 30)),
    st.none() | _STRETCHES,
)
@settings(max_examples=200)
def test_the_sql_admits_exactly_what_admits_admits(rows, sessions, outside, times):
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE recall_messages (seq INTEGER PRIMARY KEY, scope INT, session TEXT, ts REAL)"
    )
    db.executemany("INSERT INTO recall_messages VALUES (?, 1, ?, ?)", rows)
    db.execute("INSERT INTO recall_messages VALUES (99, 2, 'a', 10.0)")  # another scope's
    window = None if outside is None else Window((outside[0],), outside[1], frozenset({3, 7}))
    reach = Reach(sessions, None, window, None if times is None else Told(1, times))
    condition, params = reach.messages()
    sql = "SELECT m.seq FROM recall_messages m" + (f" WHERE {condition}" if condition else "")
    found = {seq for (seq,) in db.execute(sql, params)}
    if times is not None:
        assert 99 not in found  # a time is of one scope
    by_sql = found - {99}
    by_python = {seq for seq, session, at in rows if reach.admits(seq, session, at)}
    assert by_sql == by_python
    assert reach.narrowed == bool(condition)


def test_within_keeps_the_rest_of_the_reach():
    reach = Reach(("a",), (3, 9), Window(("b",), 4))
    narrowed = reach.within(Told(4, ((1.0, 2.0),)))
    assert (narrowed.sessions, narrowed.span, narrowed.outside) == (
        reach.sessions,
        reach.span,
        reach.outside,
    )
    assert narrowed.told == Told(4, ((1.0, 2.0),))


def test_a_time_names_its_scope_so_another_scopes_messages_stay_out():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE recall_messages (seq INTEGER PRIMARY KEY, scope INT, ts REAL)")
    db.executemany("INSERT INTO recall_messages VALUES (?, ?, ?)", [(1, 1, 5.0), (2, 2, 5.0)])
    condition, params = Told(1, ((4.0, 6.0),)).sql()
    assert db.execute(
        f"SELECT m.seq FROM recall_messages m WHERE {condition}", params
    ).fetchall() == [(1,)]
    assert Told(1, ()).sql() == ("1 = 0", [])
