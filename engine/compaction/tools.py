"""The context engine's tools: expand any section back to its messages, pin, focus, status.

Each tool's arguments are a model (its JSON schema is generated from it). Handlers get the
engine's `Compaction` and the slot's context: `session_id` (the engine's current session; everything follows its lineage), `messages`
(the live list, for pins by text) and `policy` (for status).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from ..errors import UsageError
from ..messages import content_text
from ..tools import Name, Seq, ToolArgs, ToolSpec, Words

if TYPE_CHECKING:  # the engine is built on the first compaction, not when tools are listed
    from .engine import Compaction

__all__ = ["CONTEXT_TOOLS"]


def _session(context: dict[str, Any]) -> str:
    session_id = context.get("session_id")
    if not session_id:
        raise UsageError(
            "no session is active yet; this tool works once the conversation has started"
        )
    return str(session_id)


class ExpandArgs(ToolArgs):
    blank_is_absent = frozenset({"section_id", "from_seq", "to_seq", "page", "page_size"})

    section_id: Name | None = Field(None, description="A section id from the handoff.")
    from_seq: Seq | None = Field(None, description="First log position of a range.")
    to_seq: Seq | None = Field(None, description="Last log position of a range.")
    page: Annotated[int, Field(ge=1, le=1_000_000)] = Field(1, description="Page number, from 1.")
    page_size: Annotated[int, Field(ge=1, le=200)] = Field(
        20, description="Messages per page (max 200)."
    )


class PinArgs(ToolArgs):
    blank_is_absent = frozenset({"from_seq", "to_seq"})

    text: Words = Field("", description="A phrase from the message to keep.")
    from_seq: Seq | None = None
    to_seq: Seq | None = None
    note: Words = Field("", description="Why it matters (shown in status).")
    unpin: bool = False


class FocusArgs(ToolArgs):
    topic: Words


class StatusArgs(ToolArgs):
    pass


def _expand(compaction: Compaction, args: ExpandArgs, **context: Any) -> dict[str, Any]:
    return compaction.expand(
        _session(context),
        section_id=args.section_id.strip() if args.section_id else None,
        from_seq=args.from_seq,
        to_seq=args.to_seq,
        page=args.page,
        page_size=args.page_size,
    )


def _pin(compaction: Compaction, args: PinArgs, **context: Any) -> dict[str, Any]:
    session_id = _session(context)
    lo, hi = args.from_seq, args.to_seq
    text = args.text.strip()
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
    if args.unpin:
        compaction.unpin(session_id, lo, hi)
        return {"unpinned": {"from_seq": lo, "to_seq": hi}}
    compaction.pin(session_id, lo, hi, args.note)
    return {
        "pinned": {"from_seq": lo, "to_seq": hi},
        "effect": "these messages stay verbatim through every later compaction",
    }


def _focus(compaction: Compaction, args: FocusArgs, **context: Any) -> dict[str, Any]:
    topic = args.topic.strip()
    compaction.set_focus(_session(context), topic)
    return {
        "focus": topic or None,
        "effect": "later compactions keep this topic in full" if topic else "focus cleared",
    }


def _status(compaction: Compaction, args: StatusArgs, **context: Any) -> dict[str, Any]:
    return compaction.status(_session(context), context.get("policy"))


CONTEXT_TOOLS: tuple[ToolSpec[Compaction], ...] = (
    ToolSpec(
        "chronicle_expand",
        "Get back the original messages that a compaction folded away, byte for byte. Pass the "
        "section_id the compaction handoff cites (e.g. '12-31' or 'L2:1-90'), or a from_seq/to_seq "
        "range of the log. Results are paged; ask for the next page while 'next' is present.",
        ExpandArgs,
        _expand,
    ),
    ToolSpec(
        "chronicle_pin_context",
        "Keep a message verbatim in context through every later compaction. Identify it by a "
        "phrase it contains (the most recent match is pinned) or by its log position "
        "(from_seq/to_seq). unpin=true releases a pin.",
        PinArgs,
        _pin,
    ),
    ToolSpec(
        "chronicle_focus",
        "Set the topic that later compactions must keep in full (exact values, paths, errors, "
        "decisions); an empty topic clears it.",
        FocusArgs,
        _focus,
    ),
    ToolSpec(
        "chronicle_context_status",
        "Show the compaction policy in force, how many compactions this conversation has had, "
        "what the handoff carries (section ids and ranges), tokens saved, pins and focus.",
        StatusArgs,
        _status,
    ),
)
