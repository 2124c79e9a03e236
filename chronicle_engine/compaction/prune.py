"""Old tool output trimmed without a model call (newer Hermes' `prune_tool_results_only`).

Invariants:
- Only tool results change, and only those after the head and before the last
  `protect_last_n` messages: the head and the recent tail stay byte-identical.
- A result is cut only when the log holds it (its seq is known), to its opening and a note
  saying how to get the rest back (`chronicle_expand(from_seq=N, to_seq=N)`); nothing is lost.
- The input list is never changed; a message that is already short comes back as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import estimate_tokens, is_own_handoff
from .assemble import shorten

__all__ = ["prune_tool_results", "PRUNED_RESULT_TOKENS"]

PRUNED_RESULT_TOKENS = 200
"""What an old tool result keeps: its first ~800 characters and the note."""


def _head_end(messages: Sequence[object], protect_first_n: int) -> int:
    handoff = next((i for i, m in enumerate(messages) if is_own_handoff(m)), None)
    if handoff is not None:
        return handoff + 1
    seen = end = 0
    while end < len(messages) and seen < protect_first_n:
        message = messages[end]
        if not (isinstance(message, dict) and message.get("role") == "system"):
            seen += 1
        end += 1
    # A call in the head keeps its results with it.
    while end < len(messages):
        following = messages[end]
        if not (isinstance(following, dict) and following.get("role") == "tool"):
            break
        end += 1
    return end


def prune_tool_results(
    messages: Sequence[object],
    seqs: Sequence[int | None],
    *,
    protect_first_n: int,
    protect_last_n: int,
    keep_tokens: int = PRUNED_RESULT_TOKENS,
) -> tuple[list[object], int]:
    """The list with old tool results shortened, and how many were."""
    out = list(messages)
    start = _head_end(messages, protect_first_n)
    stop = max(start, len(messages) - protect_last_n)
    pruned = 0
    for i in range(start, stop):
        message = messages[i]
        if not isinstance(message, dict) or message.get("role") != "tool" or seqs[i] is None:
            continue
        if estimate_tokens(message) <= keep_tokens:
            continue
        cut, changed = shorten(message, keep_tokens, seqs[i])
        if changed:
            out[i] = cut
            pruned += 1
    return out, pruned
