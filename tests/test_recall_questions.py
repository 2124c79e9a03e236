"""A short question weighs less in a search than a turn that tells, on both stores.

A turn that asks ("Was the blue lagoon warm?") holds the words of what it asks about and seldom
the answer, which the turn after it gives. The fold notes each short question as it indexes it
(`recall_questions`; a question mark, at most 25 words in at most 300 characters:
`text.asks`), ranking multiplies its score by `question_weight` (reading the note with the
row, not the text), and a search pooled by session (`by_session`) counts it in full, as a
question shows what its session spoke of. A store folded before the note existed gets it
from its migration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from postgres_support import Target

from chronicle_engine.config import Config
from chronicle_engine.recall.events import MemoryForgotten
from chronicle_engine.recall.index import RecallIndex
from chronicle_engine.recall.postgres import PG_RECALL_MIGRATIONS, PostgresRecallIndex
from chronicle_engine.recall.schema import RECALL_MIGRATIONS
from chronicle_engine.recall.text import CONTEXT_CHARS, asks

STATEMENT = "The blue lagoon was warm and calm!"
QUESTION = "Was the blue lagoon warm and calm?"  # the same words, asked
NOT_QUESTIONS = [
    "A long reply that ends with a question: "
    + "we walked along the shore for hours and then sat by the water until the sun went down "
    + "behind the hills, and the children collected shells, so was it worth the drive?",
    "Which ones changed? " + " ".join(["d41d8cd98f00b204e9800998ecf8427e"] * 12),
    "A short remark that asks nothing.",
]
QUERY = "blue lagoon warm calm"


def test_a_short_question_is_one_of_at_most_25_words_in_at_most_300_characters() -> None:
    assert asks(QUESTION) and asks("Why?") and asks("Really? I had no idea")
    assert not any(asks(text) for text in NOT_QUESTIONS)
    assert len(NOT_QUESTIONS[1]) > CONTEXT_CHARS  # few words, but long ones


def captured(capture: Any, index: Any, store: Any, turns: list[str]) -> dict[str, int]:
    """text -> seq of each of `turns`, captured one session each and folded by `index`."""
    for i, text in enumerate(turns):
        capture.capture_messages(
            f"chat-{i}",
            [{"role": "user", "content": text}],
            user_id="cam",
            platform="test",
            created_at="2026-05-01T10:00:00+00:00",
        )
    index.catch_up()
    with store.reading() as conn:
        rows = conn.execute("SELECT seq, body FROM recall_message_text").fetchall()
    return {str(text): int(seq) for seq, text in rows}


class Memory:
    """A store of `target`'s kind holding `turns`, one session each unless `session` names it."""

    def __init__(self, target: Target, turns: list[str], config: Config | None = None):
        self.parts: Any = target.tree()
        build = RecallIndex if target.kind == "sqlite" else PostgresRecallIndex
        self.index = build(
            self.parts.reader, config or Config(), self.parts.sessions, self.parts.capture
        )
        self.seqs = captured(self.parts.capture, self.index, self.parts.store, turns)

    def marked(self) -> set[str]:
        with self.parts.store.reading() as conn:
            rows = conn.execute("SELECT seq FROM recall_questions").fetchall()
        by_seq = {seq: text for text, seq in self.seqs.items()}
        return {by_seq[seq] for (seq,) in rows}

    def found(self, **args: Any) -> list[tuple[str, float]]:
        hits = self.index.hits(QUERY, user_id="cam", scope="messages", use_vectors=False, **args)
        return [(hit.raw, hit.score) for hit in hits]


@pytest.fixture
def memories() -> Iterator[list[Memory]]:
    made: list[Memory] = []
    yield made
    for memory in made:
        memory.parts.shutdown()


def test_the_fold_notes_the_short_questions_alone(target, memories) -> None:
    memories.append(memory := Memory(target, [STATEMENT, QUESTION, *NOT_QUESTIONS]))
    assert memory.marked() == {QUESTION}


def test_a_forgotten_question_leaves_no_note(target, memories) -> None:
    memories.append(memory := Memory(target, [STATEMENT, QUESTION]))
    memory.parts.store.append(
        [
            memory.parts.reader.types.pending(
                MemoryForgotten(target=f"m{memory.seqs[QUESTION]}", user_id="cam", profile=None)
            )
        ]
    )
    memory.index.catch_up()
    assert memory.marked() == set()
    assert [text for text, _ in memory.found()] == [STATEMENT]


def test_a_short_question_keeps_the_question_weight_of_its_score(target, memories) -> None:
    # The question is the newer turn: between equal scores, the newer ranks first.
    memories.append(memory := Memory(target, [STATEMENT, QUESTION]))
    found = memory.found()
    assert [text for text, _ in found] == [STATEMENT, QUESTION], found
    score = dict(found)
    weight = Config().settings.recall.question_weight
    assert 0 < weight < 1
    assert score[QUESTION] / score[STATEMENT] == pytest.approx(weight, rel=0.01)


def test_pooled_by_session_a_question_counts_in_full(target, memories) -> None:
    memories.append(memory := Memory(target, [STATEMENT, QUESTION]))
    pooled = memory.found(pooling=True)
    assert [text for text, _ in pooled] == [QUESTION, STATEMENT], pooled
    assert pooled[0][1] == pytest.approx(pooled[1][1], rel=0.01)


def test_a_question_weight_of_one_ranks_a_question_as_any_turn(target, memories) -> None:
    config = Config({"recall": {"question_weight": 1.0}})
    memories.append(memory := Memory(target, [STATEMENT, QUESTION], config))
    assert [text for text, _ in memory.found()] == [QUESTION, STATEMENT]


def test_a_store_folded_before_the_note_gets_it_from_its_migration(target, memories) -> None:
    memories.append(memory := Memory(target, [STATEMENT, QUESTION, *NOT_QUESTIONS]))
    store = memory.parts.store
    with store.atomic() as conn:
        conn.execute("DELETE FROM recall_questions")
        name = "recall.m013_questions" if target.kind == "postgres" else "recall.m012_questions"
        conn.execute(f"DELETE FROM migrations WHERE name = '{name}'")
    assert memory.marked() == set()
    assert [text for text, _ in memory.found()] == [QUESTION, STATEMENT]  # as before the note
    store.migrate(PG_RECALL_MIGRATIONS if target.kind == "postgres" else RECALL_MIGRATIONS)
    assert memory.marked() == {QUESTION}
    assert [text for text, _ in memory.found()] == [STATEMENT, QUESTION]


def notes(core: Any) -> set[int]:
    with core.store.reading() as conn:
        return {int(seq) for (seq,) in conn.execute("SELECT seq FROM recall_questions")}


def test_a_rebuild_notes_the_questions_afresh(store_core) -> None:
    seqs = captured(store_core.capture, store_core.recall, store_core.store, [STATEMENT, QUESTION])
    with store_core.store.atomic() as conn:  # a stale note, as a changed `asks` would leave
        conn.execute(f"INSERT INTO recall_questions(seq) VALUES ({seqs[STATEMENT]})")
    assert notes(store_core) == {seqs[STATEMENT], seqs[QUESTION]}
    store_core.recall.rebuild()
    assert notes(store_core) == {seqs[QUESTION]}


def test_chronicle_search_by_session_counts_a_question_in_full(store_core) -> None:
    captured(store_core.capture, store_core.recall, store_core.store, [STATEMENT, QUESTION])
    recall = store_core.recall
    plain = recall.search(QUERY, scope="messages", user_id="cam")
    pooled = recall.search(QUERY, scope="messages", user_id="cam", by_session=True)
    assert [r["text"] for r in plain] == [STATEMENT, QUESTION], plain
    # Equal in full, the newer turn's session first: the pool ranks what the ranking gave it.
    assert [r["text"] for r in pooled] == [QUESTION, STATEMENT], pooled
