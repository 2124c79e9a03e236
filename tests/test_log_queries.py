"""The log owns the events table: its named questions answer right, read only what they need
(each plan checked with EXPLAIN QUERY PLAN), and no module outside chronicle_engine/log/ runs SQL on it."""

from __future__ import annotations

import ast
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.events import EventReader, EventTypeRegistry, UpcastRegistry
from chronicle_engine.log.store import (
    _RARE,
    LOG_RETIRED_MIGRATIONS,
    RARE_NAMESPACES,
    PendingEvent,
    SQLiteEventStore,
    stored_text_sql,
    stored_texts,
)
from chronicle_engine.sessions.events import SessionSwitched, register_session_events

ROOT = Path(__file__).resolve().parents[1]
LOG_ROOM = ROOT / "chronicle_engine" / "log"

# SQL that names the events table itself: `events` as a whole word after a clause keyword.
# `events_fts`, `events_by_type` and other names that only start with "events" are other tables
# or indexes (`\b` does not end a word at `_`), and lower-case prose ("reads events from") is not
# SQL: the project writes its SQL keywords in capitals.
_EVENTS_SQL = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE(?:\s+IF\s+NOT\s+EXISTS)?|ON)\s+[\"`\[]?events\b(?![\"`\]]?_)"
)


def _sql_texts(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string literal of a module, f-strings with their holes left as `?`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            parts = [
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "?"
                for v in node.values
            ]
            yield node.lineno, "".join(parts)


def _product_sources() -> list[Path]:
    files = sorted((ROOT / "chronicle_engine").rglob("*.py"))
    files += [ROOT / name for name in ("provider.py", "context.py", "__init__.py")]
    files += sorted((ROOT / "dashboard").rglob("*.py")) if (ROOT / "dashboard").exists() else []
    return [f for f in files if f.exists()]


def test_the_pattern_tells_the_events_table_from_its_neighbours() -> None:
    hits = [
        "SELECT seq FROM events WHERE id = ?",
        'SELECT 1 FROM "events" LIMIT 1',
        "INSERT INTO events(id) VALUES (?)",
        "UPDATE events SET payload = '{}'",
        "CREATE TABLE IF NOT EXISTS events (",
        "CREATE TRIGGER t AFTER INSERT ON events BEGIN SELECT 1; END",
        "SELECT m.seq FROM recall_messages m JOIN events e ON e.seq = m.seq",
    ]
    misses = [
        "SELECT rowid FROM events_fts WHERE events_fts MATCH ?",
        "CREATE INDEX IF NOT EXISTS events_by_type ON events_archive(namespace)",
        "reads the events from the log",
        "SELECT 1 FROM recall_messages WHERE events > 0",
    ]
    assert all(_EVENTS_SQL.search(text) for text in hits)
    assert not any(_EVENTS_SQL.search(text) for text in misses)


def test_no_module_outside_the_log_runs_sql_on_the_events_table() -> None:
    offenders: list[str] = []
    sources = _product_sources()
    assert len(sources) > 50  # the scan really reads the product's modules
    for path in sources:
        if LOG_ROOM in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for lineno, text in _sql_texts(tree):
            if _EVENTS_SQL.search(text):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {text.strip()[:80]}")
    assert not offenders, (
        "SQL on the events table outside chronicle_engine/log/ (ask the log a named question instead):\n"
        + "\n".join(offenders)
    )


# -- the named questions, on a log shaped like a lived-in one -------------------------------


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLiteEventStore]:
    s = SQLiteEventStore(":memory:" if request.param == "memory" else tmp_path / "log.db")
    rows: list[PendingEvent] = []
    for i in range(1, 3001):
        namespace = ("chronicle.chat", "chronicle.turn", "chronicle.session")[i % 3]
        text = f"message {i}" + (" «masked:api_key»" if i % 500 == 0 else "")
        rows.append(
            PendingEvent(namespace, "Thing", 1, {"text": text}, session=f"s{i % 7}", id=f"id{i}")
        )
    s.append(rows)
    with s.atomic() as conn:
        conn.execute("ANALYZE")  # plans must hold with statistics too, as a maintained store has
    yield s
    s.close()


def _plans(store: SQLiteEventStore, call: Callable[[], Any]) -> list[str]:
    """The query plan (detail lines joined) of each statement on `events` that `call` runs."""
    statements: list[str] = []
    conn = store.connection
    conn.set_trace_callback(statements.append)
    try:
        call()
    finally:
        conn.set_trace_callback(None)
    plans = []
    for sql in statements:
        if not _EVENTS_SQL.search(sql):
            continue
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        plans.append(" | ".join(str(r[-1]) for r in rows))
    assert plans, "the call ran no statement on events"
    return plans


_BY_ROWID = re.compile(r"SEARCH events USING INTEGER PRIMARY KEY \(rowid[<>=]")


def test_seqs_containing_reads_only_the_seq_range(store: SQLiteEventStore) -> None:
    assert store.seqs_containing(1, 3000, "chronicle.chat", "«masked:") == [1500, 3000]
    assert store.seqs_containing(1, 1499, "chronicle.chat", "«masked:") == []
    assert store.seqs_containing(1, 3000, "chronicle.turn", "«masked:") == [1000, 2500]
    (plan,) = _plans(store, lambda: store.seqs_containing(2000, 2100, "chronicle.chat", "«x"))
    # by rowid over [lo, hi], never the (namespace, type) index over every chat event stored
    assert _BY_ROWID.search(plan) and "events_by_type" not in plan, plan


def test_stored_texts_read_each_row_by_seq(store: SQLiteEventStore) -> None:
    (late,) = store.append(
        [PendingEvent("chronicle.chat", "Thing", 1, {"message": {"content": "hi"}})]
    )
    got = stored_texts(
        store.connection, [5, 1500, late.seq, 99_999], "text", ("message", "content")
    )
    times = {e.seq: e.envelope.created_at for e in store.get_many([5, 1500, late.seq]).values()}
    assert got == {
        5: ("message 5", times[5]),
        1500: ("message 1500 «masked:api_key»", times[1500]),
        late.seq: ("hi", times[late.seq]),  # no `text`: the fallback path's
    }
    (plan,) = _plans(store, lambda: stored_texts(store.connection, [7, 8], "text", ("x",)))
    assert _BY_ROWID.search(plan) and "SCAN" not in plan, plan
    with store.reading() as conn:
        sql = f"SELECT {stored_text_sql('?', 'text', ('message', 'content'))}"
        assert conn.execute(sql, (late.seq,)).fetchone() == ("hi",)
        assert conn.execute(sql, (5,)).fetchone() == ("message 5",)


def test_any_after_walks_the_tail_or_the_sessions_index(store: SQLiteEventStore) -> None:
    assert store.any_after(2999, namespaces=["chronicle.chat"])  # 3000 % 3 == 0
    assert not store.any_after(3000, namespaces=["chronicle.chat"])
    assert not store.any_after(2999, namespaces=["chronicle.turn"])
    assert store.any_after(2990, session="s0") and not store.any_after(2996, session="s0")
    (plan,) = _plans(store, lambda: store.any_after(2990, namespaces=["chronicle.chat"]))
    assert _BY_ROWID.search(plan), plan
    # From the start (is there any such event at all?) the namespace's index answers.
    (plan,) = _plans(store, lambda: store.any_after(0, namespaces=["chronicle.absent"]))
    assert "USING COVERING INDEX events_by_type (namespace=?)" in plan, plan
    assert not store.any_after(0, namespaces=["chronicle.absent"])
    (plan,) = _plans(store, lambda: store.any_after(2990, session="s1"))
    assert "USING COVERING INDEX events_by_session (session=? AND seq>?)" in plan, plan


def test_lookups_by_id_and_seq_use_their_keys(store: SQLiteEventStore) -> None:
    assert store.seqs_of(["id7", "id2999", "nope"]) == {"id7": 7, "id2999": 2999}
    assert store.holds([1, 3000, 3001, 3000]) == {1, 3000}
    assert sorted(store.get_many([5, 6, 9999])) == [5, 6]
    (plan,) = _plans(store, lambda: store.seqs_of(["id7", "id8"]))
    assert "USING COVERING INDEX sqlite_autoindex_events_1 (id=?)" in plan, plan
    for call in (lambda: store.holds([5, 6]), lambda: store.get_many([5, 6])):
        (plan,) = _plans(store, call)
        assert "USING INTEGER PRIMARY KEY (rowid=?)" in plan, plan


def test_latest_of_a_type_seeks_its_index_from_the_end(store: SQLiteEventStore) -> None:
    found = store.latest("chronicle.session", "Thing", sessions=["s3", "s4"])
    assert found is not None and found.seq == 2999 and found.envelope.session == "s3"
    assert store.latest("chronicle.session", "Other", sessions=["s3"]) is None
    assert store.latest("chronicle.session", "Thing", sessions=[]) is None
    (plan,) = _plans(store, lambda: store.latest("chronicle.session", "Thing", sessions=["s3"]))
    assert "USING INDEX events_" in plan and "SCAN events" not in plan, plan


def test_a_fold_catching_up_walks_the_seq_range(store: SQLiteEventStore) -> None:
    read = lambda: list(  # noqa: E731
        store.read(after=100, upto=2000, namespaces=["chronicle.chat"], by_seq=True)
    )
    assert len(read()) == 633  # the multiples of 3 in 101..2000
    (plan,) = _plans(store, read)
    assert _BY_ROWID.search(plan) and "events_by_type" not in plan, plan


def _conversations(store: SQLiteEventStore) -> None:
    """Forty conversations of 100 chat rows, each with two context events (as compaction's
    passes leave them), and ANALYZE's statistics, as a maintained store has."""
    rows = [
        PendingEvent(
            "chronicle.context" if i % 50 == 0 else "chronicle.chat",
            "Thing",
            1,
            {"text": f"message {i}"},
            session=f"c{(i - 1) // 100}",
            id=f"c{i}",
        )
        for i in range(1, 4001)
    ]
    store.append(rows)
    with store.atomic() as conn:
        conn.execute("ANALYZE")


def test_a_conversations_rare_events_are_found_by_the_index_alone(tmp_path: Path) -> None:
    """Compaction reads a lineage's context events among its chat rows (`_refresh_events`):
    the (session, namespace) index finds them without visiting the chat rows."""
    store = SQLiteEventStore(tmp_path / "log.db")
    try:
        _conversations(store)
        read = lambda: [  # noqa: E731
            e.seq
            for e in store.read(
                after=0, upto=4000, sessions=["c3"], namespaces=["chronicle.context"]
            )
        ]
        assert read() == [350, 400]
        (plan,) = _plans(store, read)
        assert "USING INDEX events_rare_by_session (session=? AND namespace=?" in plan, plan
        lineage = lambda: [  # noqa: E731
            e.seq
            for e in store.read(after=360, sessions=["c5", "c3"], namespaces=["chronicle.context"])
        ]
        assert lineage() == [400, 550, 600]
        (plan,) = _plans(store, lineage)
        assert "USING INDEX events_rare_by_session (session=? AND namespace=?" in plan, plan
        # A session's whole history, every namespace, still walks the session's own index.
        (plan,) = _plans(store, lambda: list(store.read(after=310, sessions=["c3"])))
        assert "events_by_session (session=? AND seq>?)" in plan, plan
    finally:
        store.close()


def _an_older_log(path: Path) -> None:
    """A store as a build before the (session, namespace) index left it."""
    old = SQLiteEventStore(path)
    try:
        with old.atomic() as conn:
            conn.execute("DROP INDEX events_rare_by_session")
        _conversations(old)
    finally:
        old.close()


def _read_context(store: SQLiteEventStore) -> list[int]:
    return [e.seq for e in store.read(sessions=["c3"], namespaces=["chronicle.context"])]


def test_an_older_log_gains_the_session_namespace_index_when_it_opens(tmp_path: Path) -> None:
    """An older store gets the index as it opens writable: same events, its reads planned on
    it, and nothing recorded, so an older build still opens the store."""
    path = tmp_path / "old.db"
    _an_older_log(path)
    store = SQLiteEventStore(path)
    try:
        assert store.migrated() == {"log.m001_events"}
        with store.reading() as conn:
            (sql,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'events_rare_by_session'"
            ).fetchone()
        assert "(session, namespace, seq)" in sql and "'chronicle.context'" in sql
        assert store.count() == 4000
        assert _read_context(store) == [350, 400]
        (plan,) = _plans(store, lambda: _read_context(store))
        assert "events_rare_by_session" in plan, plan
    finally:
        store.close()


def test_an_older_log_opened_read_only_answers_without_the_index(tmp_path: Path) -> None:
    """Review 05:31 (session 10): a read-only open of a store an older build wrote must answer,
    as it did before the index existed; the index waits for a writable open."""
    path = tmp_path / "old.db"
    _an_older_log(path)
    store = SQLiteEventStore(f"file:{path}?mode=ro")
    try:
        assert store.count() == 4000 and _read_context(store) == [350, 400]
        with store.reading() as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "events_rare_by_session" not in names
    finally:
        store.close()
    core = ChronicleCore(f"file:{path}?mode=ro")  # the whole engine opens it too
    try:
        assert core.store.count() == 4000
    finally:
        core.shutdown()


def test_a_store_that_recorded_the_index_as_a_migration_still_opens(tmp_path: Path) -> None:
    """331733b recorded the index as `log.m002_events_by_session_namespace`; such a store is
    not refused as one a newer build migrated."""
    path = tmp_path / "m002.db"
    with SQLiteEventStore(path) as store, store.atomic() as conn:
        conn.execute(
            "INSERT INTO migrations(name, applied_at) VALUES (?, '2026-12-02T05:44:00Z')",
            (LOG_RETIRED_MIGRATIONS[0],),
        )
    core = ChronicleCore(path)
    try:
        assert LOG_RETIRED_MIGRATIONS[0] in core.store.migrated()
    finally:
        core.shutdown()


def test_the_full_session_namespace_index_gives_way_to_the_partial_one(tmp_path: Path) -> None:
    """37d6c0f and 82c8ad1 built a full (session, namespace, seq) index; a writable open drops
    it for the partial one, which holds no message (the bulk of every append) and still finds a
    conversation's rare events; every namespace it names is its room's own."""
    from chronicle_engine.capture.events import HOST_NAMESPACE
    from chronicle_engine.compaction.events import NAMESPACE as CONTEXT
    from chronicle_engine.sessions.events import NAMESPACE as SESSION

    assert set(RARE_NAMESPACES) == {CONTEXT, HOST_NAMESPACE, SESSION}
    path = tmp_path / "full.db"
    _an_older_log(path)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE INDEX events_by_session_namespace ON events(session, namespace, seq)")
    store = SQLiteEventStore(path)
    try:
        with store.reading() as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            (held,) = conn.execute(
                f"SELECT count(*) FROM events INDEXED BY events_rare_by_session WHERE {_RARE}"
            ).fetchone()
        assert "events_by_session_namespace" not in names and "events_rare_by_session" in names
        assert held == 80  # the forty conversations' context events, none of their messages
        assert _read_context(store) == [350, 400]
        (plan,) = _plans(store, lambda: _read_context(store))
        assert "events_rare_by_session" in plan, plan
        # A read of the messages themselves is answered as before (not by the partial index).
        chat = list(store.read(sessions=["c3"], namespaces=["chronicle.chat"]))
        assert len(chat) == 98
    finally:
        store.close()


def test_an_index_written_otherwise_before_is_built_again(tmp_path: Path) -> None:
    """A store holding an earlier definition under the index's name (6a1f409 wrote its term as
    `namespace IN (...)`, which costs every append a lookup table) gets the current one."""
    path = tmp_path / "earlier.db"
    _an_older_log(path)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE INDEX events_rare_by_session ON events(session, namespace, seq)"
            " WHERE namespace IN ('chronicle.context', 'chronicle.host', 'chronicle.session')"
        )
    store = SQLiteEventStore(path)
    try:
        with store.reading() as conn:
            (sql,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'events_rare_by_session'"
            ).fetchone()
        assert sql.endswith(f"WHERE {_RARE}") and " IN (" not in sql, sql
        (plan,) = _plans(store, lambda: _read_context(store))
        assert "events_rare_by_session" in plan and _read_context(store) == [350, 400], plan
    finally:
        store.close()


def test_inventory_counts(store: SQLiteEventStore) -> None:
    counts = store.type_counts()
    assert [(ns, n) for ns, _, n, _, _ in counts] == [
        ("chronicle.chat", 1000),
        ("chronicle.session", 1000),
        ("chronicle.turn", 1000),
    ]
    sessions = store.session_counts(limit=2)
    assert [row[:2] for row in sessions] == [("s4", 429), ("s3", 429)]


def test_reader_answers_upcast_and_typed(tmp_path: Path) -> None:
    types, upcasts = EventTypeRegistry(), UpcastRegistry()
    register_session_events(types)
    types.register("chronicle.session", "SessionSwitched", SessionSwitched, version=2)
    upcasts.register(
        "chronicle.session",
        "SessionSwitched",
        1,
        lambda p: {"parent_session": p.pop("parent"), "reason": p["reason"]},
    )
    with SQLiteEventStore(tmp_path / "log.db") as store:
        store.append(
            [
                PendingEvent(
                    "chronicle.session",
                    "SessionSwitched",
                    1,
                    {"parent": "a", "reason": "compression"},
                    session="b",
                )
            ]
        )
        reader = EventReader(store, upcasts, types)
        latest = reader.latest(SessionSwitched, sessions=["b"])
        assert latest is not None and latest.seq == 1
        assert latest.event == SessionSwitched(parent_session="a", reason="compression")
        assert reader.get_many([1])[1].payload == {
            "parent_session": "a",
            "reason": "compression",
        }
        assert reader.latest(SessionSwitched, sessions=["a"]) is None


def test_one_adapter_per_namespace_decodes_every_type_of_it(tmp_path: Path) -> None:
    from chronicle_engine.errors import UnknownEventType
    from chronicle_engine.sessions.events import CompactionRecorded, LeafMoved

    types = EventTypeRegistry()
    register_session_events(types)
    adapter = types.adapter("chronicle.session")
    assert types.adapter("chronicle.session") is adapter  # built once
    out = adapter.validate_python({"type": "LeafMoved", "event": {"target": "e1"}})
    assert out["event"] == LeafMoved(target="e1")
    with pytest.raises(ValueError):  # a payload of another type of the namespace
        adapter.validate_python({"type": "LeafMoved", "event": {"section_ids": []}})
    with pytest.raises(UnknownEventType):
        types.adapter("nobody.registered")

    class Later(LeafMoved, frozen=True):
        pass

    types.register("chronicle.session", "Later", Later)
    assert types.adapter("chronicle.session") is not adapter  # rebuilt with the new member
    with SQLiteEventStore(tmp_path / "log.db") as store:
        (stored,) = store.append(
            [types.pending(CompactionRecorded(section_ids=["1-3"]), session="s")]
        )
        reader = EventReader(store, UpcastRegistry(), types)
        assert reader.decode(stored) == CompactionRecorded(section_ids=["1-3"])
        decoded = list(reader.typed(namespaces=["chronicle.session"]))
        assert [(d.seq, type(d.event)) for d in decoded] == [(1, CompactionRecorded)]


def test_the_logs_own_reads_use_their_indexes(store: SQLiteEventStore) -> None:
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: store.get(42), "INTEGER PRIMARY KEY (rowid=?)"),
        (lambda: store.get_by_id("id42"), "sqlite_autoindex_events_1 (id=?)"),
        (lambda: store.last_seq(), "SEARCH events"),  # the max rowid, not a scan
    ]
    for call, expected in cases:
        plans = _plans(store, call)
        assert all(expected in plan and "SCAN events" not in plan for plan in plans), plans


def test_decoding_ignores_fields_a_newer_build_added_but_not_wrong_ones(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from chronicle_engine.sessions.events import LeafMoved

    types = EventTypeRegistry()
    register_session_events(types)
    with SQLiteEventStore(tmp_path / "log.db") as store:
        newer, wrong = store.append(
            [
                PendingEvent("chronicle.session", "LeafMoved", 1, {"target": "e1", "why": "x"}),
                PendingEvent("chronicle.session", "LeafMoved", 1, {"target": 5, "why": "x"}),
            ]
        )
        reader = EventReader(store, UpcastRegistry(), types)
        assert reader.decode(newer) == LeafMoved(target="e1")
        with pytest.raises(ValidationError):
            reader.decode(wrong)
