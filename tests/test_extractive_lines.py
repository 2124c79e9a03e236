"""The extractive summariser's lines, against their definitions: a line is the text with each
run of whitespace one space, cut to its cap; a tool result without an error is shown by its
first line that holds text (`str.splitlines`' line breaks, all of them); the prose is the same
whether every line is drawn or only those the budget can keep."""

from __future__ import annotations

from functools import partial

from hypothesis import given
from hypothesis import strategies as st

from chronicle_engine.chronicle.extractive import (
    _RANK_FRAME,
    _drawn,
    _fit,
    _Later,
    _Line,
    _line,
    _one_line,
    _outcome,
)

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


# A line: (rank, its text, focused, the cap of its shorter form, drawn later at most at this rank
# or None: drawn at once).
_Spec = tuple[int, str, bool, int | None, int | None]
_SPEC = st.tuples(
    st.sampled_from([0, 1, 2, 3]),
    st.text(alphabet="ab .", max_size=500),
    st.booleans(),
    st.sampled_from([None, 140, 220]),
    st.sampled_from([None, 0, 1, 2, 3]),
)


def _drawing(rank: int, text: str, compact: int | None) -> tuple[int, str, int | None]:
    return rank, text, compact


def _items(specs: list[_Spec], focus: str = "") -> list[_Line | _Later]:
    items: list[_Line | _Later] = [_Line(_RANK_FRAME, f"Focus: {focus}", -1)] if focus else []
    for order, (rank, text, focused, compact, most) in enumerate(specs):
        if most is None or most < rank:
            items.append(_line(rank, text, order, focused, compact))
        else:
            items.append(_Later(most, order, focused, partial(_drawing, rank, text, compact)))
    items.append(_Line(5, "Facts: " + "x" * (len(specs) % 40), len(items)))
    return items


@given(
    st.lists(_SPEC, max_size=40),
    st.integers(min_value=1, max_value=6000),
    st.one_of(st.just(""), st.text(alphabet="ab ", min_size=1, max_size=300)),
)
def test_lines_the_budget_cannot_keep_need_not_be_drawn(
    specs: list[_Spec], budget: int, focus: str
) -> None:
    """With or without the focus line summarize_messages puts first (rank above the facts)."""
    every = [x.line() if isinstance(x, _Later) else x for x in _items(specs, focus)]
    kept, omitted = _drawn(_items(specs, focus), budget)
    assert _fit(kept, budget, "expand", omitted) == _fit(every, budget, "expand")


def test_a_focus_longer_than_the_budget_keeps_the_facts_and_counts_only_what_it_drops() -> None:
    items = _items([(0, "one reply", False, None, None)], focus="a" * 50)
    every = [x.line() if isinstance(x, _Later) else x for x in items]
    kept, omitted = _drawn(items, 10)
    assert any(line.text.startswith("Facts:") for line in kept)
    assert _fit(kept, 10, "expand", omitted) == _fit(every, 10, "expand")
