"""Building the compacted list from a plan: head, the handoff, then the verbatim rest. Pure.

Kept messages are copies of the input's (without `_db_persisted`). A message the plan shortens
loses its `api_content` (the bytes sent before no longer match) and ends with a note saying what
was cut and which `chronicle_expand` call returns the original.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..capture.shortened import ARGUMENTS_KEY, arguments_note, note, strip_note
from ..messages import MESSAGE_OVERHEAD, chars_for_tokens, content_text, fresh_copy
from .planner import Plan

__all__ = ["assemble", "shorten"]

_MIN_KEPT_CHARS = 120
_TOTAL = re.compile(r"(\d+) of (\d+) characters")


def _cut_content(text: str, full: str, room: int, has_parts: bool, seq: int | None) -> str:
    """The content cut to about `room` characters, note included. `text` is the original's words
    (a copy cut before keeps only those), `full` the content as it stands."""
    longest = note(f"{len(text)} of {len(text)} characters and attachments", seq)
    keep = text[: max(_MIN_KEPT_CHARS, room - len(longest))]
    total = len(text)
    if text != full:  # cut again: the earlier note knows the original's length
        found = _TOTAL.search(full[len(text) :])
        total = int(found.group(2)) if found else total
    omitted = total - len(keep)
    what = f"{omitted} of {total} characters" if omitted else ""
    if has_parts:
        what = f"{what} and attachments" if what else "attachments"
    return keep + note(what, seq)


def shorten(message: object, allowance: int, seq: int | None) -> tuple[object, bool]:
    """`message` cut to about `allowance` tokens, saying how to get the rest back, and whether
    anything had to be cut (a message already that short comes back as it was)."""
    if not isinstance(message, dict):
        return message, False
    copy = fresh_copy(message)
    changed = False
    budget = max(_MIN_KEPT_CHARS, chars_for_tokens(allowance - MESSAGE_OVERHEAD))
    full = content_text(message)
    content = message.get("content")
    has_parts = isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") not in (None, "text") for p in content
    )
    args_chars = sum(
        len(str((c.get("function") or {}).get("arguments") or ""))
        for c in (message.get("tool_calls") or [])
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    )
    room = max(_MIN_KEPT_CHARS, budget - min(args_chars, budget // 2))
    if len(full) > room or has_parts:
        copy["content"] = _cut_content(strip_note(full), full, room, has_parts, seq)
        changed = copy["content"] != content
    if args_chars > budget // 2 and isinstance(message.get("tool_calls"), list):
        calls = []
        for call in message["tool_calls"]:
            if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                calls.append(call)
                continue
            fn = dict(call["function"])
            raw = str(fn.get("arguments") or "")
            if len(raw) > _MIN_KEPT_CHARS and ARGUMENTS_KEY not in raw:  # (not cut twice)
                fn["arguments"] = arguments_note(raw, _MIN_KEPT_CHARS, seq)
                changed = True
            calls.append({**call, "function": fn})
        copy["tool_calls"] = calls
    if changed:
        copy.pop("api_content", None)
        return copy, True
    return fresh_copy(message), False


def assemble(
    messages: Sequence[object],
    plan: Plan,
    handoff: Mapping[str, object],
    seqs: Sequence[int | None],
) -> tuple[list[object], list[int]]:
    """The compacted list, and the output positions of the messages whose content was rewritten
    (the handoff counts as new, not rewritten)."""
    out: list[object] = []
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
