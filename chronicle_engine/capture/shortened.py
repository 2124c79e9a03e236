"""Shortened copies: a kept message that compaction cut to fit the context.

Invariant: a shortened copy is not conversation of its own; it stands for the logged message whose
seq its note names. Its content is the original's first characters followed by `note(...)` (or
its tool-call arguments are replaced by `arguments_note(...)`), so `origin` reads the seq back and
`stands_for` checks the copy against the logged original. Capture gives such a copy its
original's fingerprint: the next pass finds it on the branch instead of recording it again.

The wording lives here, below compaction and capture both, so the one that writes the note and
the one that reads it cannot drift apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

__all__ = [
    "ARGUMENTS_KEY",
    "note",
    "arguments_note",
    "edited_note",
    "strip_note",
    "origin",
    "stands_for",
]

ARGUMENTS_KEY = "chronicle_shortened"
"""The key of the JSON object that replaces a call's cut arguments."""

_LEAD = "\n[… shortened by Chronicle to fit the context: "
_END = "returns the original]"
_NOTE = re.compile(
    r"\n\[… shortened by Chronicle to fit the context: [^\n\]]*; "
    r"chronicle_expand\(from_seq=(\d+), to_seq=\1\) returns the original\]\Z"
)
_ARGUMENTS = re.compile(r"chronicle_expand\(from_seq=(\d+), to_seq=\1\) returns the original\Z")
# A context edit (the agent hid or replaced a message it holds) ends the same way, and stands for
# its original as a cut copy does, whatever text replaced the original's.
_EDITED = re.compile(
    r"\n?\[… edited in context: [^\n\]]*; "
    r"chronicle_expand\(from_seq=(\d+), to_seq=\1\) returns the original\]\Z"
)


def _restore(seq: int | None) -> str:
    if seq is None:
        return "this message is not in the log, so the cut part cannot be restored"
    return f"chronicle_expand(from_seq={seq}, to_seq={seq}) returns the original"


def note(what: str, seq: int | None) -> str:
    """What ends a cut content: what was omitted and how to get it back."""
    return f"{_LEAD}{what} omitted; {_restore(seq)}]"


def edited_note(what: str, seq: int, *, alone: bool = False) -> str:
    """What ends a message's content the agent edited in context (`alone`: nothing before it)."""
    return f"{'' if alone else chr(10)}[… edited in context: {what}; {_restore(seq)}]"


def arguments_note(raw: str, keep: int, seq: int | None) -> str:
    """The arguments that stand for a call's cut arguments (a JSON object, as arguments are)."""
    return json.dumps(
        {
            ARGUMENTS_KEY: f"{len(raw)} characters of arguments omitted; {_restore(seq)}",
            "start": raw[:keep],
        },
        ensure_ascii=False,
    )


def strip_note(text: str) -> str:
    """`text` without a trailing note (a copy cut again keeps only the original's words)."""
    if not text.endswith(_END):
        return text
    at = text.rfind(_LEAD)
    return text[:at] if at >= 0 else text


def _arguments_origin(message: Mapping[str, object]) -> int | None:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return None
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        raw = fn.get("arguments") if isinstance(fn, dict) else None
        if not isinstance(raw, str) or ARGUMENTS_KEY not in raw:
            continue
        try:
            said = json.loads(raw).get(ARGUMENTS_KEY)
        except (ValueError, AttributeError):
            continue
        found = _ARGUMENTS.search(said) if isinstance(said, str) else None
        if found is not None:
            return int(found.group(1))
    return None


def origin(message: object) -> int | None:
    """The seq of the logged message `message` is a shortened copy of, or None."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str) and content.endswith(_END):
        found = _NOTE.search(content) or _EDITED.search(content)
        if found is not None:
            return int(found.group(1))
    return _arguments_origin(message)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else str(content)


def _call_ids(message: Mapping[str, object]) -> list[object]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [c.get("id") if isinstance(c, dict) else None for c in calls]


def stands_for(copy: object, original: object) -> bool:
    """Whether `copy` is `original` cut by compaction: same role, call and result ids, and its
    content is the original's (or the original's first characters, then the note)."""
    if not isinstance(copy, dict) or not isinstance(original, dict):
        return False
    for key in ("role", "tool_call_id"):  # (not `name`: Hermes drops it on a reload)
        if copy.get(key) != original.get(key):
            return False
    if _call_ids(copy) != _call_ids(original):
        return False
    if copy.get("content") == original.get("content"):
        return True
    if isinstance(copy.get("content"), str) and _EDITED.search(copy["content"]):
        return True
    kept = strip_note(_text(copy.get("content")))
    return kept != _text(copy.get("content")) and _text(original.get("content")).startswith(kept)
