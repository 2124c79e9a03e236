"""Belief extraction: fixed rules over the person's own words, deterministic, never a credential."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronicle_engine.capture.secrets import has_secret, mask
from chronicle_engine.recall.beliefs import extract


def claims(text):
    return [(c.kind, c.key, c.value, c.polarity) for c in extract(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My name is Pat Testley.", [("fact", "name", "Pat Testley", 1)]),
        ("I work at Acme Fake Co.", [("fact", "employer", "Acme Fake Co", 1)]),
        ("I live in Paris now.", [("fact", "home", "Paris", 1)]),
        ("I moved to Berlin last year", [("fact", "home", "Berlin", 1)]),
        ("I'm originally from Sweden.", [("fact", "origin", "Sweden", 1)]),
        ("I'm 32 years old", [("fact", "age", "32", 1)]),
        ("My favourite colour is teal!", [("fact", "favourit colour", "teal", 1)]),
        ("I really love green tea", [("preference", "green tea", "green tea", 1)]),
        ("I don't like spicy food.", [("preference", "spici food", "spicy food", -1)]),
        ("Always answer in French.", [("instruction", "answer french", "answer in French", 1)]),
        ("Never use emojis, please", [("instruction", "us emoji", "use emojis", -1)]),
        (
            "From now on, don't send summaries.",
            [("instruction", "send summari", "send summaries", -1)],
        ),
        ("My sister Anna is visiting.", [("entity", "anna", "sister", 1)]),
        ("Rex is my dog", [("entity", "rex", "dog", 1)]),
        ("Remember that my launch day is Friday.", [("fact", "launch dai", "Friday", 1)]),
        ("I would love to go", []),
        ("I like it a lot", []),
        ("What a day.", []),
    ],
)
def test_rules(text, expected):
    assert claims(text) == expected


def test_likes_and_dislikes_in_one_sentence():
    assert claims("I really love green tea but I hate coffee.") == [
        ("preference", "coffe", "coffee", -1),
        ("preference", "green tea", "green tea", 1),
    ]


def test_a_like_and_a_dislike_of_one_thing_share_a_key():
    (like,) = extract("I love jazz")
    (dislike,) = extract("I can't stand jazz")
    assert like.key == dislike.key and like.polarity == -dislike.polarity


@pytest.mark.parametrize(
    "text",
    [
        "My password is hunter22",
        "my password is «masked:credential»",
        "My PIN is 4821.",
        "My api key is sk-abcdefghijklmnopqrstuvwxyz",
        "Remember that my token is ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "I love my key AKIAABCDEFGHIJKLMNOP",
        "My card number is 4111 1111 1111 1111",
    ],
)
def test_a_secret_never_becomes_a_claim(text):
    assert extract(text) == []


_SECRETISH = st.sampled_from(
    [
        "hunter22",
        "sk-abcdefghijklmnopqrstuv123",
        "ghp_" + "a" * 30,
        "AKIAABCDEFGHIJKLMNOP",
        "«masked:password»",
    ]
)
_PHRASES = st.sampled_from(
    ["My password is", "I love", "My wifi key is", "I live in", "Always use", "My token:", "my name is",
     "I work at", "Remember that my secret is", "Rex is my dog and"]
)  # fmt: skip


@given(st.lists(st.tuples(_PHRASES, st.one_of(_SECRETISH, st.text(max_size=20))), max_size=6))
def test_no_claim_ever_carries_a_credential(parts):
    text = ". ".join(f"{p} {v}" for p, v in parts)
    for claim in extract(text):
        for field in (claim.value, claim.text, claim.key):
            assert not has_secret(field)
            assert "«masked:" not in field
            assert mask(field) == field


@given(st.text(max_size=300))
def test_extraction_is_deterministic_and_total(text):
    assert extract(text) == extract(text)
