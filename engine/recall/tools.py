"""The memory-provider tools recall exposes. Handlers take `Recall`, the parsed arguments and
the slot's context (`session_id`, `user_id`, `profile`), and return JSON-ready dicts; errors are
raised as ChronicleError and turned into {"error": ...} by `tools.dispatch`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from ..tools import ToolSpec
from .recall import Recall

__all__ = ["RECALL_TOOLS"]


def _who(context: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "session_id": context.get("session_id") or None,
        "user_id": context.get("user_id"),
        "profile": context.get("profile"),
    }


def _text(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"'{name}' is required and must be non-empty text")
    return value


def _search(recall: Recall, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    query = _text(args, "query")
    scope = str(args.get("scope") or "all")
    limit = args.get("limit")
    try:
        limit = int(limit) if limit is not None else None
    except (TypeError, ValueError):
        raise UsageError("'limit' must be a whole number") from None
    results = recall.search(query, scope=scope, limit=limit, **_who(context))
    return {"query": query, "scope": scope, "count": len(results), "results": results}


def _remember(recall: Recall, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    return recall.remember(_text(args, "text"), **_who(context))


def _forget(recall: Recall, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    return recall.forget(
        _text(args, "id"),
        include_source=bool(args.get("include_source", False)),
        reason=str(args.get("reason") or ""),
        **_who(context),
    )


def _correct(recall: Recall, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    return recall.correct(_text(args, "id"), _text(args, "text"), **_who(context))


def _answer(recall: Recall, args: dict[str, Any], **context: Any) -> dict[str, Any]:
    return recall.answer(_text(args, "question"), **_who(context))


RECALL_TOOLS: tuple[ToolSpec[Recall], ...] = (
    ToolSpec(
        "chronicle_search",
        "Search long-term memory (earlier messages of every session, remembered facts and "
        "preferences, compacted sections) by words. Each result has an id, its seq, session and "
        "time; pass a section's seq range to chronicle_expand for the original messages.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "scope": {
                    "type": "string",
                    "enum": ["all", "session", "messages", "beliefs", "sections"],
                    "description": "all (default), session (this conversation only), or one kind.",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            "required": ["query"],
        },
        _search,
    ),
    ToolSpec(
        "chronicle_answer",
        "Answer a question from memory. Returns the sentence memory holds with its citations, "
        "or abstain: true when the evidence is too weak (then do not guess).",
        {
            "type": "object",
            "properties": {"question": {"type": "string"}},
            "required": ["question"],
        },
        _answer,
    ),
    ToolSpec(
        "chronicle_remember",
        "Keep a note in long-term memory (a fact, decision or preference worth recalling later).",
        {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The note, self-contained."}},
            "required": ["text"],
        },
        _remember,
    ),
    ToolSpec(
        "chronicle_correct",
        "Correct what memory holds: the item (an id from chronicle_search) is superseded by the "
        "corrected text; the original stays in the log.",
        {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "m<seq>, b<seq>.<n> or s:<chronicle>/<id>"},
                "text": {"type": "string", "description": "What is true instead."},
            },
            "required": ["id", "text"],
        },
        _correct,
    ),
    ToolSpec(
        "chronicle_forget",
        "Hide an item (an id from chronicle_search) from search, per-turn recall and answers. "
        "With include_source, a belief's source messages are hidden too.",
        {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "include_source": {"type": "boolean", "default": False},
                "reason": {"type": "string"},
            },
            "required": ["id"],
        },
        _forget,
    ),
)
