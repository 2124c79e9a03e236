"""The recall fold's message index (SQLite's FTS5): what it inserts for a new message, built from
the row it just wrote, is what `recall_message_text` gives for that row, so the index stays
exactly the one made again from the view (`schema._reindex_messages`), through forgets too."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_recall_support import open_core, say

from chronicle_engine.errors import UsageError
from chronicle_engine.recall.schema import _reindex_messages, message_index

_LONG = " ".join(
    f"The ferry to island {i} leaves at {i} pm, so pack light and bring water." for i in range(12)
)
_SENTENCES = [
    "I live in Paris.",
    "what about the museum tickets?",
    "My sister Anna is visiting. She lands at noon!",
    "the token is sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c, keep it",  # masked: body kept
    _LONG,
    _LONG[:700] + " and then",
    "ok",
]


def _index_rows(core) -> dict[int, list[tuple[object, ...]]]:
    """Every (term, rowid, column, offset) of each scope's message index."""
    out: dict[int, list[tuple[object, ...]]] = {}
    with core.store.atomic() as conn:
        for (scope,) in conn.execute("SELECT n FROM recall_scopes ORDER BY n").fetchall():
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab("
                f"main, {message_index(scope)}, 'instance')"
            )
            out[scope] = conn.execute("SELECT * FROM temp.vocab ORDER BY 1, 2, 3, 4").fetchall()
            conn.execute("DROP TABLE temp.vocab")
    return out


@settings(
    max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(
    kind=st.sampled_from(["memory", "file"]),
    ops=st.lists(
        st.one_of(
            st.tuples(
                st.just("say"),
                st.sampled_from(["u1-a", "u1-b", "u2-a"]),
                st.sampled_from(_SENTENCES),
            ),
            st.tuples(st.just("fold"), st.none(), st.none()),
            st.tuples(st.just("forget"), st.integers(0, 30), st.none()),
            st.tuples(st.just("remember"), st.sampled_from(["u1", "u2"]), st.just("a note")),
        ),
        min_size=1,
        max_size=24,
    ),
)
def test_the_index_of_new_messages_is_the_one_made_from_the_view(tmp_path_factory, kind, ops):
    core = open_core(kind, tmp_path_factory.mktemp("fold"))
    try:
        said: list[tuple[int, str]] = []
        forgotten: set[int] = set()
        for op, a, b in ops:
            if op == "say":
                user = a.split("-")[0]
                said.append((say(core, a, b, user_id=user), user))
            elif op == "fold":
                core.recall.catch_up()
            elif op == "remember":
                core.recall.remember(b, user_id=a)
            elif said:
                seq, user = said[a % len(said)]
                try:
                    core.recall.forget(f"m{seq}", user_id=user)
                    forgotten.add(seq)
                except UsageError:
                    pass  # not folded yet: the tool refuses, nothing is written
        core.recall.catch_up()
        folded = _index_rows(core)
        with core.store.atomic() as conn:
            _reindex_messages(conn)
        assert _index_rows(core) == folded
        indexed = {row[1] for rows in folded.values() for row in rows}
        assert indexed == {seq for seq, _ in said} - forgotten
    finally:
        core.shutdown()


def test_a_row_keeps_its_text_and_time_only_where_the_log_reads_otherwise(tmp_path):
    """`body_from_log`: a row's body is '' exactly where the log row's text (as SQLite's JSON
    reads it) is the masked text, and its time '' where the log's is the event's. The fold
    decides most messages without asking SQLite; these are the ones it must not get wrong:
    a NUL (SQLite's JSON reading stops there), a text cut from a longer content, a credential
    (logged masked, beside its content), a plain message, a tool result."""
    core = open_core("file", tmp_path)
    try:
        texts = [
            "plain words about the ferry",
            "before a NUL \x00 and after it",
            "the token is sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c, keep it",
            "long " * 14_000,  # past INDEXED_CHARS: the searchable text is cut, content is not
        ]
        seqs = [say(core, "s", t) for t in texts]
        seqs.append(say(core, "s", "tool output here", role="tool"))
        core.recall.catch_up()
        with core.store.atomic() as conn:
            rows = {
                seq: (body, at, logged, created, view)
                for seq, body, at, logged, created, view in conn.execute(
                    "SELECT m.seq, m.body, m.at,"
                    " (SELECT COALESCE(json_extract(e.payload, '$.text'),"
                    "  json_extract(e.payload, '$.message.content')) FROM events e"
                    "  WHERE e.seq = m.seq),"
                    " (SELECT e.created_at FROM events e WHERE e.seq = m.seq),"
                    " (SELECT t.body FROM recall_message_text t WHERE t.seq = m.seq)"
                    " FROM recall_messages m"
                )
            }
        assert sorted(rows) == seqs
        for seq, (body, at, logged, created, view) in rows.items():
            assert (body == "") == (view == logged), seq  # '' only where the log gives it
            assert body == "" or body != logged, seq
            assert at == "" and created, seq
        nul, masked, cut = rows[seqs[1]], rows[seqs[2]], rows[seqs[3]]
        assert nul[0] == texts[1] and nul[2] != texts[1]  # SQLite reads it cut at the NUL
        assert masked[0] == "" and "sk-live" not in masked[4]  # capture logged it masked
        assert cut[0] == "" and len(cut[4]) < len(texts[3])  # the log holds the cut text
        assert rows[seqs[0]][0] == "" and rows[seqs[4]][0] == ""
        folded = _index_rows(core)
        with core.store.atomic() as conn:
            _reindex_messages(conn)
        assert _index_rows(core) == folded
    finally:
        core.shutdown()
