"""`chronicle search | expand | sections | tree`: reading memory the way the agent's tools do."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

from ..exits import CommandFailed, Exit
from ..options import add_common_options, add_list_options, add_session_option, examples

if TYPE_CHECKING:
    from rich.console import Console

    from ...chronicle.sections import Section
    from ...core import ChronicleCore
    from ...log.events import EventReader
    from ...log.port import LogStore
    from ..app import Outcome, Session

# recall's SCOPES, listed here so building the parser loads no search code (a test compares them)
SCOPES = ("all", "session", "messages", "beliefs", "sections")

_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")
_SECTION_LIKE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*(#\d+)?\s*$")


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


def add(sub: argparse._SubParsersAction) -> None:
    for adder in (_add_search, _add_expand, _add_sections, _add_tree):
        adder(sub)


def _add_search(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="search everything Chronicle holds (log, sections, beliefs)",
        description="Ranked hits from the messages, chronicle sections and beliefs, newest "
        "conversation's memory first. The agent's own chronicle_* tool calls and their results "
        "are left out unless --include-tools.",
        epilog=examples(
            'chronicle search "vault path"',
            "chronicle search deploy --session latest --scope sections",
            "chronicle search heron -n 3 --full",
            'chronicle search "port 8443" --nl | jq .seq',
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("query", help="words to look for")
    add_session_option(p, "search within this conversation's lineage only")
    p.add_argument(
        "--scope",
        default="all",
        choices=SCOPES,
        help="what to search (default: all; session: only --session's conversation)",
    )
    p.add_argument("--user", dest="user_id", help="whose memory (gateway user id)")
    p.add_argument("--profile", help="which Hermes profile's memory (e.g. default)")
    p.add_argument(
        "-n", "--limit", type=_positive, default=10, help="at most this many hits (default: 10)"
    )
    p.add_argument(
        "--include-tools",
        action="store_true",
        help="also show the agent's own chronicle_* tool calls and their results",
    )
    add_list_options(p)
    add_common_options(p)
    p.set_defaults(run=search)


def _add_expand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "expand",
        help="a section (or seq range) back to the original messages, byte for byte",
        epilog=examples(
            "chronicle expand 3-74 --session latest",
            "chronicle expand 3-74#2 --raw > originals.jsonl",
            "chronicle expand 12..40            (a seq range, not a section)",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "target", help="a section id like 12-40 or 12-40#2, or a seq range written 12..40"
    )
    add_session_option(p, "the conversation the section belongs to")
    p.add_argument("--chronicle", help="the chronicle the section belongs to")
    p.add_argument(
        "--raw", action="store_true", help="print the original messages as JSON lines, nothing else"
    )
    add_list_options(p)
    add_common_options(p)
    p.set_defaults(run=expand)


def _add_sections(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sections",
        help="the chronicle sections of a conversation",
        epilog=examples(
            "chronicle sections --session latest",
            "chronicle sections --all --full",
            "chronicle sections --nl | jq -r .id",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_session_option(p, "the conversation (default: every chronicle)")
    p.add_argument("--chronicle", help="one chronicle by name")
    p.add_argument("--all", action="store_true", help="include superseded sections")
    add_list_options(p)
    add_common_options(p)
    p.set_defaults(run=sections)


def _add_tree(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tree",
        help="the session tree: lineages, branches and compaction points",
        epilog=examples("chronicle tree", "chronicle tree --session latest", "chronicle tree --nl"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_session_option(p, "only this session's lineage")
    p.add_argument(
        "-n",
        "--limit",
        type=_positive,
        default=50,
        help="at most this many sessions (default: 50)",
    )
    p.add_argument("--nl", action="store_true", help="one JSON object per session, per line")
    add_common_options(p)
    p.set_defaults(run=tree)


# -- search ------------------------------------------------------------------------------------


def search(s: Session) -> Outcome:
    from ..app import Outcome, clip, when, wrapped
    from ..inventory import session_rows

    a = s.args
    if not a.query.strip():
        raise CommandFailed(
            'give words to search for, e.g. chronicle search "vault path"', Exit.USAGE
        )
    core = s.core()
    recall = core.recall
    session = s.session_id(a.session)
    if a.scope == "session" and session is None:
        raise CommandFailed("--scope session needs --session ID (or latest)", Exit.USAGE)
    # Memory is partitioned by (user, profile). Without a session, user or profile, search the
    # partition of the most recent session: the memory the person last used.
    anchor = session
    if anchor is None and a.user_id is None and a.profile is None:
        latest = session_rows(core.store, limit=1)
        anchor = latest[0]["session"] if latest else None
    # The agent's own chronicle_* traffic is left out after ranking: ask for more, keep `limit`.
    wanted = a.limit if a.include_tools else min(100, a.limit * 3 + 10)
    hits = recall.search(
        a.query,
        session_id=anchor,
        scope=a.scope,
        user_id=a.user_id,
        profile=a.profile,
        limit=wanted,
    )
    hidden = 0
    if not a.include_tools:
        own = own_tool_traffic(core.store, hits)
        hidden = len(own)
        hits = [h for h in hits if h.get("seq") not in own or h.get("kind") != "message"]
    hits = hits[: a.limit]
    for rank, hit in enumerate(hits, 1):
        hit["rank"] = rank
        if a.full:
            hit["text"] = _whole_text(core, hit)
    data = {"query": a.query, "hits": hits, "hidden_tool_hits": hidden}

    def draw(console: Console) -> None:
        if not hits:
            console.print(f"no hits for {a.query!r}")
        for hit in hits:
            where = (
                hit.get("section_id") and f"section {hit['section_id']}" or f"seq {hit.get('seq')}"
            )
            who = hit.get("speaker") or hit.get("role") or hit.get("kind")
            console.print(
                f"[bold]{hit['rank']:>2}.[/] {where}  [cyan]{who}[/]  {hit.get('session') or ''}"
                f"  [dim]{when(hit.get('time'))}[/]"
            )
            wrapped(console, clip(hit.get("text") or hit.get("prose") or "", a.full))
        if hidden:
            wrapped(
                console,
                f"({hidden} {'hit' if hidden == 1 else 'hits'} from the agent's own chronicle_* "
                "tool calls left out; --include-tools shows them)",
                indent=0,
            )

    return Outcome(data, draw, Exit.OK if hits else Exit.NOT_FOUND, rows=hits)


def _whole_text(core: ChronicleCore, hit: Mapping[str, object]) -> object:
    """A hit's text is an excerpt; --full reads the message or the section whole."""
    seq = hit.get("seq")
    if hit.get("kind") == "message" and isinstance(seq, int):
        event = core.store.get(seq)
        if event is not None and isinstance(event.payload.get("text"), str):
            return event.payload["text"] or hit.get("text")
    name, section_id = hit.get("chronicle"), hit.get("section_id")
    if hit.get("kind") == "section" and isinstance(name, str) and isinstance(section_id, str):
        section = core.chronicle(name).get(section_id) if name and section_id else None
        if section is not None:
            return section.prose
    return hit.get("text")


_OWN_TOOL = "chronicle_"
_LOOKBACK = 64  # events before a tool result searched for the call it answers


def own_tool_traffic(store: LogStore, hits: Sequence[Mapping[str, object]]) -> set[int]:
    """Seqs of message hits that are the agent's own chronicle_* calls or their results."""
    own: set[int] = set()
    for hit in hits:
        seq = hit.get("seq")
        if not isinstance(seq, int):
            continue
        if hit.get("kind") != "message" or hit.get("role") not in ("assistant", "tool"):
            continue
        event = store.get(seq)
        message = event.payload.get("message") if event is not None else None
        if event is None or not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            names = [_call_name(c) for c in message.get("tool_calls") or []]
            text = str(message.get("content") or "").strip()
            if names and not text and all(n.startswith(_OWN_TOOL) for n in names):
                own.add(seq)
            continue
        call_id = message.get("tool_call_id")
        if str(message.get("name") or "").startswith(_OWN_TOOL):
            own.add(seq)
            continue
        for earlier in store.read(
            after=max(0, seq - _LOOKBACK), upto=seq - 1, session=event.envelope.session
        ):
            said = earlier.payload.get("message")
            calls = (said.get("tool_calls") if isinstance(said, dict) else None) or []
            if any(c.get("id") == call_id and _call_name(c).startswith(_OWN_TOOL) for c in calls):
                own.add(seq)
                break
    return own


def _call_name(call: object) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    return str((function or {}).get("name") or "") if isinstance(function, dict) else ""


# -- expand ------------------------------------------------------------------------------------


def _chronicle_for(s: Session, session: str | None, chronicle: str | None) -> list[str]:
    from ..inventory import chronicle_rows

    core = s.core()
    if chronicle:
        known = [row["chronicle"] for row in chronicle_rows(core.store)]
        if chronicle not in known:
            raise CommandFailed(
                f"no chronicle {chronicle!r}; this database has: {', '.join(known) or 'none'}",
                Exit.NOT_FOUND,
            )
        return [chronicle]
    if session:
        return [core.sessions.chronicle_name(session)]
    return [row["chronicle"] for row in chronicle_rows(core.store)]


def expand(s: Session) -> Outcome:
    from ...capture.events import NAMESPACE as CHAT
    from ..app import Outcome, clip, when, wrapped

    a = s.args
    core = s.core()
    session = s.session_id(a.session)
    section, owner, lo, hi = _expand_target(s, core, session)

    if session:
        sessions = core.sessions
        events = list(sessions.message_events(session, lo, hi))
    else:
        allowed = _sessions_of_chronicle(s, owner, lo, hi)
        events = [
            e
            for e in core.store.read(after=lo - 1, upto=hi, namespaces=[CHAT])
            if e.envelope.type == "MessageCaptured"
            and (allowed is None or e.envelope.session in allowed)
        ]
    messages = [e.payload.get("message") for e in events]
    rows = [
        {"seq": e.seq, "session": e.envelope.session, "time": e.envelope.created_at, "message": m}
        for e, m in zip(events, messages, strict=True)
    ]
    data = {
        "target": a.target,
        "section": None
        if section is None
        else {"id": section.anchor.section_id, "chronicle": owner, "prose": section.prose},
        "from_seq": lo,
        "to_seq": hi,
        "messages": rows,
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
        for e, m in zip(events, messages, strict=True):
            role = m.get("role", "?") if isinstance(m, dict) else "?"
            body = m.get("content") if isinstance(m, dict) else m
            calls = (
                [_call_name(c) for c in (m.get("tool_calls") or [])] if isinstance(m, dict) else []
            )
            if calls and not body:
                body = "calls " + ", ".join(calls)
            console.print(
                f"[bold]seq {e.seq}[/]  [cyan]{role}[/]  [dim]{when(e.envelope.created_at)}[/]"
            )
            wrapped(console, clip(body or "", a.full))

    return Outcome(data, draw, Exit.OK if messages else Exit.NOT_FOUND, rows=rows)


def _expand_target(
    s: Session, core: ChronicleCore, session: str | None
) -> tuple[Section | None, str | None, int, int]:
    """What `chronicle expand TARGET` names: a section (with its chronicle) and its seq range,
    or a plain seq range written LO..HI."""
    a = s.args
    section: Section | None = None
    owner: str | None = None
    names = _chronicle_for(s, session, a.chronicle)
    for name in names:
        found = core.chronicle(name).get(a.target)
        if found is not None:
            section, owner = found, name
            break
    if section is None and session:
        # A condensed section ("L2:1-90") lives in a level chronicle the compaction part names.
        name = core.sessions.chronicle_name(session)
        view = core.compaction.resolve(name, a.target)
        if view is not None:
            section, owner = view.section, name
    if section is not None:
        lo, hi = section.anchor.from_seq, section.anchor.to_seq
    else:
        m = _RANGE.match(a.target)
        if not m:
            where = f"conversation {session!r}" if session else "any chronicle"
            hint = ""
            like = _SECTION_LIKE.match(a.target)
            if like and not like.group(3):
                hint = f"; for the seq range write {like.group(1)}..{like.group(2)}"
            current = [
                sec.anchor.section_id for name in names for sec in core.chronicle(name).current()
            ]
            shown = ", ".join(current[:8]) + (", …" if len(current) > 8 else "")
            raise CommandFailed(
                f"no section {a.target!r} in {where} (current sections: {shown or 'none'}; "
                f"`chronicle sections` lists them){hint}",
                Exit.NOT_FOUND,
            )
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise CommandFailed(
                f"empty range {a.target!r}: the first seq is after the last", Exit.USAGE
            )
    return section, owner, lo, hi


def _sessions_of_chronicle(s: Session, owner: str | None, lo: int, hi: int) -> set[str] | None:
    from ..inventory import session_rows

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
    from ..app import Outcome, clip, when, wrapped

    a = s.args
    core = s.core()
    session = s.session_id(a.session)
    names = _chronicle_for(s, session, a.chronicle)
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
    rows = [{"chronicle": name, **row} for name, secs in data.items() for row in secs]

    def draw(console: Console) -> None:
        if not rows:
            where = f"conversation {session!r}" if session else "this database"
            console.print(
                f"no sections yet in {where} (a conversation gets its first one at its first "
                "compaction)"
            )
            return
        for name, secs in listing.items():
            if not secs:
                continue
            console.print(f"[bold]chronicle {name}[/]  ({len(secs)} sections)")
            for sec in secs:
                note = f"  supersedes {sec.anchor.supersedes}" if sec.anchor.supersedes else ""
                console.print(
                    f"  [bold]{sec.anchor.section_id}[/]  seq {sec.anchor.from_seq}.."
                    f"{sec.anchor.to_seq}  [dim]{when(sec.created_at)}{note}[/]"
                )
                wrapped(console, clip(sec.prose, a.full, lines=4))

    return Outcome(data, draw, rows=rows)


# -- tree --------------------------------------------------------------------------------------


def tree(s: Session) -> Outcome:
    from rich.tree import Tree

    from ..app import Outcome, when
    from ..inventory import session_rows

    a = s.args
    core = s.core()
    tree_api = core.sessions
    session = s.session_id(a.session)
    rows = {r["session"]: r for r in session_rows(core.store)}
    wanted = [session] if session else list(rows)[: a.limit]
    lineages: list[list[str]] = []
    placed: set[str] = set()
    for sid in wanted:
        if sid in placed:
            continue
        lineage = list(tree_api.lineage(sid))
        placed.update(lineage)
        lineages.append(lineage)
    marks = _session_marks(core.reader, {sid for lin in lineages for sid in lin})
    named = [(tree_api.chronicle_name(lin[-1]) if lin else None, lin) for lin in lineages]
    data = {
        "lineages": [
            {
                "chronicle": chronicle,
                "sessions": [
                    {"session": sid, **rows.get(sid, {}), **marks.get(sid, {})} for sid in lin
                ],
            }
            for chronicle, lin in named
        ]
    }

    def draw(console: Console) -> None:
        if not lineages:
            console.print("no sessions yet")
            return
        for chronicle, lin in named:
            root = Tree(f"[bold]conversation[/] {chronicle}")
            node = root
            for sid in lin:
                label = sid
                mark = marks.get(sid, _SessionMark(compactions=[]))
                if "reason" in mark:
                    label = f"↳ ({mark['reason']} of {mark.get('parent') or '-'}) " + label
                if sid in rows:
                    row = rows[sid]
                    label += (
                        f"  [dim]{row['events']} events, seq {row['first_seq']}.."
                        f"{row['last_seq']}, {when(row['started'])} to "
                        f"{when(row['last_active'])}[/]"
                    )
                node = node.add(label)
                for c in mark["compactions"]:
                    node.add(
                        f"[yellow]compaction[/] at seq {c['seq']}: sections "
                        f"{', '.join(c['sections']) or '-'}; tokens {c['tokens_before']:,} → "
                        f"{c['tokens_after']:,}; verbatim from seq {c['first_kept_seq']}"
                    )
            console.print(root, soft_wrap=False)  # wrapped under its guides, not cut

    flat = [
        {"chronicle": chronicle, "session": sid, **rows.get(sid, {}), **marks.get(sid, {})}
        for chronicle, lin in named
        for sid in lin
    ]
    return Outcome(data, draw, rows=flat)


class _CompactionMark(TypedDict):
    seq: int
    sections: list[str]
    tokens_before: int
    tokens_after: int
    first_kept_seq: int | None


class _SessionMark(TypedDict):
    compactions: list[_CompactionMark]
    reason: NotRequired[str]
    parent: NotRequired[str]


def _session_marks(reader: EventReader[LogStore], sessions: set[str]) -> dict[str, _SessionMark]:
    """Per session: how it started (switch reason, parent) and its compaction points."""
    from ...sessions.events import NAMESPACE as SESSION_NS
    from ...sessions.events import CompactionRecorded, SessionSwitched

    marks = {sid: _SessionMark(compactions=[]) for sid in sessions}
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
