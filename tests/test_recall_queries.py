"""Recall's hot queries read only what they return: every statement a search runs is checked
with EXPLAIN QUERY PLAN. No table is scanned (full-text indexes are searched through MATCH), no
subquery is run once per candidate row, and section search is bounded by its match budget like
message search, whatever the number of sections that match."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from test_recall_support import open_core, say

from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.store import run_script
from chronicle_engine.log.tables import Statements
from chronicle_engine.recall.schema import _BODY_FROM_LOG, _NEVER_UPDATE, _PERSON_ONCE
from chronicle_engine.recall.search import message_rows, rank_sections


@contextmanager
def traced(core: ChronicleCore) -> Iterator[list[str]]:
    """Our statements on this thread's connection (SQLite's own, traced as "-- ...", left out)."""
    seen: list[str] = []
    conn = core.store.connection
    conn.set_trace_callback(lambda sql: None if sql.startswith("--") else seen.append(sql))
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def plan(core: ChronicleCore, sql: str) -> str:
    rows = core.store.connection.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
    return " | ".join(str(r[-1]) for r in rows)


_TABLE_SCAN = re.compile(r"\bSCAN (?!\w+ VIRTUAL TABLE)(\w+)")


def sections_about(core: ChronicleCore, conversations: int, per: int) -> None:
    """`conversations` captured conversations, each consolidated into `per` sections that all
    mention the word "orchard", and one superseded generation in each."""
    for c in range(conversations):
        session = f"conv-{c}"
        seqs = core.capture.capture_messages(
            session,
            [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"orchard turn {c}.{i}"}
                for i in range(per)
            ],
        )
        chronicle = core.chronicle(core.sessions.chronicle_name(session))
        for seq in seqs:
            assert seq is not None
            chronicle.append(Section(Anchor(f"{seq}-{seq}", seq, seq, 1), f"Orchard notes {seq}."))
        first = seqs[0]
        assert first is not None
        chronicle.append(
            Section(
                Anchor(f"{first}-{first}#2", first, first, 1, supersedes=f"{first}-{first}"),
                f"Orchard notes {first}, again.",
            )
        )


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ChronicleCore]:
    c = open_core("file", tmp_path)
    sections_about(c, 30, 10)
    c.recall.catch_up()
    yield c
    c.shutdown()


def test_a_search_scans_no_table_and_runs_no_subquery_per_row(core: ChronicleCore) -> None:
    core.recall.search("orchard notes")  # the first search folds and fills caches
    with traced(core) as ran:
        found = core.recall.search("what were the orchard notes?")
    assert {r["kind"] for r in found} >= {"section", "message"}
    plans = {sql: plan(core, sql) for sql in ran if sql.lstrip().upper().startswith("SELECT")}
    assert any("recall_sections_fts" in sql for sql in plans)
    for sql, text in plans.items():
        assert not _TABLE_SCAN.search(text), f"{sql}\n  {text}"
        if "sections" in sql:
            assert "CORRELATED" not in text, f"{sql}\n  {text}"


def test_section_candidates_come_from_the_index_alone(core: ChronicleCore) -> None:
    with traced(core) as ran:
        core.recall.search("orchard", scope="sections")
    candidates = [
        s for s in ran if "bm25(recall_sections_fts)" in s or "recall_sections_fts MATCH" in s
    ]
    assert candidates
    for sql in candidates:
        text = plan(core, sql)
        # the full-text index only: no join to the sections rows before the LIMIT
        assert "sections" not in text.replace("recall_sections_fts", ""), text
        assert "LIMIT" in sql.upper()
    rows = [s for s in ran if re.search(r"FROM sections\b", s) and "MATCH" not in s]
    assert rows
    for sql in rows:
        text = plan(core, sql)
        assert re.search(
            r"SEARCH sections USING (INTEGER PRIMARY KEY|COVERING INDEX|INDEX)", text
        ), text


def test_section_search_reads_a_bounded_number_of_candidates(tmp_path: Path) -> None:
    """Every section matches one common word; the candidates read stay within the budget."""
    c = open_core("file", tmp_path, recall__match_budget=40)
    try:
        sections_about(c, 20, 10)  # 220 sections, every one about orchards
        c.recall.catch_up()
        with traced(c) as ran:
            found = c.recall.search("orchard", scope="sections", limit=5)
        assert len(found) == 5
        # a common word alone is answered from its newest matches; a superseded one among them
        # (each conversation's first section) is read and left out
        assert all(r["kind"] == "section" for r in found)
        assert all(c.chronicle(r["chronicle"]).successor(r["section_id"]) is None for r in found)
        assert "#2" in found[0]["section_id"]  # the newest match: the last one written
        reads = [s for s in ran if re.search(r"FROM sections WHERE written IN", s)]
        # read a chunk at a time, the limit and two more (the trace shows the values bound):
        # the superseded one among the first candidates costs no second chunk
        sizes = [len(re.search(r"IN \(([^)]*)\)", s)[1].split(",")) for s in reads]
        assert sizes == [5 + 2]
    finally:
        c.shutdown()


class _Counted:
    """A cursor of the store's own connection that counts the rows handed out."""

    def __init__(self, rows: sqlite3.Cursor, taken: list[int]) -> None:
        self.rows, self.taken = rows, taken

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> Any:
        row = next(self.rows)
        self.taken.append(row[0])
        return row

    def close(self) -> None:
        self.rows.close()


class _CountingCandidates:
    """The store's connection, its full-text walks of the sections' index counted."""

    def __init__(self, conn: sqlite3.Connection, taken: list[int]) -> None:
        self.conn, self.taken = conn, taken

    def execute(self, sql: str, params: Any = ()) -> Any:
        rows = self.conn.execute(sql, params)
        walk = "recall_sections_fts MATCH" in sql and "count(" not in sql
        return _Counted(rows, self.taken) if walk else rows


def test_a_common_words_newest_sections_are_read_only_as_far_as_taken(tmp_path: Path) -> None:
    """220 sections hold "orchard", over a budget of 100: the newest matches are walked
    only as far as one chunk of results needs, and the walk's statement is reset once done (it
    holds no read snapshot open: another connection can truncate the WAL right after)."""
    c = open_core("file", tmp_path)
    try:
        sections_about(c, 20, 10)
        c.recall.catch_up()
        c.capture.capture_messages("later", [{"role": "user", "content": "a later word"}])
        c.recall.catch_up()  # the WAL holds frames a reader's snapshot includes
        index = c.recall.index
        taken: list[int] = []
        with index.reading("test") as conn:
            scope = index.scope(conn, "conv-0", None, None)
            assert scope is not None
            counting = _CountingCandidates(conn, taken)
            hits = rank_sections(
                cast(Statements, counting),
                scope,
                ["orchard"],
                limit=5,
                plan=index._messages.plan,
                budget=100,
            )
            assert len(hits) == 5
            assert len(taken) == 5 + 2  # one chunk of candidates, of 220 matches
            assert taken == sorted(taken, reverse=True)  # the newest first
            other = sqlite3.connect(tmp_path / "chronicle.db", timeout=0.1)
            try:
                busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                other.close()
            assert busy == 0
    finally:
        c.shutdown()


def test_a_conversations_sections_are_found_behind_many_better_ones(tmp_path: Path) -> None:
    c = open_core("file", tmp_path, recall__match_budget=40)
    try:
        sections_about(c, 20, 10)
        c.recall.catch_up()
        found = c.recall.search("orchard notes", session_id="conv-3", scope="session", limit=20)
        sections = [r for r in found if r["kind"] == "section"]
        name = c.sessions.chronicle_name("conv-3")
        assert sections and all(r["chronicle"] == name for r in sections)
    finally:
        c.shutdown()


def test_a_persons_words_are_kept_once_and_read_back(tmp_path: Path) -> None:
    c = open_core("file", tmp_path)
    try:
        plain = say(c, "s", "My caravan tyres are from Michelin, bought in Leeds.")
        framed = say(c, "s", "[System note: be brief] Which tyres did I buy in Leeds?")
        c.recall.catch_up()
        with c.store.reading() as conn:
            stored = dict(conn.execute("SELECT seq, person FROM recall_messages").fetchall())
            rows = message_rows(conn, [plain, framed])
        assert stored[plain] == ""  # the same words as the body: not stored twice
        assert rows[plain].person == "My caravan tyres are from Michelin, bought in Leeds."
        assert stored[framed] == rows[framed].person == "Which tyres did I buy in Leeds?"
        assert "Michelin" in c.recall.prefetch("where are my caravan tyres from?", session_id="t")
    finally:
        c.shutdown()


def test_the_migration_drops_the_copy_an_older_fold_kept(tmp_path: Path) -> None:
    c = open_core("file", tmp_path)
    try:
        seq = say(c, "s", "My caravan tyres are from Michelin, bought in Leeds.")
        c.recall.catch_up()
        text = "My caravan tyres are from Michelin, bought in Leeds."
        with c.store.atomic() as conn:  # the row as a fold before recall.m007 wrote it
            conn.execute("DROP TRIGGER recall_messages_never_update")
            conn.execute("UPDATE recall_messages SET person = body WHERE seq = ?", (seq,))
            run_script(conn, _PERSON_ONCE)
            (person,) = conn.execute(
                "SELECT person FROM recall_messages WHERE seq = ?", (seq,)
            ).fetchone()
            assert person == ""
            assert message_rows(conn, [seq])[seq].person == text
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute("UPDATE recall_messages SET person = 'x' WHERE seq = ?", (seq,))
    finally:
        c.shutdown()


def test_a_messages_text_is_held_once_by_the_log(tmp_path: Path) -> None:
    """Recall's row leaves a message's text to the log when the log holds the same text; the
    index, a search's text and the person's words read it back byte for byte."""
    c = open_core("file", tmp_path)
    try:
        text = "Our caravan club meets at Malham Tarn on the first Sunday — bring flasks."
        plain = say(c, "s", text)
        parts = c.capture.capture_messages(
            "p",
            [{"role": "user", "content": [{"type": "text", "text": "Ferry to Skye"}, "at dawn"]}],
        )[0]
        answer = say(c, "s", "Noted: Malham Tarn, first Sunday.", role="assistant")
        c.recall.catch_up()
        with c.store.reading() as conn:
            stored = dict(conn.execute("SELECT seq, body || at FROM recall_messages").fetchall())
            logged = dict(conn.execute("SELECT seq, created_at FROM events").fetchall())
            view = {
                seq: (body, ctx)
                for seq, body, ctx in conn.execute("SELECT seq, body, ctx FROM recall_message_text")
            }
            rows = message_rows(conn, [plain, answer])
        assert stored[plain] == stored[answer] == stored[parts] == ""
        assert view[plain] == (text, "") and view[answer] == (
            "Noted: Malham Tarn, first Sunday.",
            text,
        )
        assert view[parts][0].split() == ["Ferry", "to", "Skye", "at", "dawn"]
        assert rows[plain].body == rows[plain].person == text
        assert rows[answer].person == ""
        assert rows[plain].at == logged[plain] and rows[answer].at == logged[answer]
        found = c.recall.search("Malham Tarn flasks", scope="messages")
        assert found[0]["id"] == f"m{plain}" and found[0]["text"] == text
        assert found[0]["time"] == logged[plain]
        assert c.recall.search("ferry dawn", scope="messages")[0]["id"] == f"m{parts}"
    finally:
        c.shutdown()


def test_the_migration_leaves_to_the_log_only_the_text_it_holds(tmp_path: Path) -> None:
    c = open_core("file", tmp_path)
    try:
        same = say(c, "s", "The boiler service is booked for the ninth of March.")
        other = say(c, "s", "Bring the spare key for the garage.")
        c.recall.catch_up()
        with c.store.atomic() as conn:  # rows as a fold before recall.m009 wrote them
            conn.execute("DROP TRIGGER recall_messages_never_update")
            conn.execute(
                "UPDATE recall_messages SET body = ? WHERE seq = ?",
                ("The boiler service is booked for the ninth of March.", same),
            )
            conn.execute(
                "UPDATE recall_messages SET body = 'words the log does not hold' WHERE seq = ?",
                (other,),
            )
            conn.execute(
                "UPDATE recall_messages SET at = (SELECT created_at FROM events e"
                " WHERE e.seq = recall_messages.seq)"
            )
            logged = dict(conn.execute("SELECT seq, created_at FROM events").fetchall())
            run_script(conn, _BODY_FROM_LOG + _NEVER_UPDATE)
            stored = {
                r[0]: r[1:] for r in conn.execute("SELECT seq, body, at FROM recall_messages")
            }
            assert stored == {same: ("", ""), other: ("words the log does not hold", "")}
            rows = message_rows(conn, [same, other])
            assert rows[same].body == "The boiler service is booked for the ninth of March."
            assert rows[other].body == "words the log does not hold"
            assert rows[same].at == logged[same] and rows[other].at == logged[other]
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute("UPDATE recall_messages SET body = 'x' WHERE seq = ?", (same,))
    finally:
        c.shutdown()


def test_a_hits_turn_before_comes_from_its_row(core: ChronicleCore) -> None:
    """Ranking reads the strongest hits' rows first and takes the turn before each from its
    row: no second lookup by seq, no narrow index beside the rows, each row read once."""
    core.recall.search("orchard turn")
    with traced(core) as ran:
        found = core.recall.search("orchard turn 7.4", scope="messages")
    assert found and found[0]["text"] == "orchard turn 7.4"
    assert not [s for s in ran if re.search(r"SELECT seq, prev FROM recall_messages WHERE seq", s)]
    assert not [s for s in ran if "recall_messages_links" in s]
    read: list[str] = []
    for sql in ran:
        if re.search(r"SELECT m\.seq, m\.session, .* WHERE m\.seq IN", sql):  # message_rows
            read += re.search(r"IN \(([^)]*)\)", sql)[1].split(",")
    assert read and len(read) == len(set(read))
    with core.store.reading() as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "recall_messages_links" not in names
    assert "recall_messages_by_prev" in names  # the turn after: found through its own index


def test_the_turns_after_the_hits_are_found_through_their_own_index(tmp_path: Path) -> None:
    """The turns after the strongest hits, and the answers to a question among them, are
    looked up by `prev` within the search's scope: through the index on `prev`, not the
    scope's index (which would read every message of the scope)."""
    c = open_core("file", tmp_path)
    try:
        say(c, "s", "We had a picnic with the church group last weekend.")
        say(c, "s", "Lovely! What did you play?", role="assistant")
        answer = say(c, "s", "Charades and a scavenger hunt.")
        for i in range(20):
            say(c, "s", f"Unrelated remark number {i} about the weather.")
        c.recall.catch_up()
        with traced(c) as ran:
            found = c.recall.search("church picnic", scope="messages")
        assert f"m{answer}" in [r["id"] for r in found]
        lookups = [sql for sql in ran if "prev IN" in sql]
        assert len(lookups) == 2, lookups  # the turns after the hits; the answers
        for sql in lookups:
            text = plan(c, sql)
            assert "USING INDEX recall_messages_by_prev (prev=?)" in text, f"{sql}\n  {text}"
    finally:
        c.shutdown()


def test_the_turns_around_a_hit_lift_it_as_before(tmp_path: Path) -> None:
    """A hit's neighbours get their share whether its row was read first or not: the answer
    after a question is found by the question's words."""
    c = open_core("file", tmp_path)
    try:
        question = say(c, "s", "Which harbour did the ferry to Skye leave from?")
        answer = say(c, "s", "Mallaig, early in the morning.", role="assistant")
        for i in range(20):
            say(c, "s", f"Unrelated remark number {i} about the weather.")
        c.recall.catch_up()
        found = c.recall.search("ferry to Skye harbour", scope="messages")
        ids = [r["id"] for r in found]
        assert ids[:2] == [f"m{question}", f"m{answer}"]
    finally:
        c.shutdown()


def test_a_month_of_any_year_reads_only_its_own_messages(tmp_path: Path) -> None:
    """A query naming a month of any year ("in February") holds several stretches of time, one
    a year. The candidates' times are read by their seqs, never through the (scope, ts) index
    for the scope alone: without statistics, SQLite's planner chose that walk of every message
    of the scope for the stretches' OR (180 ms a search at 1M messages)."""
    c = open_core("file", tmp_path)
    try:
        picnics = [
            say(c, "y1", "We had a picnic by the lake.", created_at="2024-02-10T12:00:00+00:00"),
            say(c, "y2", "Another picnic, in the snow.", created_at="2025-02-12T12:00:00+00:00"),
        ]
        for i in range(12):
            say(c, "rest", f"A picnic story number {i}.", created_at="2025-06-01T12:00:00+00:00")
        c.recall.catch_up()
        c.recall.search("picnic in February", scope="messages")
        with traced(c) as ran:
            found = c.recall.search("Where did we have a picnic in February?", scope="messages")
        assert [r["id"] for r in found[:2]] == [f"m{seq}" for seq in reversed(picnics)], found
        plans = {sql: plan(c, sql) for sql in ran if sql.lstrip().upper().startswith("SELECT")}
        assert any("m.ts >= " in sql for sql in plans)  # the time was searched as a word
        for sql, text in plans.items():
            assert "recall_messages_by_time (scope=?)" not in text, f"{sql}\n  {text}"
    finally:
        c.shutdown()


def test_only_the_candidates_within_the_time_gain_its_word(tmp_path: Path) -> None:
    """The time a query names scores as one more word that only its messages hold: with the
    time's boost off, the one turn told in February outranks the same words told in June."""
    c = open_core("file", tmp_path, recall__time_boost=1.0)
    try:
        february = say(c, "a", "A picnic by the lake.", created_at="2024-02-10T12:00:00+00:00")
        june = say(c, "b", "A picnic by the lake.", created_at="2025-06-12T12:00:00+00:00")
        c.recall.catch_up()
        found = [r["id"] for r in c.recall.search("picnic lake", scope="messages")]
        assert found[:2] == [f"m{june}", f"m{february}"]  # without a time: the later first
        found = [r["id"] for r in c.recall.search("picnic lake in February", scope="messages")]
        assert found[:2] == [f"m{february}", f"m{june}"], found
    finally:
        c.shutdown()
