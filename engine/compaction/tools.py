"""The context engine's tools: expand any section back to its messages, pin, focus, status.

Handlers get the engine's `Compaction` and the slot's context: `session_id` (the engine's current session; everything follows
its lineage), `messages` (the live list, for pins by text) and `policy` (for status).
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ..tools import ToolSpec
from .engine import Compaction
from .messages import content_text

__all__ = ["CONTEXT_TOOLS"]


def _session(context: dict[str, Any]) -> str:
    session_id = context.get("session_id")
    if not session_id:
        raise UsageError(
            "no session is active yet; this tool works once the conversation has started"
        )
    return str(session_id)


def _int(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{key} must be a whole number, got {value!r}") from None


def _expand(compaction: Compaction, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    return compaction.expand(
        _session(context),
        section_id=(str(args["section_id"]).strip() if args.get("section_id") else None),
        from_seq=_int(args, "from_seq"),
        to_seq=_int(args, "to_seq"),
        page=_int(args, "page") or 1,
        page_size=_int(args, "page_size") or 20,
    )


def _pin(compaction: Compaction, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    session_id = _session(context)
    lo, hi = _int(args, "from_seq"), _int(args, "to_seq")
    text = str(args.get("text") or "").strip()
    if lo is None and text:
        messages = list(context.get("messages") or [])
        needle = text.casefold()
        index = next(
            (
                i
                for i in range(len(messages) - 1, -1, -1)
                if isinstance(messages[i], dict) and needle in content_text(messages[i]).casefold()
            ),
            None,
        )
        if index is None:
            raise UsageError(f"no message in the current context contains {text!r}")
        seqs = compaction.capture.capture_messages(session_id, messages)
        lo = seqs[index]
        if lo is None:
            raise UsageError(
                "that message is not part of the conversation log and cannot be pinned"
            )
    if lo is None:
        raise UsageError("give text (a phrase from the message to keep) or from_seq/to_seq")
    hi = hi if hi is not None else lo
    if args.get("unpin"):
        compaction.unpin(session_id, lo, hi)
        return {"unpinned": {"from_seq": lo, "to_seq": hi}}
    compaction.pin(session_id, lo, hi, str(args.get("note") or ""))
    return {
        "pinned": {"from_seq": lo, "to_seq": hi},
        "effect": "these messages stay verbatim through every later compaction",
    }


def _focus(compaction: Compaction, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    topic = str(args.get("topic") or "").strip()
    compaction.set_focus(_session(context), topic)
    return {
        "focus": topic or None,
        "effect": "later compactions keep this topic in full" if topic else "focus cleared",
    }


def _status(compaction: Compaction, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    return compaction.status(_session(context), context.get("policy"))


CONTEXT_TOOLS: tuple[ToolSpec[Compaction], ...] = (
    ToolSpec(
        "chronicle_expand",
        "Get back the original messages that a compaction folded away, byte for byte. Pass the "
        "section_id the compaction handoff cites (e.g. '12-31' or 'L2:1-90'), or a from_seq/to_seq "
        "range of the log. Results are paged; ask for the next page while 'next' is present.",
        {
            "type": "object",
            "properties": {
                "section_id": {"type": "string", "description": "A section id from the handoff."},
                "from_seq": {"type": "integer", "description": "First log position of a range."},
                "to_seq": {"type": "integer", "description": "Last log position of a range."},
                "page": {"type": "integer", "description": "Page number, from 1.", "minimum": 1},
                "page_size": {
                    "type": "integer",
                    "description": "Messages per page (max 200).",
                    "minimum": 1,
                },
            },
        },
        _expand,
    ),
    ToolSpec(
        "chronicle_pin_context",
        "Keep a message verbatim in context through every later compaction. Identify it by a "
        "phrase it contains (the most recent match is pinned) or by its log position "
        "(from_seq/to_seq). unpin=true releases a pin.",
        {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "A phrase from the message to keep."},
                "from_seq": {"type": "integer"},
                "to_seq": {"type": "integer"},
                "note": {"type": "string", "description": "Why it matters (shown in status)."},
                "unpin": {"type": "boolean"},
            },
        },
        _pin,
    ),
    ToolSpec(
        "chronicle_focus",
        "Set the topic that later compactions must keep in full (exact values, paths, errors, "
        "decisions); an empty topic clears it.",
        {
            "type": "object",
            "properties": {"topic": {"type": "string"}},
            "required": ["topic"],
        },
        _focus,
    ),
    ToolSpec(
        "chronicle_context_status",
        "Show the compaction policy in force, how many compactions this conversation has had, "
        "what the handoff carries (section ids and ranges), tokens saved, pins and focus.",
        {"type": "object", "properties": {}},
        _status,
    ),
)
