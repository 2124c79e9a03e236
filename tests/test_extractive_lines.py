"""The extractive summariser's lines, against their definitions: a line is the text with each
run of whitespace one space, cut to its cap; a tool result without an error is shown by its
first line that holds text (`str.splitlines`' line breaks, all of them)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chronicle_engine.chronicle.extractive import _one_line, _outcome

_BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
_WORDS = ["ok", "done", "é", "東京", "x" * 70, " ", "  "]
_PARTS = st.one_of(
    st.lists(st.sampled_from(_WORDS), max_size=60),  # printable: only spaces to fold
    st.lists(st.sampled_from([*_WORDS, *_BREAKS, "\t", "\xa0", "\u3000", "\x00"]), max_size=60),
)


@given(_PARTS, st.integers(min_value=1, max_value=300))
def test_a_line_is_the_text_single_spaced_and_cut_to_its_cap(parts: list[str], cap: int) -> None:
    text = "".join(parts)
    flat = " ".join(text[: cap * 3].split())
    assert _one_line(text, cap) == (flat if len(flat) <= cap else flat[: cap - 1].rstrip() + "…")


@given(_PARTS)
def test_a_result_without_an_error_shows_its_first_line_that_holds_text(parts: list[str]) -> None:
    text = "".join(parts)
    shown = text[:800].strip()
    first = next((line for line in shown.splitlines() if line.strip()), "")
    expected = _one_line(first, 110) if shown else "empty result"
    assert _outcome({"role": "tool", "content": text}) == expected
