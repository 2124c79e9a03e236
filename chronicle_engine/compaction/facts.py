"""What the planner knows about each message of the host's list (`MessageFacts`), read once per
pass: its size, its role, whether a cited section covers it, whether it is pinned, a handoff, a
person's request or a standing instruction, and which tool calls it makes or answers."""

from __future__ import annotations

from collections.abc import Sequence

from ..capture.events import HANDOFF_OPENING
from ..messages import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    content_text,
    estimate_tokens,
    handoff_kind,
    is_real_user,
    states_a_rule,
    tool_call_ids,
)
from .planner import MessageFacts, tuple_new

__all__ = ["message_facts"]


def message_facts(
    messages: Sequence[object],
    seqs: Sequence[int | None],
    *,
    through: int,
    pins: Sequence[tuple[int, int]] = (),
    covered: Sequence[tuple[int, int]] | None = None,
) -> list[MessageFacts]:
    """What the planner needs to know about each message. `seqs` are capture's answer (None:
    not conversation); `through` is how far sections already cover the log, `covered` the seq
    ranges of the sections the handoff cites (default: all of 1..through).

    A message is folded only when a cited section covers it. One at or below `through` that no
    cited section covers can never be covered (new sections start after `through`), so it is
    protected: nothing leaves the context uncovered."""
    ranges = [(1, through)] if covered is None else list(covered)

    def inside(seq: int) -> bool:
        return any(lo <= seq <= hi for lo, hi in ranges)

    out: list[MessageFacts] = []
    append = out.append
    for message, seq in zip(messages, seqs, strict=True):
        if type(message) is not dict and not isinstance(message, dict):
            append(MessageFacts(tokens=estimate_tokens(message), role="", protected=True))
            continue
        role = message.get("role")
        if type(role) is not str:
            role = str(role or "")
        content = message.get("content")
        calls = message.get("tool_calls")
        # Most messages: `estimate_tokens`' plain-text case, and no handoff (which opens with
        # its marker, after whitespace at most), answered here rather than by a call each.
        if calls is None and type(content) is str:
            tokens = (len(content) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + MESSAGE_OVERHEAD
        else:
            tokens = estimate_tokens(message)
        if role == "tool":  # (no handoff, request or instruction, and no calls of its own)
            result_id = message.get("tool_call_id")
            own = real_user = instruction = False
            kind = None
        else:
            result_id = None
            # Only user and assistant messages can be handoffs, requests or instructions.
            kind = None
            if role == "user" or role == "assistant":
                opening = content[:1] if isinstance(content, str) else None
                if opening is None or opening == HANDOFF_OPENING or opening.isspace():
                    kind = handoff_kind(message)
            own = kind == "own"
            real_user = role == "user" and is_real_user(message)
            # (is_standing_instruction, without asking is_real_user again). An instruction is
            # not kept in place (its tool traffic would stay with it): once folded, the handoff
            # carries it (`instructions`).
            instruction = real_user and seq is not None and states_a_rule(content_text(message))
        if seq is None:
            pinned = folded = stranded = False
            held = not own
        else:
            pinned = bool(pins) and any(lo <= seq <= hi for lo, hi in pins)
            folded = seq <= through and inside(seq)
            stranded = seq <= through and not folded
            held = stranded or kind == "foreign"
        append(
            tuple_new(
                MessageFacts,
                (
                    tokens,
                    role,
                    folded,
                    own,  # handoff
                    pinned or held,  # protected
                    real_user,
                    tool_call_ids(message) if role == "assistant" and calls else (),  # call_ids
                    None if result_id is None else str(result_id),  # result_id
                    pinned and not held,  # pinned
                    instruction,
                ),
            )
        )
    return out
