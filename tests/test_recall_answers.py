"""The answer to a short question asked right after a hit is found with the hit, on both stores.

"Last weekend we had a picnic with the church group." / "What did you play?" / "Charades and a
scavenger hunt." The answer shares no word with "what happened at the church picnic?", yet it is
what the question is after: the question between asks about the hit, so its answer inherits a
share of the neighbour share (`search._answers`). (The hit's last sentence is longer than a
context tail, so the question's own context holds none of its words.) A long reply that ends with a question, or a
short remark that asks nothing, links no answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgres_support import Target, own_schema

from chronicle_engine.config import Config
from chronicle_engine.recall.index import RecallIndex
from chronicle_engine.recall.postgres import PostgresRecallIndex

HIT = (
    "Last weekend we had a picnic with the church group. "
    # A last sentence longer than a context tail: the turn after holds none of the hit's words.
    "Everyone brought something home-made, the children ran around the old oaks all day long, "
    "and by the evening nobody wanted to pack up and drive back to town."
)
ANSWER = "Charades and a scavenger hunt, we laughed for hours."
FILLER = [
    "The train to Leeds was late again this morning.",
    "I repainted the kitchen a pale green colour.",
    "My sister adopted a grey kitten from the shelter.",
    "We are thinking about a new roof before winter.",
    "The library extended its opening hours on Sundays.",
    "I finally fixed the squeaky bedroom door.",
]
BETWEEN = {
    "a short question": "Sounds lovely! What did you all play?",
    "a long reply ending in a question": (
        "That sounds like a wonderful way to spend a weekend, and the weather was perfect for "
        "being outside all afternoon with everyone from the neighbourhood and their dogs, so "
        "what did you all play?"
    ),
    "a short remark": "Sounds lovely, I wish I had been there.",
}


def _captured(target: Target, between: str) -> tuple[PostgresRecallIndex | RecallIndex, object]:
    parts = target.tree()
    build = RecallIndex if target.kind == "sqlite" else PostgresRecallIndex
    index = build(parts.reader, Config(), parts.sessions, parts.capture)  # type: ignore[arg-type]
    turns = [
        *FILLER[:3],
        HIT,
        between,
        ANSWER,
        "Ha, that must have been fun to watch.",
        *FILLER[3:],
    ]
    parts.capture.capture_messages(
        "weekend",
        [
            {"role": "user", "name": "Cam" if i % 2 else "Dee", "content": text}
            for i, text in enumerate(turns)
        ],
        user_id="cam",
        platform="test",
        created_at="2026-05-01T10:00:00+00:00",
    )
    index.catch_up()
    return index, parts


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[str, object]]:
    if request.param == "sqlite":
        yield "sqlite", Target("sqlite", str(tmp_path / "recall.db"))
        return
    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        yield "postgres", Target("postgres", conninfo)


def _found(target: Target, between: str) -> list[str]:
    index, parts = _captured(target, between)
    try:
        hits = index.hits("what happened at the church picnic?", user_id="cam", use_vectors=False)
        return [hit.raw for hit in hits if hit.kind == "message"]
    finally:
        parts.shutdown()  # type: ignore[attr-defined]


def test_the_answer_to_a_short_question_after_a_hit_is_found(store) -> None:
    kind, target = store
    found = _found(target, BETWEEN["a short question"])
    # The hit, the turns beside it (a neighbour's share), then the answer (that share's share).
    assert found == [HIT, BETWEEN["a short question"], FILLER[2], ANSWER], (kind, found)


@pytest.mark.parametrize("between", ["a long reply ending in a question", "a short remark"])
def test_only_a_short_question_links_the_turn_after_it(store, between: str) -> None:
    kind, target = store
    found = _found(target, BETWEEN[between])
    assert found[:2] == [HIT, BETWEEN[between]], (kind, found)
    assert ANSWER not in found, (kind, between, found)
