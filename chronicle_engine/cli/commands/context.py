"""`chronicle edit-context`: hide or replace a message in a session's context from now on;
`chronicle ledger`: what each compaction of a conversation folded, kept and left out.

The edit is a session-tree entry (the log keeps the original): the session's projection, its
JSONL export and a resumed session's context hold the edited message. A running agent edits its
own live context with the `chronicle_edit_context` tool, which also changes the list it sends.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..options import add_common_options, add_session_option, examples

if TYPE_CHECKING:
    from rich.console import Console

    from ..app import Outcome, Session


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "edit-context",
        help="hide or replace a message in a session's context (the log keeps it)",
        epilog=examples(
            "chronicle edit-context 812 --session latest --hide",
            'chronicle edit-context 812 --session 20261201_0930 --replace "(stale output)"',
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("seq", type=int, help="the message's log position (expand and search show it)")
    add_session_option(p, "the session whose context changes")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--replace", metavar="TEXT", help="the words the context holds instead")
    what.add_argument("--hide", action="store_true", help="hide the message's words")
    add_common_options(p)
    p.set_defaults(run=run)
    add_ledger(sub)


def run(s: Session) -> Outcome:
    from ...errors import UsageError
    from ..app import CommandFailed, Exit, Outcome

    a = s.args
    session = s.session_id(a.session)
    if session is None:
        raise CommandFailed("give --session (`latest` for the most recent)", Exit.USAGE)
    if a.replace is not None and not a.replace.strip():
        raise CommandFailed("--replace needs the words to put in its place", Exit.USAGE)
    core = s.core()
    try:
        replacement = core.sessions.edit_message(session, a.seq, None if a.hide else a.replace)
    except UsageError as exc:
        raise CommandFailed(str(exc), Exit.NOT_FOUND) from exc
    data = {"session": session, "edited": a.seq, "hidden": bool(a.hide), "now": replacement}

    def draw(console: Console) -> None:
        console.print(
            f"seq {a.seq} of {session} is {'hidden' if a.hide else 'replaced'} in its context; "
            f"`chronicle expand {a.seq}..{a.seq}` prints the original"
        )

    return Outcome(data, draw)


def add_ledger(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ledger",
        help="what each compaction folded, and what its prose kept and left out",
        epilog=examples(
            "chronicle ledger --session latest", "chronicle ledger --session 2026 --json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_session_option(p, "the conversation whose compactions to list")
    add_common_options(p)
    p.set_defaults(run=ledger)


def ledger(s: Session) -> Outcome:
    from ..app import CommandFailed, Exit, Outcome

    session = s.session_id(s.args.session or "latest")
    if session is None:
        raise CommandFailed("give --session (`latest` for the most recent)", Exit.USAGE)
    rows = s.core().compaction.ledgers(session)
    data = {"session": session, "passes": rows}

    def draw(console: Console) -> None:
        if not rows:
            console.print(f"no compaction in {session}'s conversation yet")
            return
        for row in rows:
            left_out = row["left_out"]
            left = ", ".join(map(str, left_out[:8])) if isinstance(left_out, list) else ""
            left = left or "-"
            console.print(
                f"seq {row['from_seq']}..{row['to_seq']}: {row['folded_messages']} messages folded, "
                f"{row['messages_kept']} named in prose; entities {row['entities']}: "
                f"{row['entities_in_handoff']} in the handoff, {row['entities_in_sections']} "
                f"in its sections, {row['entities_left_out']} left out ({left})"
            )

    return Outcome(data, draw, Exit.OK if rows else Exit.NOT_FOUND)
