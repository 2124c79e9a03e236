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
