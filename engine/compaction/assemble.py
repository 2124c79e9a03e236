"""Building the compacted list from a plan: head, the handoff, then the verbatim rest. Pure.

Kept messages are copies of the input's (without `_db_persisted`). A message the plan shortens
loses its `api_content` (the bytes sent before no longer match) and ends with a note saying what
was cut and which `chronicle_expand` call returns the original.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .messages import content_text, fresh_copy
from .planner import Plan

__all__ = ["assemble", "shorten"]

_CHARS_PER_TOKEN = 4
_MIN_KEPT_CHARS = 120


def _restore(seq: int | None) -> str:
    if seq is None:
        return "this message is not in the log, so the cut part cannot be restored"
    return f"chronicle_expand(from_seq={seq}, to_seq={seq}) returns the original"


def shorten(message: Any, allowance: int, seq: int | None) -> tuple[Any, bool]:
    """`message` cut to about `allowance` tokens, saying how to get the rest back, and whether
    anything had to be cut (a message already that short comes back as it was)."""
    if not isinstance(message, dict):
        return message, False
    copy = fresh_copy(message)
    changed = False
    budget = max(_MIN_KEPT_CHARS, allowance * _CHARS_PER_TOKEN)
    text = content_text(message)
    content = message.get("content")
    has_parts = isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") not in (None, "text") for p in content
    )
    args_chars = sum(
        len(str((c.get("function") or {}).get("arguments") or ""))
        for c in (message.get("tool_calls") or [])
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    )
    text_budget = max(_MIN_KEPT_CHARS, budget - min(args_chars, budget // 2))
    if len(text) > text_budget or has_parts:
        omitted = max(0, len(text) - text_budget)
        keep = text[: len(text) - omitted]
        what = f"{omitted} of {len(text)} characters" if omitted else "attachments"
        copy["content"] = (
            f"{keep}\n[… shortened by Chronicle to fit the context: {what} omitted; {_restore(seq)}]"
        )
    if args_chars > budget // 2 and isinstance(message.get("tool_calls"), list):
        calls = []
        for call in message["tool_calls"]:
            if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                calls.append(call)
                continue
            fn = dict(call["function"])
            raw = str(fn.get("arguments") or "")
            if len(raw) > _MIN_KEPT_CHARS:
                fn["arguments"] = json.dumps(
                    {
                        "chronicle_shortened": f"{len(raw)} characters of arguments omitted; "
                        + _restore(seq),
                        "start": raw[:_MIN_KEPT_CHARS],
                    },
                    ensure_ascii=False,
                )
                changed = True
            calls.append({**call, "function": fn})
        copy["tool_calls"] = calls
    if changed:
        copy.pop("api_content", None)
        return copy, True
    return fresh_copy(message), False


def assemble(
    messages: Sequence[Any],
    plan: Plan,
    handoff: dict[str, Any],
    seqs: Sequence[int | None],
) -> tuple[list[Any], list[int]]:
    """The compacted list, and the output positions of the messages whose content was rewritten
    (the handoff counts as new, not rewritten)."""
    out: list[Any] = []
    rewritten: list[int] = []

    def put(index: int) -> None:
        allowance = plan.allowances.get(index)
        if allowance is None:
            out.append(fresh_copy(messages[index]))
        else:
            shortened, changed = shorten(messages[index], allowance, seqs[index])
            if changed:
                rewritten.append(len(out))
            out.append(shortened)

    for index in plan.head:
        put(index)
    out.append(handoff)
    for index in plan.keep:
        put(index)
    return out, rewritten
