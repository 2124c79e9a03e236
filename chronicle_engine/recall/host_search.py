"""Chronicle as the backend of Hermes' own `session_search` tool.

Hermes 0.19.0 answers `session_search` itself, from its state database (an FTS index over the
messages it saved, demoting nothing but cron rows), and gives plugins no provider slot for it.
It does let a plugin wrap any tool's execution (`ctx.register_middleware("tool_execution", ...)`,
`hermes_cli.middleware`). Chronicle uses that for the discovery shape only: a call with a query
and no session id is answered from Chronicle's memory (ranked turns grouped by session, with
their times and ids); every other shape (reading or scrolling a session, browsing recent ones,
another profile) goes on to Hermes, as does a query Chronicle cannot answer.

Invariants:
- Never raises into the host and never loses the host's answer: any failure, an empty result or
  no open Chronicle store for this Hermes home means `next_call(args)`, the built-in search.
- Reads only the memory of the user the calling session belongs to (recall's scoping).
- The session ids returned are Hermes' own (capture keys sessions by them), so the model's
  follow-up `session_search(session_id=...)` reads the session from Hermes' database.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # search loads on the first session_search, not when the middleware registers
    from .recall import Recall
    from .search import Hit

__all__ = ["Middleware", "session_search_middleware", "serve_session_search"]

log = logging.getLogger("chronicle_engine.recall")

_warned: set[str] = set()


def serve_session_search(recall: Recall, args: Mapping[str, object], session_id: str) -> str | None:
    """The discovery answer from Chronicle's memory as session_search's JSON, or None when the
    call is not a discovery or Chronicle has nothing for it."""
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return None
    if args.get("session_id") or args.get("profile") or args.get("around_message_id"):
        return None
    limit = args.get("limit")
    try:
        sessions = max(1, min(int(limit), 10)) if isinstance(limit, int | float | str) else 3
    except ValueError:
        sessions = 3
    hits = recall.index.hits(
        query.strip(), session_id=session_id or None, scope="messages", limit=max(10, sessions * 3)
    )
    grouped: dict[str, list[Hit]] = {}
    for hit in hits:
        if hit.session and (hit.session in grouped or len(grouped) < sessions):
            grouped.setdefault(hit.session, []).append(hit)
    if not grouped:
        return None
    results = [
        {
            "session_id": sid,
            "when": found[0].time,
            "messages": [
                {
                    "id": hit.id,
                    "role": hit.extra.get("role", ""),
                    "time": hit.time,
                    "content": hit.text,
                }
                for hit in found
            ],
        }
        for sid, found in grouped.items()
    ]
    return json.dumps(
        {
            "success": True,
            "mode": "discover",
            "query": query,
            "source": "chronicle",
            "results": results,
            "count": len(results),
            "note": "Ranked by Chronicle's memory. session_search(session_id=...) reads a whole "
            "session; chronicle_search with a session gives its best turns for a query.",
        },
        ensure_ascii=False,
    )


class Middleware(Protocol):
    """Hermes' tool-execution middleware callback (hermes_cli.middleware), keywords only."""

    def __call__(
        self,
        *,
        tool_name: str = "",
        args: object = None,
        next_call: Callable[[object], object],
        session_id: str = "",
        **rest: object,
    ) -> object: ...


def session_search_middleware(find_recall: Callable[[], Recall | None]) -> Middleware:
    """Hermes' tool-execution middleware: serve session_search's discovery shape from the
    memory `find_recall()` returns (None: no store open, let Hermes answer), pass everything
    else on unchanged."""

    def serve(
        *,
        tool_name: str = "",
        args: object = None,
        next_call: Callable[[object], object],
        session_id: str = "",
        **rest: object,
    ) -> object:
        if tool_name != "session_search" or not isinstance(args, dict):
            return next_call(args)
        try:
            recall = find_recall()
            answer = serve_session_search(recall, args, session_id) if recall is not None else None
        except Exception as exc:  # the host's own search is always there to fall back on
            if type(exc).__name__ not in _warned:
                _warned.add(type(exc).__name__)
                log.warning("chronicle: session_search falls back to Hermes' own search (%s)", exc)
            answer = None
        return answer if answer is not None else next_call(args)

    serve.__name__ = "chronicle_session_search"
    return serve
