"""`chronicle edit-context`: hide or replace a message in a session's context from now on.

The edit is a session-tree entry (the log keeps the original): the session's projection, its
JSONL export and a resumed session's context hold the edited message. A running agent edits its
own live context with the `chronicle_edit_context` tool, which also changes the list it sends.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from ...errors import UsageError
from ..app import CommandFailed, Exit, Outcome, Session, add_common_options


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "edit-context", help="hide or replace a message in a session's context (the log keeps it)"
    )
    p.add_argument("session", help="the session whose context changes")
    p.add_argument("seq", type=int, help="the message's log position (expand and search show it)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--replace", metavar="TEXT", help="the words the context holds instead")
    what.add_argument("--hide", action="store_true", help="hide the message's words")
    add_common_options(p)
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    a = s.args
    core = s.core()
    if a.replace is not None and not a.replace.strip():
        raise CommandFailed("--replace needs the words to put in its place", Exit.USAGE)
    try:
        replacement = core.sessions.edit_message(a.session, a.seq, None if a.hide else a.replace)
    except UsageError as exc:
        raise CommandFailed(str(exc), Exit.NOT_FOUND) from exc
    data = {"session": a.session, "edited": a.seq, "hidden": bool(a.hide), "now": replacement}

    def draw(console: Console) -> None:
        console.print(
            f"seq {a.seq} of {a.session} is {'hidden' if a.hide else 'replaced'} in its context; "
            f"`chronicle expand {a.seq}..{a.seq}` prints the original"
        )

    return Outcome(data, draw)
