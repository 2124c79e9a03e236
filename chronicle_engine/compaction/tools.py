"""The context engine's tools: expand any section back to its messages, pin, edit the
context, focus, status.

Each tool's arguments are a model (its JSON schema is generated from it). Handlers get the
engine's `Compaction` and the slot's context: `session_id` (the engine's current session; everything follows its lineage), `messages`
(the live list, for pins by text) and `policy` (for status).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from ..errors import UsageError
from ..messages import content_text
from ..tools import Name, Seq, Text, ToolArgs, ToolSpec, Words
from .policy import RESTORE_MAX_TOKENS, Policy

if TYPE_CHECKING:  # the engine is built on the first compaction, not when tools are listed
    from .engine import Compaction

__all__ = ["CONTEXT_TOOLS"]


def _session(context: Mapping[str, object]) -> str:
    session_id = context.get("session_id")
    if not session_id:
        raise UsageError(
            "no session is active yet; this tool works once the conversation has started"
        )
    return str(session_id)


class ExpandArgs(ToolArgs):
    blank_is_absent = frozenset(
        {"section_id", "from_seq", "to_seq", "page", "page_size", "max_tokens", "continue_from"}
    )

    section_id: Name | None = Field(None, description="A section id from the handoff.")
    from_seq: Seq | None = Field(None, description="First log position of a range.")
    to_seq: Seq | None = Field(None, description="Last log position of a range.")
    max_tokens: Annotated[int, Field(ge=100, le=RESTORE_MAX_TOKENS)] | None = Field(
        None, description="How many tokens of messages to return at most (default: what fits)."
    )
    continue_from: Seq | None = Field(
        None, description="Carry on from this log position (the 'next' of the last call)."
    )
    page: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        None, description="Older paging: page number, from 1 (instead of max_tokens)."
    )
    page_size: Annotated[int, Field(ge=1, le=200)] | None = Field(
        None, description="Older paging: messages per page (max 200)."
    )


class PinArgs(ToolArgs):
    blank_is_absent = frozenset({"from_seq", "to_seq"})

    text: Words = Field("", description="A phrase from the message to keep.")
    from_seq: Seq | None = None
    to_seq: Seq | None = None
    note: Words = Field("", description="Why it matters (shown in status).")
    unpin: bool = False


class EditArgs(ToolArgs):
    blank_is_absent = frozenset({"seq"})

    seq: Seq | None = Field(None, description="The log position of the message to edit.")
    text: Words = Field("", description="Or a phrase from it (the most recent match).")
    replacement: Text = Field("", description="The words the context holds instead.")
    hide: bool = Field(False, description="Hide the message's words instead of replacing them.")


class FocusArgs(ToolArgs):
    topic: Words


class StatusArgs(ToolArgs):
    pass


def _expand(compaction: Compaction, args: ExpandArgs, /, **context: object) -> Mapping[str, object]:
    budget = args.max_tokens
    policy = context.get("policy")
    if budget is None and isinstance(policy, Policy):
        # Half the room a pass leaves under the threshold: the rest of the turn still fits.
        budget = max(1_000, (policy.high_tokens - policy.low_tokens) // 2)
    return compaction.expand(
        _session(context),
        section_id=args.section_id.strip() if args.section_id else None,
        from_seq=args.from_seq,
        to_seq=args.to_seq,
        page=args.page,
        page_size=args.page_size,
        max_tokens=budget,
        continue_from=args.continue_from,
    )


def _latest_with(messages: list[object], text: str) -> int:
    """The index of the latest live message containing `text`."""
    needle = text.casefold()
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, dict) and needle in content_text(message).casefold():
            return i
    raise UsageError(f"no message in the current context contains {text!r}")


def _pin(compaction: Compaction, args: PinArgs, /, **context: object) -> Mapping[str, object]:
    session_id = _session(context)
    lo, hi = args.from_seq, args.to_seq
    text = args.text.strip()
    if lo is None and text:
        live = context.get("messages") or []
        messages: list[object] = list(live) if isinstance(live, Iterable) else []
        index = _latest_with(messages, text)
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


def _edit(compaction: Compaction, args: EditArgs, /, **context: object) -> Mapping[str, object]:
    """The edit is recorded in the session tree and made to the host's live list in place (the
    same dict, its private keys kept), so what the model is sent and the tree's projection stay
    the same list."""
    session_id = _session(context)
    if not args.hide and not args.replacement.strip():
        raise UsageError("give the replacement words, or hide=true to hide the message")
    live = context.get("messages")
    messages: list[object] = live if isinstance(live, list) else []
    seqs = compaction.capture.capture_messages(session_id, messages)
    if args.seq is not None:
        index = next((i for i, s in enumerate(seqs) if s == args.seq), None)
        if index is None:
            raise UsageError(
                f"seq {args.seq} is not in the current context; only a message the model holds "
                "can be edited (an earlier one is already folded into a section)"
            )
    elif args.text.strip():
        index = _latest_with(messages, args.text.strip())
    else:
        raise UsageError("give seq (a message's log position) or text (a phrase from it)")
    seq = seqs[index]
    target = messages[index]
    if seq is None or not isinstance(target, dict):
        raise UsageError("that message is not part of the conversation log and cannot be edited")
    if index == len(messages) - 1 or target is messages[-1]:
        raise UsageError("the latest message is what the model is answering; it cannot be edited")
    replacement = compaction.edit_context(session_id, seq, None if args.hide else args.replacement)
    for key in [k for k in target if not str(k).startswith("_")]:
        del target[key]
    target.update(replacement)
    return {
        "edited": seq,
        "hidden": args.hide,
        "effect": "the context holds the edited message from now on; "
        f"chronicle_expand(from_seq={seq}, to_seq={seq}) returns the original",
    }


def _focus(compaction: Compaction, args: FocusArgs, /, **context: object) -> Mapping[str, object]:
    topic = args.topic.strip()
    compaction.set_focus(_session(context), topic)
    return {
        "focus": topic or None,
        "effect": "later compactions keep this topic in full" if topic else "focus cleared",
    }


def _status(compaction: Compaction, args: StatusArgs, /, **context: object) -> Mapping[str, object]:
    policy = context.get("policy")
    return compaction.status(_session(context), policy if isinstance(policy, Policy) else None)


CONTEXT_TOOLS: tuple[ToolSpec[Compaction], ...] = (
    ToolSpec(
        "chronicle_expand",
        "Get back the original messages that a compaction folded away, byte for byte. Pass the "
        "section_id the compaction handoff cites (e.g. '12-31' or 'L2:1-90'), or a from_seq/to_seq "
        "range of the log. One call returns as much as fits max_tokens (by default what the "
        "context has room for); while 'next' is present, call again with its continue_from for "
        "the rest ('rest' says how much is left).",
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
        "chronicle_edit_context",
        "Hide or replace a message in your own context from now on (a stale tool dump, a wrong "
        "result), by its log position (seq) or a phrase from it. The original stays in the log: "
        "chronicle_expand returns it.",
        EditArgs,
        _edit,
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
