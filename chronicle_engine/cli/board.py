"""What the Chronicle tab of Hermes' dashboard shows: plain JSON-able data over one core.

Invariant: every function here only reads (no append, no fold written, no setting changed);
`dashboard/api.py` routes to these and adds nothing but HTTP. Events are read decoded and
matched on their classes. The same questions the `chronicle` command answers (which session an
id names, the agent's own tool traffic, the maintenance summary) are asked through the same
functions, so the tab and the command never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..capture.events import NAMESPACE as CHAT
from ..capture.events import MessageCaptured
from ..sessions.events import NAMESPACE as SESSION
from ..sessions.events import BranchSummarized, CompactionRecorded, LeafMoved, SessionSwitched
from .inventory import chronicle_rows, resolve_session, session_rows

if TYPE_CHECKING:
    from ..core import ChronicleCore

__all__ = ["overview", "conversation", "expand", "search", "maintenance", "TIMELINE_LIMIT"]

TIMELINE_LIMIT = 600  # newest timeline entries returned for one conversation
_EXCERPT = 280
_CHARS_PER_TOKEN = 4  # the estimate between the host's own counts at each compaction

Json = dict[str, object]


def overview(core: ChronicleCore, hermes_home: Path | None = None) -> Json:
    """The database at a glance and its conversations (lineages), newest first. `db_shown` is
    the database's path as a person reads it: under `hermes_home`, relative to $HERMES_HOME."""
    rows = session_rows(core.store)
    current = {r["chronicle"]: r["current"] for r in chronicle_rows(core.store)}
    conversations: list[Json] = []
    placed: set[str] = set()
    for row in rows:
        if row["session"] in placed:
            continue
        lineage = list(core.sessions.lineage(row["session"]))
        placed.update(lineage)
        members = [r for r in rows if r["session"] in lineage]
        name = core.sessions.chronicle_name(lineage[-1])
        conversations.append(
            {
                "chronicle": name,
                "session": lineage[-1],
                "sessions": lineage,
                "events": sum(int(r["events"]) for r in members),
                "started": min(str(r["started"]) for r in members),
                "last_active": max(str(r["last_active"]) for r in members),
                "sections": current.get(name, 0),
            }
        )
    return {
        "db_path": str(core.db_path),
        "db_shown": _shown(Path(core.db_path), hermes_home),
        "events": core.store.count(),
        "last_seq": core.store.last_seq(),
        "sessions": len(rows),
        "conversations": conversations,
    }


def conversation(core: ChronicleCore, session: str) -> Json:
    """One conversation: its timeline (messages, compactions, switches and branches), its
    current sections, and the prompt size over the conversation with the compaction points:
    estimated from the captured messages, the host's own counts at each compaction."""
    session = resolve_session(core.store, session)
    lineage = list(core.sessions.lineage(session))
    name = core.sessions.chronicle_name(session)
    timeline: list[Json] = []
    tokens: list[Json] = []
    context = 0
    for decoded in core.reader.typed(sessions=lineage, namespaces=[CHAT, SESSION]):
        env, event = decoded.envelope, decoded.event
        at: Json = {"seq": env.seq, "session": env.session, "time": env.created_at}
        match event:
            case MessageCaptured():
                context += max(1, len(str(event.message)) // _CHARS_PER_TOKEN)
                text = _excerpt(_message_text(event.message))
                timeline.append({"kind": "message", **at, "role": event.role, "text": text})
                tokens.append({"seq": env.seq, "tokens": context})
            case CompactionRecorded():
                timeline.append(
                    {
                        "kind": "compaction",
                        **at,
                        "sections": list(event.section_ids),
                        "tokens_before": event.tokens_before,
                        "tokens_after": event.tokens_after,
                        "first_kept_seq": event.first_kept_seq,
                    }
                )
                before = event.tokens_before or context
                context = event.tokens_after or context
                tokens.append({"seq": env.seq, "tokens": before, "compaction": True})
                tokens.append({"seq": env.seq, "tokens": context, "compaction": True})
            case SessionSwitched() if event.parent_session:
                timeline.append(
                    {"kind": "switch", **at, "reason": event.reason, "parent": event.parent_session}
                )
            case BranchSummarized():
                timeline.append({"kind": "branch", **at, "text": _excerpt(event.summary)})
            case LeafMoved():
                timeline.append({"kind": "branch", **at, "text": "moved back to an earlier turn"})
            case _:
                pass
    sections: list[Json] = [
        {
            "id": s.anchor.section_id,
            "from_seq": s.anchor.from_seq,
            "to_seq": s.anchor.to_seq,
            "created_at": s.created_at,
            "prose": s.prose,
        }
        for s in core.chronicle(name).current()
    ]
    return {
        "session": session,
        "sessions": lineage,
        "chronicle": name,
        "messages": sum(1 for t in timeline if t["kind"] == "message"),
        "compactions": sum(1 for t in timeline if t["kind"] == "compaction"),
        "timeline": timeline[-TIMELINE_LIMIT:],
        "truncated": max(0, len(timeline) - TIMELINE_LIMIT),
        "sections": sections,
        "tokens": tokens,
        "tokens_note": "estimated from the captured messages (4 characters a token); at each "
        "compaction the host's own counts before and after",
    }


def expand(core: ChronicleCore, session: str, section: str) -> Json:
    """A section of the conversation back to its original messages, as captured. An unknown
    section is a LookupError naming the current ones."""
    session = resolve_session(core.store, session)
    name = core.sessions.chronicle_name(session)
    found = core.chronicle(name).get(section)
    if found is None:
        # A condensed section ("L2:1-90") lives in a level chronicle the compaction part names.
        view = core.compaction.resolve(name, section)
        found = view.section if view is not None else None
    if found is None:
        current = [s.anchor.section_id for s in core.chronicle(name).current()]
        raise LookupError(
            f"no section {section!r} in {name} (current: {', '.join(current) or 'none'})"
        )
    lo, hi = found.anchor.from_seq, found.anchor.to_seq
    events = core.sessions.message_events(session, lo, hi)
    return {
        "section": found.anchor.section_id,
        "from_seq": lo,
        "to_seq": hi,
        "messages": [
            {"seq": e.seq, "time": e.envelope.created_at, "message": e.payload.get("message")}
            for e in events
        ],
    }


def search(
    core: ChronicleCore,
    query: str,
    *,
    session: str | None = None,
    scope: str = "all",
    include_tools: bool = False,
    limit: int = 10,
) -> Json:
    """Ranked hits as `chronicle search` gives them: the agent's own chronicle_* traffic left
    out unless `include_tools`, a rank in place of the raw score."""
    from ..recall.recall import SCOPES
    from .commands.browse import own_tool_traffic

    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}")
    if scope == "session" and not session:
        raise ValueError("scope 'session' needs a session")
    anchor = resolve_session(core.store, session) if session else None
    if anchor is None:
        latest = session_rows(core.store, limit=1)
        anchor = str(latest[0]["session"]) if latest else None
    wanted = limit if include_tools else min(100, limit * 3)
    hits = core.recall.search(query, session_id=anchor, scope=scope, limit=wanted)
    hidden = 0
    if not include_tools:
        own = own_tool_traffic(core.store, hits)
        hidden = len(own)
        hits = [h for h in hits if h.get("kind") != "message" or h.get("seq") not in own]
    shown: list[Json] = []
    for rank, hit in enumerate(hits[:limit], 1):
        shown.append({**{k: v for k, v in hit.items() if k != "score"}, "rank": rank})
    return {"query": query, "hits": shown, "hidden_tool_hits": hidden}


def maintenance(core: ChronicleCore) -> Json:
    """The job queue, consolidation and the schedules, as `chronicle maintenance` shows them."""
    from .commands.maintenance import summary

    status = core.scheduler.maintenance_status()
    consolidation = status.get("consolidation")
    schedules = status.get("schedules")
    fields = ("task", "cron", "state", "last_finished", "last_outcome", "next_due")
    return {
        "summary": summary(status),
        "queue": status.get("queue") or {},
        "consolidation": {
            k: v
            for k, v in (consolidation.items() if isinstance(consolidation, Mapping) else ())
            if k != "open_units"
        },
        "schedules": [
            {k: entry.get(k) for k in fields}
            for entry in (schedules if isinstance(schedules, list) else [])
            if isinstance(entry, Mapping)
        ],
    }


def _shown(path: Path, home: Path | None) -> str:
    if home is not None and path.is_relative_to(home):
        return str(Path("$HERMES_HOME") / path.relative_to(home))
    return str(path)


def _excerpt(text: str, limit: int = _EXCERPT) -> str:
    value = " ".join(text.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _message_text(message: Mapping[str, object]) -> str:
    """A message as one line: its text, then the tools it calls."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, Mapping)
        )
    calls = message.get("tool_calls")
    names = [
        str(function.get("name") or "")
        for call in (calls if isinstance(calls, list) else [])
        if isinstance(call, Mapping)
        for function in [call.get("function")]
        if isinstance(function, Mapping)
    ]
    text = str(content or "")
    if names:
        text = (text + " " if text else "") + "calls " + ", ".join(names)
    return text
