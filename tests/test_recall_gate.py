"""The prefetch gate reads a text's words the same whether or not it skips the framing and URL
patterns for a text that cannot hold them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chronicle_engine.recall import gate
from chronicle_engine.recall.text import content_words, stems


def _gate_words_by_definition(text: str) -> set[str]:
    cleaned = gate._URL.sub(" ", gate._FRAME.sub(" ", text or ""))
    return stems(w for w in content_words(cleaned) if not (w.isdigit() and len(w) < 3))


_PIECES = st.sampled_from(
    [
        *("[System note: the user pasted a file]", "[system NOTE: x", "]", "[", "<", ">"),
        *("<memory-context>", "</memory-context>", "<MEMORY-CONTEXT>", "recalled tea"),
        *("https://example.com/a?b=c", "HTTPS://X.Y", "httpſ://x", "ftp://host/file", "://"),
        *("www.example.org", "WWW.", "wWw.x", "www", "ww.", "deploy", "staging", "42", "7"),
        *("kv/heron/staging", "vault-3", "Ünïcödé", "東京", "it's", "the", "and"),
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.lists(_PIECES, max_size=10).map(" ".join),
        st.lists(_PIECES, max_size=10).map("".join),
        st.text(max_size=60),
    )
)
def test_gate_words_are_what_both_patterns_leave(text: str) -> None:
    assert gate.gate_words(text) == _gate_words_by_definition(text)


def test_framing_and_urls_are_not_gate_words() -> None:
    said = "[System note: recalled] see https://example.com/heron and www.kestrel.org heron"
    assert gate.gate_words(said) == {"see", "heron"}
