"""Recall's index on each store: the same captured chat, the same hits, the same isolation.

`RecallIndex` (SQLite FTS5) and `PostgresRecallIndex` (tsvector + GIN, bm25 computed from the
index's positions) are built over a store of each kind as the core builds recall: the session
tree and capture over the same store (tests/postgres_support.py `Target.tree`). The PostgreSQL
server is the session's throwaway cluster (conftest.py `postgres_cluster`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from postgres_support import Target, own_schema

from chronicle_engine.config import Config
from chronicle_engine.errors import UsageError
from chronicle_engine.recall.events import MemoryForgotten, MemoryRemembered
from chronicle_engine.recall.index import RecallIndex
from chronicle_engine.recall.postgres import PostgresRecallIndex, terms, tsquery_any
from chronicle_engine.recall.recall import Recall as RecallTools

CHATS = {
    ("ann", "trip"): [
        ("Ann", "We should plan the trip to Lisbon in May."),
        ("Bo", "Which hotel did you book for Lisbon?"),
        ("Ann", "The Alfama guesthouse, room 12, near the tram stop."),
        ("Bo", "Great, and the flights?"),
        ("Ann", "TAP flight TP1353 leaves at 07:40 from gate B-22."),
    ],
    ("ann", "garden"): [
        ("Ann", "My tomatoes caught blight again this summer."),
        ("Bo", "Try copper spray and water the roots, not the leaves."),
        ("Ann", "I bought a copper spray yesterday; the vault-3 shed holds it."),
    ],
    ("bob", "secret"): [
        ("Bob", "My locker code at the gym is 4471, keep it private."),
        ("Bob", "Also the Lisbon hotel for my own trip is the Bairro Alto inn."),
    ],
}

QUERIES = [
    "Which hotel in Lisbon?",
    "what flight leaves from gate B-22",
    "copper spray for blight",
    "vault-3",
    "tomatoes",
    "the",  # stopwords only: newest matches
    "where is the shed that holds the spray",
]


@dataclass
class Recall:
    kind: str
    index: RecallIndex
    parts: object

    def search(self, query: str, user: str, **options: object) -> list[tuple[str, float]]:
        hits = self.index.hits(query, user_id=user, use_vectors=False, **options)  # type: ignore[arg-type]
        return [(hit.id, hit.score) for hit in hits]

    def append(self, event: object) -> None:
        store = self.parts.store  # type: ignore[attr-defined]
        types = self.parts.reader.types  # type: ignore[attr-defined]
        store.append([types.pending(event)])
        self.index.catch_up()


def _recall(target: Target) -> Recall:
    parts = target.tree()
    build = RecallIndex if target.kind == "sqlite" else PostgresRecallIndex
    index = build(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
    for (user, session), turns in CHATS.items():
        parts.capture.capture_messages(
            session,
            [{"role": "user", "name": name, "content": text} for name, text in turns],
            user_id=user,
            platform="test",
            created_at="2026-05-01T10:00:00+00:00",
        )
    index.catch_up()
    return Recall(target.kind, index, parts)


@pytest.fixture(params=["sqlite", "postgres"])
def recall(request: pytest.FixtureRequest, tmp_path) -> Iterator[Recall]:
    if request.param == "sqlite":
        made = _recall(Target("sqlite", str(tmp_path / "recall.db")))
        yield made
        made.parts.shutdown()  # type: ignore[attr-defined]
        return
    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        made = _recall(Target("postgres", conninfo))
        yield made
        made.parts.shutdown()  # type: ignore[attr-defined]


@pytest.fixture
def both(postgres_cluster, tmp_path) -> Iterator[tuple[Recall, Recall]]:
    with own_schema(postgres_cluster) as conninfo:
        lite = _recall(Target("sqlite", str(tmp_path / "recall.db")))
        pg = _recall(Target("postgres", conninfo))
        yield lite, pg
        lite.parts.shutdown()  # type: ignore[attr-defined]
        pg.parts.shutdown()  # type: ignore[attr-defined]


def test_the_answer_turn_is_found(recall: Recall) -> None:
    found = recall.index.hits("Which hotel did they book in Lisbon?", user_id="ann", limit=3)
    assert found, recall.kind
    texts = [hit.raw for hit in found if hit.kind == "message"]
    assert any("Alfama guesthouse" in t for t in texts), texts


def test_one_users_memory_is_never_read_for_another(recall: Recall) -> None:
    assert recall.search("locker code 4471", "ann") == []
    bob = recall.index.hits("locker code 4471", user_id="bob")
    assert bob and "4471" in bob[0].raw
    # Bob's Lisbon hotel is his alone; Ann's search for it finds only her own turns.
    for hit in recall.index.hits("Bairro Alto inn Lisbon hotel", user_id="ann"):
        assert "Bairro" not in hit.raw


def test_any_query_text_is_searched_as_text(recall: Recall) -> None:
    for query in ["' & | ! <-> :* \\ ( )", "a:B & !c", "gate':*", "'; DROP TABLE events; --"]:
        recall.search(query, "ann")  # no error, whatever it finds
    assert any(h[0] for h in recall.search("B-22 ':*'", "ann"))


def test_a_forgotten_message_is_no_longer_found(recall: Recall) -> None:
    hit = recall.index.hits("TAP flight TP1353", user_id="ann", limit=1)[0]
    recall.append(MemoryForgotten(target=hit.id, user_id="ann", profile=None))
    assert hit.id not in [h for h, _ in recall.search("TAP flight TP1353", "ann")]


def test_a_remembered_note_is_found_as_a_belief(recall: Recall) -> None:
    recall.append(MemoryRemembered(text="Ann's passport expires in March 2027", user_id="ann"))
    found = recall.index.hits("passport expires", user_id="ann", scope="beliefs")
    assert [h.kind for h in found] == ["belief"]
    assert recall.index.hits("passport expires", user_id="bob", scope="beliefs") == []


def test_rebuild_gives_the_same_hits(recall: Recall) -> None:
    before = {q: recall.search(q, "ann") for q in QUERIES}
    recall.index.rebuild()
    assert {q: recall.search(q, "ann") for q in QUERIES} == before


def test_both_stores_rank_messages_alike(both: tuple[Recall, Recall]) -> None:
    """The same messages, in the same order, with bm25 scores equal to FTS5's."""
    lite, pg = both
    for user in ("ann", "bob"):
        for query in QUERIES:
            a = lite.search(query, user, scope="messages")
            b = pg.search(query, user, scope="messages")
            assert [i for i, _ in a] == [i for i, _ in b], (user, query)
            assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-9), query


def test_both_stores_rank_alike_after_a_forget(both: tuple[Recall, Recall]) -> None:
    """bm25 takes each word's document frequency as it is now: a search just before a forget
    (which counts the words) does not leave the next one scoring with the old counts."""
    lite, pg = both
    query = "TAP flight TP1353 Lisbon"
    assert [i for i, _ in lite.search(query, "ann")] == [i for i, _ in pg.search(query, "ann")]
    for side in (lite, pg):
        target = side.index.hits("TAP flight TP1353", user_id="ann", limit=1)[0].id
        side.append(MemoryForgotten(target=target, user_id="ann", profile=None))
    a, b = lite.search(query, "ann", scope="messages"), pg.search(query, "ann", scope="messages")
    assert a and [i for i, _ in a] == [i for i, _ in b]
    assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-9)


NOTES = [
    ("ann", "Ann's passport expires in March 2027"),
    ("ann", "Ann prefers the window seat on long flights"),
    ("ann", "Ann's passport number ends in 4471 and the passport is blue"),
    ("bob", "Bob's passport expires in June"),
    ("ann", "The Lisbon guesthouse asked for the passport at check-in"),
    ("bob", "Bob keeps the locker code in his passport wallet"),
]


def test_both_stores_rank_beliefs_alike(both: tuple[Recall, Recall]) -> None:
    """The same beliefs in the same order, scored by bm25 over the whole belief index on both
    (FTS5 keeps every scope's beliefs in one table; so does the tsvector index)."""
    lite, pg = both
    for side in (lite, pg):
        for user, text in NOTES:
            side.append(MemoryRemembered(text=text, user_id=user))
    for user in ("ann", "bob"):
        for query in ("passport expires", "passport", "window seat flights", "locker wallet"):
            a = lite.index.hits(query, user_id=user, scope="beliefs", use_vectors=False)
            b = pg.index.hits(query, user_id=user, scope="beliefs", use_vectors=False)
            assert [h.raw for h in a] == [h.raw for h in b], (user, query)
            assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-9), query
    assert lite.index.hits("passport", user_id="ann", scope="beliefs", use_vectors=False)


def test_terms_give_each_column_its_words_and_weight() -> None:
    literal, length = terms((("A", "Ann"), ("B", "Booked flights, flying"), ("C", "")))
    assert length == 4
    assert "'ann':1A" in literal and "'book':3B" in literal and "'fly':5B" in literal
    assert tsquery_any(["vault 3", "it's"]) == "('vault' <-> '3') | ('it' <-> 's')"


def test_two_hosts_fold_one_database_once(postgres_cluster) -> None:
    """Two hosts' indexes over one PostgreSQL database catch up at once: every message is
    indexed once (the scope's counts are the index's rows), and both answer alike."""
    import threading

    with own_schema(postgres_cluster) as conninfo:
        target = Target("postgres", conninfo)
        first = target.tree()
        second = target.tree()
        try:
            indexes = [
                PostgresRecallIndex(p.reader, Config(), p.sessions, p.capture)  # type: ignore[arg-type]
                for p in (first, second)
            ]
            for (user, session), turns in CHATS.items():
                first.capture.capture_messages(  # type: ignore[attr-defined]
                    session,
                    [{"role": "user", "name": name, "content": text} for name, text in turns],
                    user_id=user,
                )
            threads = [threading.Thread(target=index.catch_up) for index in indexes * 2]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            assert not any(thread.is_alive() for thread in threads)
            with indexes[0].reading("checking") as conn:
                rows = conn.execute("SELECT count(*) FROM recall_message_terms").fetchone()
                counted = conn.execute("SELECT sum(docs) FROM recall_scope_terms").fetchone()
            assert rows is not None and counted is not None
            assert int(rows[0]) == int(counted[0]) == sum(len(t) for t in CHATS.values())
            for query in QUERIES:
                a, b = (index.hits(query, user_id="ann") for index in indexes)
                assert [h.id for h in a] == [h.id for h in b]
        finally:
            first.shutdown()  # type: ignore[attr-defined]
            second.shutdown()  # type: ignore[attr-defined]


def _tools(recall: Recall) -> RecallTools:
    return RecallTools.over(recall.index, recall.parts.capture)  # type: ignore[attr-defined]


def test_the_memory_tools_work_on_either_store(recall: Recall) -> None:
    """remember, correct, forget, beliefs and the sweep, through `Recall` over either index."""
    tools = _tools(recall)
    kept = tools.remember("Ann's passport number ends in 881", user_id="ann")
    found = tools.search("passport number", user_id="ann", scope="beliefs")
    assert [r["id"] for r in found] == [kept["id"]]
    assert tools.search("passport number", user_id="bob", scope="beliefs") == []
    corrected = tools.correct(str(kept["id"]), "Ann's passport number ends in 882", user_id="ann")
    current = [b["id"] for b in tools.beliefs(user_id="ann")]
    assert corrected["id"] in current and kept["id"] not in current
    hit = tools.search("Alfama guesthouse room 12", user_id="ann", scope="messages", limit=1)[0]
    gone = tools.forget(str(hit["id"]), user_id="ann")
    assert gone["messages"] == [hit["seq"]]
    assert tools.is_hidden(str(hit["id"]))
    assert tools.hidden_seqs([int(hit["seq"]), int(hit["seq"]) + 1]) == {hit["seq"]}
    assert tools.forgotten_messages() == {hit["seq"]}
    assert hit["id"] not in [r["id"] for r in tools.search("Alfama guesthouse", user_id="ann")]
    swept = tools.sweep_beliefs()
    assert swept["processed"] >= 2 and swept["problems"] == []
    with pytest.raises(UsageError):
        tools.forget(str(hit["id"]), user_id="bob")  # not an item of Bob's memory


def test_per_turn_memory_on_either_store(recall: Recall) -> None:
    """A new chat of Ann's is given her earlier turns about its first message."""
    tools = _tools(recall)
    block = tools.prefetch(
        "Which hotel did we book in Lisbon?", session_id="next", user_id="ann", platform="test"
    )
    assert "Lisbon" in block, block
    assert "Bairro" not in block  # Bob's


def _write_section(recall: Recall, session: str, prose: str) -> str:
    from chronicle_engine.chronicle.sections import Anchor, Section, section_id_for

    with recall.index.reading("test") as conn:
        seqs = [
            int(s)
            for (s,) in conn.execute(
                "SELECT seq FROM recall_messages WHERE session = ? ORDER BY seq", (session,)
            )
        ]
    lo, hi = seqs[0], seqs[-1]
    target = Target(recall.kind, "")
    chronicle = target.chronicle(recall.parts.store, session)  # type: ignore[attr-defined]
    chronicle.append_new(Section(Anchor(section_id_for(lo, hi), lo, hi, hi), prose))
    return f"s:{session}/{section_id_for(lo, hi)}"


def test_sections_are_found_for_their_owner_only(recall: Recall) -> None:
    written = _write_section(recall, "trip", "Ann booked the Alfama guesthouse in Lisbon for May.")
    _write_section(recall, "secret", "Bob keeps his gym locker code private.")
    found = recall.index.hits("Alfama guesthouse", user_id="ann", scope="sections")
    assert [h.id for h in found] == [written]
    assert recall.index.hits("Alfama guesthouse", user_id="bob", scope="sections") == []
    assert recall.index.hits("locker code", user_id="ann", scope="sections") == []
    recall.append(MemoryForgotten(target=written, user_id="ann"))
    assert recall.index.hits("Alfama guesthouse", user_id="ann", scope="sections") == []


def test_both_stores_rank_sections_alike(both: tuple[Recall, Recall]) -> None:
    for made in both:
        _write_section(made, "trip", "Ann booked the Alfama guesthouse in Lisbon for May.")
        _write_section(made, "garden", "Copper spray for the tomatoes' blight, kept in vault-3.")
    lite, pg = both
    for query in [*QUERIES, "Lisbon guesthouse", "blight"]:
        a = lite.search(query, "ann", scope="sections")
        b = pg.search(query, "ann", scope="sections")
        assert [i for i, _ in a] == [i for i, _ in b], query
        assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-9), query


def test_a_session_search_without_a_session_finds_nothing(recall: Recall) -> None:
    """scope "session" with no session to search: nothing, on either store, and no error."""
    assert recall.index.hits("Lisbon hotel", user_id="ann", scope="session") == []
    found = recall.index.hits("Lisbon hotel", session_id="trip", scope="session")
    assert found and {h.session for h in found} == {"trip"}
