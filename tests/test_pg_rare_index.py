"""The rare namespaces' partial index on PostgreSQL (`log.m004_rare_by_session`), SQLite's
`events_rare_by_session` twin: a conversation's context events are found among its messages by
the index alone, and the log's reads that SQLite serves by it are planned on it here too
(EXPLAIN of the statements the store sends, on a log of 40,000 events with its statistics: 400
conversations, each a tenth context events, where walking every context event of the log (the
(namespace, type) index) or every event of the session (its (session, seq) index) reads ten to
four hundred times what the read returns)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.log.store import PendingEvent

CONVERSATIONS = 400
LENGTH = 100  # events a conversation; every tenth a context event
EVERY = 10


def _conversations(store: PostgresEventStore) -> None:
    rows = [
        PendingEvent(
            "chronicle.context" if i % EVERY == 0 else "chronicle.chat",
            "Thing",
            1,
            {"text": f"message {i}"},
            session=f"c{(i - 1) // LENGTH}",
            id=f"c{i}",
        )
        for i in range(1, CONVERSATIONS * LENGTH + 1)
    ]
    for start in range(0, len(rows), 5000):
        store.append(rows[start : start + 5000])
    store.connection.execute("VACUUM ANALYZE events")


class _Recording:
    """A connection that keeps each statement it is given (and runs it)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.seen: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = None, **kwargs: Any) -> Any:
        self.seen.append((sql, params))
        return self.conn.execute(sql, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def _plans(store: PostgresEventStore, run: Callable[[], object], monkeypatch) -> list[str]:
    """The server's plan of each statement `run` sends, for the values it sends."""
    conn = store.connection
    recording = _Recording(conn)
    with monkeypatch.context() as patched:
        patched.setattr(PostgresEventStore, "connection", property(lambda _: recording))
        run()
    return [
        "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + sql, params, prepare=False))
        for sql, params in recording.seen
    ]


@pytest.fixture
def store(postgres_cluster) -> Iterator[PostgresEventStore]:
    from postgres_support import own_schema

    with own_schema(postgres_cluster) as conninfo:
        store = PostgresEventStore(conninfo)
        try:
            _conversations(store)
            yield store
        finally:
            store.close()


def test_a_conversations_rare_events_are_found_by_the_partial_index(store, monkeypatch) -> None:
    def read() -> list[int]:
        return [e.seq for e in store.read(sessions=["c3"], namespaces=["chronicle.context"])]

    assert read() == list(range(310, 401, 10))
    (plan,) = _plans(store, read, monkeypatch)
    assert "events_rare_by_session" in plan, plan

    def lineage() -> list[int]:
        return [
            e.seq
            for e in store.read(after=360, sessions=["c5", "c3"], namespaces=["chronicle.context"])
        ]

    assert lineage() == [370, 380, 390, 400, *range(510, 601, 10)]
    (plan,) = _plans(store, lineage, monkeypatch)
    assert "events_rare_by_session" in plan, plan

    latest = store.latest("chronicle.context", "Thing", sessions=["c3", "c5"])
    assert latest is not None and latest.envelope.seq == 600
    (plan,) = _plans(
        store,
        lambda: store.latest("chronicle.context", "Thing", sessions=["c3", "c5"]),
        monkeypatch,
    )
    assert "events_rare_by_session" in plan, plan


def test_the_index_holds_only_the_rare_events(store, monkeypatch) -> None:
    with store.reading() as conn:
        (definition,) = conn.execute(
            "SELECT indexdef FROM pg_indexes"
            " WHERE schemaname = current_schema() AND indexname = 'events_rare_by_session'"
        ).fetchone() or (None,)
        (rare, whole) = conn.execute(
            "SELECT pg_relation_size('events_rare_by_session'), pg_relation_size('events_by_session')"
        ).fetchone() or (None, None)
    assert definition is not None and "WHERE" in definition and "chronicle.context" in definition
    assert rare * 3 < whole  # a tenth of the rows, each a column wider
    # a read of the messages themselves is not served by it
    (plan,) = _plans(
        store, lambda: list(store.read(sessions=["c3"], namespaces=["chronicle.chat"])), monkeypatch
    )
    assert "events_rare_by_session" not in plan, plan
