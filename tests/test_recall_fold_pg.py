"""The recall fold on PostgreSQL writes a run of messages a few statements at a time; it must
write exactly what SQLite's fold writes one message at a time.

The same log (messages in several sessions, users and profiles, some naming a speaker, some the
person's claims, among them forgets, notes and corrections) is appended to a SQLite file and to
a PostgreSQL schema, and each store's recall index folds it (PostgreSQL's in batches of a
drawn size, so runs start and end anywhere). Then every table recall keeps is compared row by
row, and PostgreSQL's full-text rows are checked against the words each message row says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import Target, TreeParts, own_schema

from chronicle_engine.capture.events import MessageCaptured
from chronicle_engine.config import Config
from chronicle_engine.log.projector import Projector
from chronicle_engine.log.store import PendingEvent
from chronicle_engine.recall.events import MemoryCorrected, MemoryForgotten, MemoryRemembered
from chronicle_engine.recall.index import RecallIndex
from chronicle_engine.recall.postgres import PostgresRecallIndex, terms
from chronicle_engine.recall.text import index_row

SAID = [
    "My name is Ann and I live in Lisbon.",
    "I live in Porto now, near the river.",
    "I work at the harbour office.",
    "Which hotel did you book for Lisbon?",
    "The Alfama guesthouse, room 12, near the tram stop.",
    "   ",  # no text to recall: not folded
    "my api key is sk-abcdefghijklmnopqrstuvwx, keep it",
    "I like green tea in the morning.",
]

message = st.tuples(
    st.just("message"),
    st.sampled_from(["s1", "s2", "s3", None]),
    st.sampled_from([None, "ann", "bo"]),
    st.sampled_from([None, "work"]),
    st.sampled_from(["person", "assistant"]),
    st.sampled_from(["", "Ann", "Bo Li"]),
    st.sampled_from(SAID),
)
memory = st.tuples(
    st.sampled_from(["forget", "forget-belief", "remember", "correct"]),
    st.integers(min_value=0, max_value=40),
    st.sampled_from([None, "ann"]),
)


def _events(script: list[tuple[object, ...]]) -> list[tuple[object, str | None]]:
    """The domain events of a drawn script, with their sessions (forgets aim at earlier seqs)."""
    out: list[tuple[object, str | None]] = []
    for step in script:
        if step[0] == "message":
            _, session, user, profile, speaker, name, text = step
            role = "user" if speaker == "person" else "assistant"
            wire: dict[str, object] = {"role": role, "content": text}
            if name:
                wire["name"] = name
            event = MessageCaptured(
                role=role,
                message=wire,
                fingerprint=f"f{len(out)}",
                speaker=str(speaker),
                text=str(text),
                person_text=str(text) if speaker == "person" else "",
                user_id=user,  # type: ignore[arg-type]
                profile=profile,  # type: ignore[arg-type]
            )
            out.append((event, session))  # type: ignore[arg-type]
            continue
        kind, at, user = step
        seq = 1 + int(at) % max(len(out), 1)
        if kind == "forget":
            out.append((MemoryForgotten(target=f"m{seq}", user_id=user), None))  # type: ignore[arg-type]
        elif kind == "forget-belief":
            out.append(
                (MemoryForgotten(target=f"b{seq}.0", include_source=True, user_id=user), None)  # type: ignore[arg-type]
            )
        elif kind == "remember":
            out.append(
                (MemoryRemembered(text=f"note {at}: the gate code is B-{at}", user_id=user), None)
            )  # type: ignore[arg-type]
        else:
            out.append(
                (MemoryCorrected(target=f"b{seq}.0", text="I live in Faro", user_id=user), None)
            )  # type: ignore[arg-type]
    return out


_TABLES = {
    "recall_scopes": "SELECT n, user_id, profile FROM recall_scopes ORDER BY n",
    "recall_messages": (
        "SELECT m.seq, m.scope, m.session, m.role, m.speaker, m.name, m.agent_context, m.ts,"
        " m.prev, m.person, t.name, t.body, t.ctx FROM recall_messages m"
        " JOIN recall_message_text t ON t.seq = m.seq ORDER BY m.seq"
    ),
    "recall_hidden": "SELECT target, by_seq FROM recall_hidden ORDER BY target",
    "recall_beliefs": (
        "SELECT rowid, id, scope, kind, key, value, polarity, text, origin, source_seq, session,"
        " at, supersedes FROM recall_beliefs ORDER BY rowid"
    ),
    "recall_belief_sources": "SELECT belief, seq FROM recall_belief_sources ORDER BY belief, seq",
    "recall_corrections": "SELECT target, belief FROM recall_corrections ORDER BY target, belief",
    "recall_name_words": "SELECT word FROM recall_name_words ORDER BY word",
}


def _rows(index: RecallIndex) -> dict[str, list[tuple[object, ...]]]:
    with index.reading("comparing") as conn:
        return {
            table: [tuple(row) for row in conn.execute(sql).fetchall()]
            for table, sql in _TABLES.items()
        }


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    script=st.lists(st.one_of(message, message, message, memory), min_size=1, max_size=40),
    batch=st.sampled_from([1, 2, 7, 1000]),
)
def test_a_batched_fold_writes_what_one_message_at_a_time_writes(
    postgres_cluster, tmp_path_factory: pytest.TempPathFactory, script, batch
) -> None:
    events = _events(script)
    folded = {}
    with own_schema(postgres_cluster) as conninfo:
        for target in (
            Target("sqlite", str(tmp_path_factory.mktemp("fold") / "fold.db")),
            Target("postgres", conninfo),
        ):
            parts = target.tree()
            try:
                build = RecallIndex if target.kind == "sqlite" else PostgresRecallIndex
                index = build(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
                types = parts.reader.types  # type: ignore[attr-defined]
                pending: list[PendingEvent] = [
                    types.pending(
                        event,
                        session=session,
                        id=f"e{i}",
                        created_at=f"2026-05-01T10:{i // 60:02d}:{i % 60:02d}+00:00",
                    )
                    for i, (event, session) in enumerate(events)
                ]
                parts.store.append(pending)  # type: ignore[attr-defined]
                if target.kind == "postgres":
                    index.projector = Projector(
                        index.projector.store, parts.reader, [index.fold], batch_size=batch
                    )
                index.catch_up()
                folded[target.kind] = _rows(index)
                if target.kind == "postgres":
                    _check_terms(index, folded["postgres"])
            finally:
                parts.shutdown()
    for table in _TABLES:
        assert folded["postgres"][table] == folded["sqlite"][table], table


def _check_terms(index: RecallIndex, rows: dict[str, list[tuple[object, ...]]]) -> None:
    """Each visible message's full-text row holds the words its row says, and each scope's
    counts (rows, words, rows holding each lexeme) add its rows up."""
    with index.reading("checking the index") as conn:
        held = {
            int(seq): (int(scope), int(dl), str(tsv))
            for seq, scope, dl, tsv in conn.execute(
                "SELECT seq, scope, dl, tsv::text FROM recall_message_terms"
            )
        }
        counts = {
            int(scope): (int(docs), int(words))
            for scope, docs, words in conn.execute(
                "SELECT scope, docs, words FROM recall_scope_terms WHERE docs > 0"
            )
        }
        lexemes = {
            (int(scope), str(lexeme)): int(docs)
            for scope, lexeme, docs in conn.execute(
                "SELECT scope, lexeme, docs FROM recall_lexeme_docs WHERE docs > 0"
            )
        }
        counted = {
            (int(scope), str(lexeme)): int(docs)
            for scope, lexeme, docs in conn.execute(
                "SELECT t.scope, l.lexeme, count(*) FROM recall_message_terms t,"
                " unnest(tsvector_to_array(t.tsv)) l(lexeme) GROUP BY t.scope, l.lexeme"
            )
        }
        hidden = {str(target) for (target,) in conn.execute("SELECT target FROM recall_hidden")}
        expected: dict[int, tuple[int, int, str]] = {}
        for row in rows["recall_messages"]:
            seq, scope, name, body, ctx = int(row[0]), int(row[1]), row[10], row[11], row[12]  # type: ignore[arg-type]
            if f"m{seq}" in hidden:
                continue
            n, b, c = index_row(str(name), str(body), str(ctx))
            literal, length = terms((("A", n), ("B", b), ("C", c)))
            tsv = conn.execute("SELECT ?::tsvector::text", (literal,)).fetchone()
            expected[seq] = (scope, length, str(tsv[0]))
    assert held == expected
    assert lexemes == counted  # each lexeme's document count, kept through forgets
    sums: dict[int, tuple[int, int]] = {}
    for scope, dl, _ in expected.values():
        docs, words = sums.get(scope, (0, 0))
        sums[scope] = (docs + 1, words + dl)
    assert counts == sums


def test_a_belief_indexed_by_an_older_host_gets_its_length(postgres_cluster) -> None:
    """Hosts on code from before recall.m003 index a belief without its length (dl): the server
    fills it in, so bm25 does not read the belief as having no words."""
    with own_schema(postgres_cluster) as conninfo:
        parts = Target("postgres", conninfo).tree()
        try:
            index = PostgresRecallIndex(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
            literal, length = terms((("B", "note: the gate code is B-22 at the north gate"),))
            with index.writing("indexing as an older host does") as conn:
                conn.execute(
                    "INSERT INTO recall_belief_terms(rowid, tsv) VALUES (7, ?::tsvector)",
                    (literal,),
                )
                conn.execute(
                    "INSERT INTO recall_belief_terms(rowid, tsv, dl) VALUES (8, ?::tsvector, 3)",
                    (literal,),
                )
            with index.reading("reading lengths") as conn:
                held = dict(conn.execute("SELECT rowid, dl FROM recall_belief_terms").fetchall())
            assert length == 11 and held == {7: length, 8: 3}  # (a length given is kept)
        finally:
            parts.shutdown()


def test_rows_an_older_host_indexes_or_deletes_are_counted_by_lexeme(postgres_cluster) -> None:
    """Hosts on code from before recall.m006 (a rolling upgrade) insert and delete full-text rows
    without counting them in `recall_lexeme_docs`: the server's triggers count them, so each
    word's document frequency stays the number of rows holding it."""
    with own_schema(postgres_cluster) as conninfo:
        parts = Target("postgres", conninfo).tree()
        try:
            index = PostgresRecallIndex(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
            gate, _ = terms((("B", "the gate code is B-22 at the north gate"),))
            tea, _ = terms((("B", "green tea at the north gate"),))
            with index.writing("indexing as an older host does") as conn:
                for seq, literal in ((1, gate), (2, tea), (3, gate)):
                    conn.execute(
                        "INSERT INTO recall_message_terms(seq, scope, dl, tsv)"
                        " VALUES (?, 1, 5, ?::tsvector)",
                        (seq, literal),
                    )
                conn.execute("DELETE FROM recall_message_terms WHERE seq = 3")
            with index.reading("reading the counts") as conn:
                kept = dict(
                    conn.execute(
                        "SELECT lexeme, docs FROM recall_lexeme_docs WHERE scope = 1 AND docs > 0"
                    ).fetchall()
                )
                rows = dict(
                    conn.execute(
                        "SELECT l.lexeme, count(*) FROM recall_message_terms t,"
                        " unnest(tsvector_to_array(t.tsv)) l(lexeme) WHERE t.scope = 1"
                        " GROUP BY l.lexeme"
                    ).fetchall()
                )
            assert kept == rows and kept["north"] == 2 and kept["tea"] == 1 and kept["code"] == 1
        finally:
            parts.shutdown()


@contextlib.contextmanager
def _migrated_before(conninfo: str, name: str) -> Iterator[TreeParts]:
    """A store at `conninfo` with the chronicle's and recall's migrations before recall's `name`
    (as a host on older code left it)."""
    from chronicle_engine.chronicle.postgres import PG_CHRONICLE_MIGRATIONS
    from chronicle_engine.recall.postgres import PG_RECALL_MIGRATIONS

    names = [m.name for m in PG_RECALL_MIGRATIONS]
    parts = Target("postgres", conninfo).tree()
    try:
        parts.reader.store.migrate(  # type: ignore[attr-defined]
            (*PG_CHRONICLE_MIGRATIONS, *PG_RECALL_MIGRATIONS[: names.index(name)])
        )
        yield parts
    finally:
        parts.shutdown()


def test_belief_and_section_totals_stay_the_rows_an_older_host_writes(postgres_cluster) -> None:
    """bm25 reads the belief and section indexes' rows and words from `recall_index_totals`
    (recall.m008), not by counting them: rows indexed before the migration are counted by it,
    and rows an older host inserts, updates or deletes after it (no word of the totals in its
    code) are counted by the server's triggers, so the totals stay a recount of the rows."""
    gate, gate_words = terms((("B", "the gate code is B-22 at the north gate"),))
    tea, tea_words = terms((("A", "green tea at the north gate"),))

    def recount(conn) -> dict[str, tuple[int, int]]:
        return {
            table: tuple(  # type: ignore[misc]
                int(n)
                for n in conn.execute(
                    f"SELECT count(*), coalesce(sum(dl), 0) FROM {table}"
                ).fetchone()
            )
            for table in ("recall_belief_terms", "recall_section_terms")
        }

    def totals(conn) -> dict[str, tuple[int, int]]:
        return {
            str(name): (int(docs), int(words))
            for name, docs, words in conn.execute(
                "SELECT name, docs, words FROM recall_index_totals"
            )
        }

    def kept(index, *, beliefs: tuple[int, int], sections: tuple[int, int]) -> None:
        with index.reading("reading the totals") as conn:
            held, counted = totals(conn), recount(conn)
        assert held == counted
        assert counted == {"recall_belief_terms": beliefs, "recall_section_terms": sections}

    with (
        own_schema(postgres_cluster) as conninfo,
        _migrated_before(conninfo, "recall.m008_index_totals") as parts,
    ):
        with parts.reader.store.atomic() as conn:  # indexed before recall.m008
            conn.execute(
                "INSERT INTO recall_belief_terms(rowid, tsv) VALUES (1, %s::tsvector)", (gate,)
            )
            conn.execute(
                "INSERT INTO recall_section_terms(written, dl, tsv)"
                " VALUES (1, %s, %s::tsvector), (2, %s, %s::tsvector)",
                (gate_words, gate, tea_words, tea),
            )
        index = PostgresRecallIndex(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
        kept(index, beliefs=(1, gate_words), sections=(2, gate_words + tea_words))
        with index.writing("indexing as an older host does") as conn:
            for rowid, literal in ((2, tea), (3, gate), (4, tea)):
                conn.execute(
                    "INSERT INTO recall_belief_terms(rowid, tsv) VALUES (?, ?::tsvector)",
                    (rowid, literal),
                )
            conn.execute("DELETE FROM recall_belief_terms WHERE rowid IN (1, 3)")
            conn.execute(
                "INSERT INTO recall_section_terms(written, dl, tsv) VALUES (3, 4, ?::tsvector)",
                (tea,),
            )
            conn.execute("UPDATE recall_section_terms SET dl = dl + 2 WHERE written >= 2")
            conn.execute("DELETE FROM recall_section_terms WHERE written = 1")
            conn.execute("DELETE FROM recall_section_terms WHERE written = 99")  # (none)
        kept(index, beliefs=(2, 2 * tea_words), sections=(2, tea_words + 2 + 4 + 2))
        with index.writing("rebuilding") as conn:
            index.fold.reset(conn)
            conn.execute("TRUNCATE recall_section_terms")
        kept(index, beliefs=(0, 0), sections=(0, 0))


def test_every_indexed_row_keeps_its_tsvectors_text_whoever_wrote_it(postgres_cluster) -> None:
    """bm25 reads a row's positions from `tsv_text` (recall.m009): rows indexed before the
    migration get it from it, and rows an older host inserts after it (naming no such column)
    get it from the server, so it is always the row's tsvector as text, in all three indexes."""
    gate, gate_words = terms((("B", "the gate code is B-22 at the north gate"),))
    tea, tea_words = terms((("A", "green tea"), ("B", "at the north gate"), ("C", "tea")))
    inserts = (
        "INSERT INTO recall_message_terms(seq, scope, dl, tsv) VALUES (%s, 1, %s, %s::tsvector)",
        "INSERT INTO recall_belief_terms(rowid, dl, tsv) VALUES (%s, %s, %s::tsvector)",
        "INSERT INTO recall_section_terms(written, dl, tsv) VALUES (%s, %s, %s::tsvector)",
    )
    with (
        own_schema(postgres_cluster) as conninfo,
        _migrated_before(conninfo, "recall.m009_tsv_text") as parts,
    ):
        with parts.reader.store.atomic() as conn:  # indexed before recall.m009
            for sql in inserts:
                conn.execute(sql, (1, gate_words, gate))
        index = PostgresRecallIndex(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
        with index.writing("indexing as an older host does") as conn:
            for sql in inserts:
                conn.execute(sql.replace("%s", "?"), (2, tea_words, tea))
        with index.reading("reading the texts") as conn:
            expected = sorted(
                str(conn.execute("SELECT ?::tsvector::text", (literal,)).fetchone()[0])
                for literal in (gate, tea)
            )
            for table in (
                "recall_message_terms",
                "recall_belief_terms",
                "recall_section_terms",
            ):
                kept = [str(t) for (t,) in conn.execute(f"SELECT tsv_text FROM {table} ORDER BY 1")]
                assert kept == expected


@settings(max_examples=40, deadline=None)
@given(
    columns=st.lists(
        st.tuples(
            st.sampled_from("ABC"),
            st.lists(
                st.sampled_from(["tawa", "xtawa", "tawas", "a1", "Ünï", "東京", "b", "9", "the"]),
                max_size=12,
            ).map(" ".join),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_positions_read_from_the_text_are_the_servers(postgres_cluster, columns) -> None:
    """bm25 reads a row's positions from its tsvector's text (`_positions`): the same pairs the
    server's unnest() gives, for every lexeme, none taken for another that ends like it."""
    import psycopg

    from chronicle_engine.recall.postgres import _lexeme, _positions

    literal, _ = terms(columns)
    with psycopg.connect(postgres_cluster.conninfo(), autocommit=True) as conn:
        text = conn.execute("SELECT %s::tsvector::text", (literal,)).fetchone()[0]
        served = {
            str(lexeme): set(zip(positions, weights, strict=True))
            for lexeme, positions, weights in conn.execute(
                "SELECT lexeme, positions, weights FROM unnest(%s::tsvector)", (literal,)
            )
        }
    wanted = {lexeme: f"{_lexeme(lexeme)}:" for lexeme in [*served, "tawa", "zzz"]}
    assert _positions(text, wanted) == served


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_forgetting_a_turn_leaves_the_next_persons_turn_in_their_own_memory(
    postgres_cluster, tmp_path, kind: str
) -> None:
    """In a group chat one session holds several people's turns. Forgetting one takes its words
    out of the next turn's index row (they were its context): that row is re-indexed in its own
    person's memory, never in the memory of the person who forgot."""
    with own_schema(postgres_cluster) as conninfo:
        target = Target(kind, str(tmp_path / "group.db") if kind == "sqlite" else conninfo)
        parts = target.tree()
        try:
            build = RecallIndex if kind == "sqlite" else PostgresRecallIndex
            index = build(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
            types = parts.reader.types  # type: ignore[attr-defined]
            said = [("ann", "Our team offsite is in Porto."), ("bob", "My badge number is 88231.")]
            parts.store.append(  # type: ignore[attr-defined]
                [
                    types.pending(
                        MessageCaptured(
                            role="user",
                            message={"role": "user", "content": text},
                            fingerprint=user,
                            speaker="person",
                            text=text,
                            person_text=text,
                            user_id=user,
                        ),
                        session="group",
                    )
                    for user, text in said
                ]
            )
            index.catch_up()
            parts.store.append([types.pending(MemoryForgotten(target="m1", user_id="ann"))])  # type: ignore[attr-defined]
            index.catch_up()
            assert "m2" in [h.id for h in index.hits("badge number", user_id="bob")]
            assert index.hits("badge number", user_id="ann") == []
            assert index.hits("offsite Porto", user_id="ann") == []
        finally:
            parts.shutdown()
