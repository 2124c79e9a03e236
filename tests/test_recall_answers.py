"""The answer to a short question asked right after a hit is found with the hit, on both stores.

"Last weekend we had a picnic with the church group." / "What did you play?" / "Charades and a
scavenger hunt." The answer shares no word with "what happened at the church picnic?", yet it
is what the question is after: the question between asks about the hit, so its answer inherits
the neighbour share of the neighbour share (`search._answers`). A long reply that ends with a
question, or a short remark that asks nothing, links no answer; nor does a forgotten question,
and a turn of another person's memory is never read, linked or not. (The hit's last sentence is
longer than a context tail, so the question's own context holds none of its words.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from postgres_support import Target

from chronicle_engine.config import Config
from chronicle_engine.recall.events import MemoryForgotten
from chronicle_engine.recall.index import RecallIndex
from chronicle_engine.recall.postgres import PostgresRecallIndex

QUERY = "what happened at the church picnic?"
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
QUESTION = "Sounds lovely! What did you all play?"
BETWEEN = {
    "a short question": QUESTION,
    "a long reply ending in a question": (
        "That sounds like a wonderful way to spend a weekend, and the weather was perfect for "
        "being outside all afternoon with everyone from the neighbourhood and their dogs, so "
        "what did you all play?"
    ),
    "a short remark": "Sounds lovely, I wish I had been there.",
    # Few words but long ones (a tool's output of hashes): not a question of a few words.
    "a few long words after a question": "Which ones changed? "
    + " ".join(["d41d8cd98f00b204e9800998ecf8427e"] * 12),
}


class Chat:
    """One session on a store of `target`'s kind: filler, the hit, `between`, the answer, more
    filler; each turn in `owners`' memory where it names one, else in "cam"'s."""

    def __init__(self, target: Target, between: str, owners: dict[str, str] | None = None):
        self.parts: Any = target.tree()
        build = RecallIndex if target.kind == "sqlite" else PostgresRecallIndex
        self.index = build(self.parts.reader, Config(), self.parts.sessions, self.parts.capture)
        turns = [*FILLER[:3], HIT, between, ANSWER, "Ha, that must have been fun.", *FILLER[3:]]
        for i, text in enumerate(turns):
            self.parts.capture.capture_messages(
                "weekend",
                [{"role": "user", "name": "Cam" if i % 2 else "Dee", "content": text}],
                user_id=(owners or {}).get(text, "cam"),
                platform="test",
                created_at="2026-05-01T10:00:00+00:00",
            )
        self.index.catch_up()

    def found(self) -> list[tuple[str, float]]:
        """(text, score) of the messages found for QUERY: ranking's own scores (scope
        "messages" alone is not fused with other lists)."""
        hits = self.index.hits(QUERY, user_id="cam", scope="messages", use_vectors=False)
        return [(hit.raw, hit.score) for hit in hits]

    def forget(self, text: str) -> None:
        (hit,) = [h for h in self.index.hits(text, user_id="cam") if h.raw == text]
        self.parts.store.append(
            [
                self.parts.reader.types.pending(
                    MemoryForgotten(target=hit.id, user_id="cam", profile=None)
                )
            ]
        )
        self.index.catch_up()


@pytest.fixture
def chats() -> Iterator[list[Chat]]:
    made: list[Chat] = []
    yield made
    for chat in made:
        chat.parts.shutdown()


def test_the_answer_to_a_short_question_gets_the_share_of_the_share(target, chats) -> None:
    chats.append(chat := Chat(target, QUESTION))
    found = chat.found()
    # The hit, the turns beside it (a neighbour's share; the question, a short one, weighs
    # `question_weight` of it), then the answer (that share's share).
    assert [text for text, _ in found] == [HIT, FILLER[2], QUESTION, ANSWER], found
    score = dict(found)
    tuning = Config().settings.recall
    share = tuning.neighbour_weight
    assert score[FILLER[2]] / score[HIT] == pytest.approx(share, rel=0.01)
    assert score[QUESTION] / score[HIT] == pytest.approx(share * tuning.question_weight, rel=0.01)
    assert score[ANSWER] / score[HIT] == pytest.approx(share * share, rel=0.01)


@pytest.mark.parametrize(
    "between",
    [
        "a long reply ending in a question",
        "a short remark",
        "a few long words after a question",
    ],
)
def test_only_a_short_question_links_the_turn_after_it(target, chats, between: str) -> None:
    chats.append(chat := Chat(target, BETWEEN[between]))
    found = [text for text, _ in chat.found()]
    assert found[:2] == [HIT, BETWEEN[between]], found
    assert ANSWER not in found, (between, found)


def test_a_forgotten_question_links_nothing(target, chats) -> None:
    chats.append(chat := Chat(target, QUESTION))
    chat.forget(QUESTION)
    found = [text for text, _ in chat.found()]
    assert found[0] == HIT and QUESTION not in found and ANSWER not in found, found


@pytest.mark.parametrize("theirs", ["the answer", "the question", "the turn before the hit"])
def test_a_linked_turn_of_another_persons_memory_is_never_read(target, chats, theirs) -> None:
    """One session may hold several people's turns: a turn linked to a hit is read only when it
    is of the searcher's own memory."""
    text = {"the answer": ANSWER, "the question": QUESTION, "the turn before the hit": FILLER[2]}
    chats.append(chat := Chat(target, QUESTION, owners={text[theirs]: "dee"}))
    found = [text for text, _ in chat.found()]
    assert found[0] == HIT and text[theirs] not in found, found
    if theirs == "the question":  # another's words ask nothing of this memory
        assert ANSWER not in found, found
