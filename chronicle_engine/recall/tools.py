"""The memory-provider tools recall exposes. Each tool's arguments are a model (its JSON schema is
generated from it); handlers take `Recall`, the validated arguments and the slot's context
(`session_id`, `user_id`, `profile`), and return JSON-ready dicts; errors are raised as
ChronicleError and turned into {"error": ...} by `tools.dispatch`."""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
from collections.abc import Mapping
from typing import Annotated, Literal, TypedDict

from pydantic import Field

from ..tools import Name, NonBlank, Text, ToolArgs, ToolSpec, Words
from .recall import Recall

__all__ = ["RECALL_TOOLS"]


class _Who(TypedDict):
    session_id: str | None
    user_id: str | None
    profile: str | None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _who(context: Mapping[str, object]) -> _Who:
    """Who the call acts for, from the slot's context (its values are text or absent)."""
    return _Who(
        session_id=_text(context.get("session_id")) or None,
        user_id=_text(context.get("user_id")),
        profile=_text(context.get("profile")),
    )


class SearchArgs(ToolArgs):
    query: Annotated[Words, NonBlank] = Field(description="What to look for, in plain words.")
    scope: Literal["all", "session", "messages", "beliefs", "sections"] = Field(
        "all", description="all (default), session (this conversation only), or one kind."
    )
    limit: Annotated[int, Field(ge=1, le=100)] | None = None
    session: Annotated[Name, NonBlank] | None = Field(
        None, description="A session id from a result: that session's best turns."
    )
    by_session: bool = Field(
        False,
        description="One result per session (its best match), the sessions holding the most "
        "evidence first: for questions whose answer is spread over several conversations.",
    )


class AnswerArgs(ToolArgs):
    question: Annotated[Words, NonBlank]


class RememberArgs(ToolArgs):
    text: Annotated[Text, NonBlank] = Field(description="The note, self-contained.")


class CorrectArgs(ToolArgs):
    id: Annotated[Name, NonBlank] = Field(description="m<seq>, b<seq>.<n> or s:<chronicle>/<id>")
    text: Annotated[Text, NonBlank] = Field(description="What is true instead.")


class ForgetArgs(ToolArgs):
    id: Annotated[Name, NonBlank]
    include_source: bool = False
    reason: Words = ""


def _search(recall: Recall, args: SearchArgs, /, **context: object) -> Mapping[str, object]:
    results = recall.search(
        args.query,
        scope=args.scope,
        limit=args.limit,
        in_session=args.session,
        by_session=args.by_session,
        **_who(context),
    )
    return {"query": args.query, "scope": args.scope, "count": len(results), "results": results}


def _remember(recall: Recall, args: RememberArgs, /, **context: object) -> Mapping[str, object]:
    return recall.remember(args.text, **_who(context))


def _forget(recall: Recall, args: ForgetArgs, /, **context: object) -> Mapping[str, object]:
    return recall.forget(
        args.id, include_source=args.include_source, reason=args.reason, **_who(context)
    )


def _correct(recall: Recall, args: CorrectArgs, /, **context: object) -> Mapping[str, object]:
    return recall.correct(args.id, args.text, **_who(context))


def _answer(recall: Recall, args: AnswerArgs, /, **context: object) -> Mapping[str, object]:
    return recall.answer(args.question, **_who(context))


RECALL_TOOLS: tuple[ToolSpec[Recall], ...] = (
    ToolSpec(
        "chronicle_search",
        "Search long-term memory (earlier messages of every session, remembered facts and "
        "preferences, compacted sections) by words. Each result has an id, its seq, session and "
        "time (when it was said); results cover several sessions. Pass a result's session to get "
        "that session's best turns, or by_session for one result per session; pass a section's "
        "seq range to chronicle_expand for the original messages.",
        SearchArgs,
        _search,
    ),
    ToolSpec(
        "chronicle_answer",
        "Answer a question from memory. Returns the sentence memory holds with its citations, "
        "or abstain: true when the evidence is too weak (then do not guess).",
        AnswerArgs,
        _answer,
    ),
    ToolSpec(
        "chronicle_remember",
        "Keep a note in long-term memory (a fact, decision or preference worth recalling later).",
        RememberArgs,
        _remember,
    ),
    ToolSpec(
        "chronicle_correct",
        "Correct what memory holds: the item (an id from chronicle_search) is superseded by the "
        "corrected text; the original stays in the log.",
        CorrectArgs,
        _correct,
    ),
    ToolSpec(
        "chronicle_forget",
        "Hide an item (an id from chronicle_search) from search, per-turn recall and answers. "
        "With include_source, a belief's source messages are hidden too.",
        ForgetArgs,
        _forget,
    ),
)
