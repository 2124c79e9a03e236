"""Capture's side of compaction's rewrites: a shortened copy is its original, and a compacted
region (kept messages with folded ones left out between them) aligns with the branch."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chronicle_engine.capture import shortened
from chronicle_engine.capture.align import embed
from chronicle_engine.compaction.assemble import shorten


def test_a_cut_content_names_its_original_and_is_recognised() -> None:
    original = {"role": "user", "content": "deploy plan: " + "step " * 5_000, "api_content": "x"}
    copy, changed = shorten(original, 200, 41)
    assert changed and shortened.origin(copy) == 41
    assert shortened.stands_for(copy, {k: v for k, v in original.items() if k != "api_content"})
    # Cut again (a later pass with less room): still one note, the original's words only.
    again, changed = shorten(copy, 100, 41)
    assert changed and again["content"].count("shortened by Chronicle") == 1
    assert f"of {len(original['content'])} characters omitted" in again["content"]
    assert shortened.origin(again) == 41 and shortened.stands_for(again, original)


def test_cut_arguments_name_their_original() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "write", "arguments": json.dumps({"text": "z" * 9_000})},
    }
    original = {"role": "assistant", "content": "writing", "tool_calls": [call]}
    copy, changed = shorten(original, 100, 7)
    assert changed and shortened.origin(copy) == 7 and shortened.stands_for(copy, original)
    again, changed = shorten(copy, 100, 7)
    assert not changed and again == copy  # arguments are cut once


def test_a_message_that_only_quotes_a_note_is_not_a_copy() -> None:
    note = shortened.note("10 of 99 characters", 3)
    quoted = {"role": "user", "content": "what does this mean?" + note}
    assert shortened.origin(quoted) == 3
    original = {"role": "user", "content": "a different request entirely"}
    assert not shortened.stands_for(quoted, original)
    assert not shortened.stands_for({"role": "assistant", "content": "a" + note}, original)
    assert shortened.origin({"role": "user", "content": "plain"}) is None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from("abcdef"), min_size=1, max_size=40),
    st.data(),
)
def test_a_compacted_region_embeds_at_the_end_of_its_path(path: list[str], data: Any) -> None:
    # Keep a random subset of the path that ends with its last entry, then add new messages.
    keep = sorted(
        set(data.draw(st.lists(st.integers(0, len(path) - 1), max_size=len(path))))
        | {len(path) - 1}
    )
    region = [path[q] for q in keep]
    new = data.draw(st.lists(st.sampled_from("xyz"), max_size=3))
    found = embed(region + new, path)
    assert found is not None
    p, placed = found
    assert p == len(region) - 1
    assert placed[-1] == len(path) - 1 and placed == sorted(set(placed))
    assert [path[q] for q in placed] == region


def test_nothing_embeds_when_the_region_left_the_branch() -> None:
    assert embed(["a", "c", "q"], ["a", "b", "c", "d"]) is None  # the path's end is not there
    assert embed(["c", "a", "d"], ["a", "b", "c", "d"]) is None  # out of order
    assert embed(["a", "d"], ["a", "b", "c", "d"]) == (1, [0, 3])
