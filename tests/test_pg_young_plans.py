"""Look-ups by key on PostgreSQL stay index look-ups as a young log grows.

psycopg prepares a statement on its fifth run, and the server may then keep one plan for any
values. A plan kept while `events` held a few rows is a sequential scan, and it stays one until
autovacuum next analyzes the table (a minute or more on a new database): a compaction's look-up
of its events by id took 2 ms at 4,000 events, inside its hold of the log's counter, which every
host's turn waits for. The log's look-ups by seq or id and the tree's `look_up` are planned for
their values each time, so they read the index whatever the table held when they were first run.
Measured by the transaction's own scan counts (`pg_stat_xact_user_tables`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from chronicle_engine.log.postgres import PostgresEventStore, QmarkConnection
from chronicle_engine.log.store import PendingEvent
from chronicle_engine.log.tables import look_up


def _events(first: int, count: int) -> list[PendingEvent]:
    return [
        PendingEvent("chronicle.chat", "Thing", 1, {"text": f"m {i}"}, session="s", id=f"e{i}")
        for i in range(first, first + count)
    ]


@pytest.fixture
def store(postgres_cluster) -> Iterator[PostgresEventStore]:
    from postgres_support import own_schema

    with own_schema(postgres_cluster) as conninfo:
        store = PostgresEventStore(conninfo)
        try:
            yield store
        finally:
            store.close()


def _scans(store: PostgresEventStore, run: Callable[[], object]) -> tuple[int, int]:
    """(sequential scans, index scans) of `events` while `run` runs, in one transaction."""
    conn = store.connection
    sql = (
        "SELECT coalesce(sum(seq_scan), 0), coalesce(sum(idx_scan), 0)"
        " FROM pg_stat_xact_user_tables WHERE relname = 'events'"
        " AND schemaname = current_schema()"
    )
    with conn.transaction():
        before = conn.execute(sql).fetchone()
        run()
        after = conn.execute(sql).fetchone()
    assert before is not None and after is not None
    return int(after[0] - before[0]), int(after[1] - before[1])


def test_look_ups_by_key_read_the_index_after_the_log_grew(store) -> None:
    store.append(_events(1, 20))
    # (autovacuum's analyze would let the plans go: this is the window before it)
    store.connection.execute("ALTER TABLE events SET (autovacuum_enabled = off)")
    qmark = QmarkConnection(store.connection)

    def look_ups() -> None:
        assert store.seqs_of(["e3", "e7", "missing"]) == {"e3": 3, "e7": 7}
        assert store.holds([2, 5, 10**9]) == {2, 5}
        assert sorted(store.get_many([4, 6])) == [4, 6]
        rows = look_up(qmark, "SELECT seq FROM events WHERE seq IN (?, ?)", [8, 9])
        assert sorted(int(r[0]) for r in rows) == [8, 9]

    # psycopg prepares a statement on its fifth run, and the server weighs a plan for any
    # values after five more: well past both, on a log of twenty events
    for _ in range(15):
        look_ups()
    for first in range(21, 20_021, 5_000):  # grown, not analyzed (as before autovacuum's turn)
        store.append(_events(first, 5_000))
    sequential, by_index = _scans(store, look_ups)
    assert sequential == 0
    assert by_index >= 4
