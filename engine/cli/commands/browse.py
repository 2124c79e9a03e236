"""`chronicle search | expand | sections | tree`: reading memory the way the agent's tools do."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from ...capture.events import NAMESPACE as CHAT
from ...chronicle.sections import Section
from ...log.events import EventReader
from ..app import CommandFailed, Exit, Outcome, Session, add_common_options
from ..inventory import chronicle_rows, session_rows

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-|\.\.)\s*(\d+)\s*$")


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="search everything Chronicle holds (log, sections, beliefs)")
    p.add_argument("query", help="words to look for")
    p.add_argument("--session", help="search within this conversation's lineage only")
    p.add_argument("--scope", default="all", help="what to search (default: all)")
    p.add_argument("--user", dest="user_id", help="whose memory (gateway user id)")
    p.add_argument("--profile", help="which Hermes profile's memory (e.g. default)")
    p.add_argument("-n", "--limit", type=int, default=10, help="at most this many hits")
    add_common_options(p)
    p.set_defaults(run=search)

    p = sub.add_parser(
        "expand", help="a section (or seq range) back to the original messages, byte for byte"
    )
    p.add_argument("target", help="a section id like 12-40 or 12-40#2, or a seq range 12..40")
    p.add_argument("--session", help="the conversation the section belongs to")
    p.add_argument("--chronicle", help="the chronicle the section belongs to")
    p.add_argument(
        "--raw", action="store_true", help="print the original messages as JSON lines, nothing else"
    )
    add_common_options(p)
    p.set_defaults(run=expand)

    p = sub.add_parser("sections", help="the chronicle sections of a conversation")
    p.add_argument("--session", help="the conversation (default: every chronicle)")
    p.add_argument("--chronicle", help="one chronicle by name")
    p.add_argument("--all", action="store_true", help="include superseded sections")
    p.add_argument("--full", action="store_true", help="print each section's whole prose")
    add_common_options(p)
    p.set_defaults(run=sections)

    p = sub.add_parser("tree", help="the session tree: lineages, branches and compaction points")
    p.add_argument("--session", help="only this session's lineage")
    p.add_argument("-n", "--limit", type=int, default=50, help="at most this many sessions")
    add_common_options(p)
    p.set_defaults(run=tree)


# -- search ------------------------------------------------------------------------------------


def search(s: Session) -> Outcome:
    a = s.args
    core = s.core()
    recall = core.recall
    # Memory is partitioned by (user, profile). Without a session, user or profile, search the
    # partition of the most recent session: the memory the person last used.
    anchor = a.session
    if anchor is None and a.user_id is None and a.profile is None:
        latest = session_rows(core.store, limit=1)
        anchor = latest[0]["session"] if latest else None
    hits = recall.search(
        a.query,
        session_id=anchor,
        scope=a.scope,
        user_id=a.user_id,
        profile=a.profile,
        limit=a.limit,
    )
    data = {"query": a.query, "hits": hits}

    def draw(console: Console) -> None:
        if not hits:
            console.print(f"no hits for {a.query!r}")
            return
        columns = _columns(hits)
        t = Table(title=f"{len(hits)} hits for {a.query!r}", title_justify="left")
        for col in columns:
            t.add_column(col, overflow="fold")
        for hit in hits:
            t.add_row(*(_cell(hit.get(c)) for c in columns))
        console.print(t)

    return Outcome(data, draw, Exit.OK if hits else Exit.NOT_FOUND)


_PREFERRED = ("kind", "seq", "section_id", "session", "role", "score", "text", "prose")


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    for row in rows:
        for k in row:
            if k not in keys:
                keys.append(k)
    ordered = [k for k in _PREFERRED if k in keys]
    return ordered + [k for k in keys if k not in ordered][: max(0, 6 - len(ordered))]


def _cell(value: Any, width: int = 160) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# -- expand ------------------------------------------------------------------------------------


def _chronicle_for(s: Session, session: str | None, chronicle: str | None) -> list[str]:
    core = s.core()
    if chronicle:
        return [chronicle]
    if session:
        return [core.sessions.chronicle_name(session)]
    return [row["chronicle"] for row in chronicle_rows(core.store)]


def expand(s: Session) -> Outcome:
    a = s.args
    core = s.core()
    section: Section | None = None
    owner: str | None = None
    for name in _chronicle_for(s, a.session, a.chronicle):
        found = core.chronicle(name).get(a.target)
        if found is not None:
            section, owner = found, name
            break
    if section is None and a.session:
        # A condensed section ("L2:1-90") lives in a level chronicle the compaction part names.
        name = core.sessions.chronicle_name(a.session)
        view = core.compaction.resolve(name, a.target)
        if view is not None:
            section, owner = view.section, name
    if section is not None:
        lo, hi = section.anchor.from_seq, section.anchor.to_seq
    else:
        m = _RANGE.match(a.target)
        if not m:
            raise CommandFailed(
                f"no section {a.target!r} found; `chronicle sections` lists them "
                "(or give a seq range such as 12..40)",
                Exit.NOT_FOUND,
            )
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise CommandFailed(
                f"empty range {a.target!r}: the first seq is after the last", Exit.USAGE
            )

    if a.session:
        sessions = core.sessions
        events = list(sessions.message_events(a.session, lo, hi))
    else:
        allowed = _sessions_of_chronicle(s, owner, lo, hi)
        events = [
            e
            for e in core.store.read(after=lo - 1, upto=hi, namespaces=[CHAT])
            if e.envelope.type == "MessageCaptured"
            and (allowed is None or e.envelope.session in allowed)
        ]
    messages = [e.payload.get("message") for e in events]
    data = {
        "target": a.target,
        "section": None
        if section is None
        else {"id": section.anchor.section_id, "chronicle": owner, "prose": section.prose},
        "from_seq": lo,
        "to_seq": hi,
        "messages": [
            {"seq": e.seq, "session": e.envelope.session, "message": m}
            for e, m in zip(events, messages, strict=True)
        ],
    }

    def draw(console: Console) -> None:
        if a.raw:
            for m in messages:
                console.out(json.dumps(m, ensure_ascii=False), highlight=False)
            return
        head = f"seq {lo}..{hi}"
        if section is not None:
            head = f"section {section.anchor.section_id} of {owner!r} ({head})"
        console.print(f"[bold]{head}[/]: {len(messages)} original messages")
        t = Table(show_lines=False)
        t.add_column("seq", justify="right")
        t.add_column("role")
        t.add_column("message", overflow="fold")
        for e, m in zip(events, messages, strict=True):
            role = m.get("role", "?") if isinstance(m, dict) else "?"
            t.add_row(str(e.seq), role, _cell(m.get("content") if isinstance(m, dict) else m, 400))
        console.print(t)

    return Outcome(data, draw, Exit.OK if messages else Exit.NOT_FOUND)


def _sessions_of_chronicle(s: Session, owner: str | None, lo: int, hi: int) -> set[str] | None:
    """Sessions whose messages a section of `owner` may cite (None: no way to tell, take all)."""
    if owner is None:
        return None
    core = s.core()
    sessions = core.sessions
    found = set()
    for row in session_rows(core.store):
        overlaps = row["last_seq"] >= lo and row["first_seq"] <= hi
        if overlaps and sessions.chronicle_name(row["session"]) == owner:
            found.add(row["session"])
    return found


# -- sections ----------------------------------------------------------------------------------


def sections(s: Session) -> Outcome:
    a = s.args
    core = s.core()
    names = _chronicle_for(s, a.session, a.chronicle)
    listing: dict[str, list[Section]] = {}
    for name in names:
        chron = core.chronicle(name)
        listing[name] = chron.export() if a.all else chron.current()
    data = {
        name: [
            {
                "id": sec.anchor.section_id,
                "from_seq": sec.anchor.from_seq,
                "to_seq": sec.anchor.to_seq,
                "unit": sec.anchor.unit,
                "supersedes": sec.anchor.supersedes,
                "created_at": sec.created_at,
                "prose": sec.prose,
                "pins": list(sec.pins),
            }
            for sec in secs
        ]
        for name, secs in listing.items()
    }

    def draw(console: Console) -> None:
        if not any(listing.values()):
            console.print(
                "no sections yet (a conversation gets its first one at its first compaction)"
            )
            return
        for name, secs in listing.items():
            t = Table(title=f"chronicle {name!r}", title_justify="left", show_lines=a.full)
            t.add_column("section")
            t.add_column("seqs", justify="right")
            t.add_column("supersedes")
            t.add_column("prose", overflow="fold")
            for sec in secs:
                t.add_row(
                    sec.anchor.section_id,
                    f"{sec.anchor.from_seq}..{sec.anchor.to_seq}",
                    sec.anchor.supersedes or "",
                    sec.prose if a.full else _cell(sec.prose, 120),
                )
            console.print(t)

    return Outcome(data, draw)


# -- tree --------------------------------------------------------------------------------------


def tree(s: Session) -> Outcome:
    a = s.args
    core = s.core()
    tree_api = core.sessions
    rows = {r["session"]: r for r in session_rows(core.store)}
    wanted = [a.session] if a.session else list(rows)[: a.limit]
    lineages: list[list[str]] = []
    placed: set[str] = set()
    for sid in wanted:
        if sid in placed:
            continue
        lineage = list(tree_api.lineage(sid))
        placed.update(lineage)
        lineages.append(lineage)
    marks = _session_marks(core.reader, {sid for lin in lineages for sid in lin})
    data: dict[str, list[dict[str, Any]]] = {
        "lineages": [
            {
                "chronicle": tree_api.chronicle_name(lin[-1]) if lin else None,
                "sessions": [
                    {"session": sid, **rows.get(sid, {}), **marks.get(sid, {})} for sid in lin
                ],
            }
            for lin in lineages
        ]
    }

    def draw(console: Console) -> None:
        if not lineages:
            console.print("no sessions yet")
            return
        for entry in data["lineages"]:
            root = Tree(f"[bold]conversation[/] {entry['chronicle']}")
            node = root
            for info in entry["sessions"]:
                label = info["session"]
                if info.get("reason"):
                    label = f"↳ ({info['reason']} of {info.get('parent') or '-'}) " + label
                if "events" in info:
                    label += f"  [dim]{info['events']} events, seq {info['first_seq']}..{info['last_seq']}[/]"
                node = node.add(label)
                for c in info.get("compactions", []):
                    node.add(
                        f"[yellow]compaction[/] at seq {c['seq']}: sections "
                        f"{', '.join(c['sections']) or '-'}; tokens {c['tokens_before']:,} → "
                        f"{c['tokens_after']:,}; verbatim from seq {c['first_kept_seq']}"
                    )
            console.print(root)

    return Outcome(data, draw)


def _session_marks(reader: EventReader, sessions: set[str]) -> dict[str, dict[str, Any]]:
    """Per session: how it started (switch reason, parent) and its compaction points."""
    from ...sessions.events import NAMESPACE as SESSION_NS
    from ...sessions.events import CompactionRecorded, SessionSwitched

    marks: dict[str, dict[str, Any]] = {sid: {"compactions": []} for sid in sessions}
    if not sessions:
        return marks
    for e in reader.typed(sessions=sorted(sessions), namespaces=[SESSION_NS]):
        mark = marks[e.envelope.session or ""]
        match e.event:
            case SessionSwitched(parent_session=parent, reason=reason) if parent:
                mark["reason"] = reason
                mark["parent"] = parent
            case CompactionRecorded() as compaction:
                mark["compactions"].append(
                    {
                        "seq": e.seq,
                        "sections": list(compaction.section_ids),
                        "tokens_before": compaction.tokens_before,
                        "tokens_after": compaction.tokens_after,
                        "first_kept_seq": compaction.first_kept_seq,
                    }
                )
    return marks
