"""Many rows at once on PostgreSQL (`log.postgres.QmarkConnection`): `executemany` sends every
batch as psycopg sends one row, so a batch is accepted exactly when its rows are one by one (the
server types each parameter by its column); `tables.insert_rows`, which a caller uses only for
text and integer columns, writes the same rows as `executemany` in one statement over arrays.
(Review finding: a batch of two or more was once typed by the values' Python types and refused
a string for an INTEGER or TIMESTAMPTZ column, or an integer past bigint for NUMERIC, which one
row took.)"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import psycopg
import pytest
from postgres_support import own_schema

from chronicle_engine.log.postgres import QmarkConnection, _as_any
from chronicle_engine.log.tables import insert_rows


@pytest.fixture
def conn(postgres_cluster) -> Iterator[QmarkConnection]:
    with (
        own_schema(postgres_cluster) as conninfo,
        psycopg.connect(conninfo, autocommit=True) as raw,
    ):
        yield QmarkConnection(raw)


def _rows(conn: QmarkConnection, table: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()]


def test_a_batch_is_accepted_as_its_rows_are_one_by_one(conn):
    conn.execute("CREATE TABLE typed(a INTEGER, b TIMESTAMPTZ, c NUMERIC)")
    sql = "INSERT INTO typed(a, b, c) VALUES (?, ?, ?)"
    conn.executemany(sql, [("1", "2026-01-01T00:00:00+00:00", 2**70)])
    conn.executemany(
        sql,
        [("2", "2026-01-02T00:00:00+00:00", 2**70), ("3", "2026-01-03T00:00:00+00:00", 1)],
    )
    rows = _rows(conn, "typed")
    assert [r[0] for r in rows] == [1, 2, 3]
    assert [int(str(r[2])) for r in rows] == [2**70, 2**70, 1]


def test_insert_rows_writes_what_executemany_writes(conn):
    for table in ("by_rows", "by_arrays"):
        conn.execute(f"CREATE TABLE {table}(k TEXT PRIMARY KEY, n BIGINT, t TEXT, none TEXT)")
    rows = [(f"k{i}", i * 7 - 3, None if i % 3 else f"t{i}", None) for i in range(50)]
    sql = "INSERT INTO {}(k, n, t, none) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
    conn.executemany(sql.format("by_rows"), rows)
    insert_rows(conn, sql.format("by_arrays"), rows)
    insert_rows(conn, sql.format("by_arrays"), rows[:2])  # conflicts: nothing more
    assert _rows(conn, "by_arrays") == _rows(conn, "by_rows")
    assert len(_rows(conn, "by_rows")) == 50


def test_insert_rows_leaves_an_integer_past_bigint_to_the_server(conn):
    conn.execute("CREATE TABLE wide(a NUMERIC, b TEXT)")
    insert_rows(conn, "INSERT INTO wide(a, b) VALUES (?, ?)", [(2**70, "x"), (1, "y")])
    assert [(int(str(a)), b) for a, b in _rows(conn, "wide")] == [(1, "y"), (2**70, "x")]


def test_insert_rows_on_sqlite_is_executemany(tmp_path):
    db = sqlite3.connect(tmp_path / "t.db")
    db.execute("CREATE TABLE t(k TEXT, n INTEGER)")
    insert_rows(db, "INSERT INTO t(k, n) VALUES (?, ?)", [("a", 1), ("b", 2)])
    assert db.execute("SELECT k, n FROM t ORDER BY k").fetchall() == [("a", 1), ("b", 2)]
    db.close()


def test_a_long_in_list_reads_what_sqlite_reads(conn):
    """An `IN (?, ...)` longer than psycopg's 50 cached parameters goes as `= ANY(?)` over one
    array (one statement text at every length): the same rows as SQLite's IN, NOT IN left as
    it is."""
    rows = [(n, f"w{n}") for n in range(200)]
    conn.execute("CREATE TABLE words(n BIGINT, w TEXT)")
    conn.executemany("INSERT INTO words(n, w) VALUES (?, ?)", rows)
    lite = sqlite3.connect(":memory:")
    lite.execute("CREATE TABLE words(n INTEGER, w TEXT)")
    lite.executemany("INSERT INTO words(n, w) VALUES (?, ?)", rows)
    ints = list(range(0, 180, 3))
    texts = [f"w{n}" for n in range(1, 160, 2)]
    not_in = f"NOT IN ({','.join('?' * len(ints))})"
    for sql, params, sent in (
        (
            f"SELECT n FROM words WHERE n IN ({','.join('?' * len(ints))}) ORDER BY n",
            ints,
            ("SELECT n FROM words WHERE n = ANY(?) ORDER BY n", [ints]),
        ),
        (
            f"SELECT n FROM words WHERE n > ? AND w IN ({', '.join('?' * len(texts))})"
            f" AND n {not_in} ORDER BY n LIMIT ?",
            [5, *texts, *ints, 30],
            (
                f"SELECT n FROM words WHERE n > ? AND w = ANY(?) AND n {not_in} ORDER BY n LIMIT ?",
                [5, texts, *ints, 30],
            ),
        ),
        (
            f"SELECT n FROM words WHERE n IN ({','.join('?' * 51)}) ORDER BY n",
            ints[:51],
            ("SELECT n FROM words WHERE n = ANY(?) ORDER BY n", [ints[:51]]),
        ),
    ):
        want = [r[0] for r in lite.execute(sql, params).fetchall()]
        assert [r[0] for r in conn.execute(sql, params).fetchall()] == want and want
        # (the server reads a long IN list too: the text it is sent is what this checks)
        assert _as_any(sql, params) == sent
    mixed = ("SELECT n FROM words WHERE n IN (?, ?)", [1, "w1"])  # two types: left as it is
    assert _as_any(*mixed) == mixed
