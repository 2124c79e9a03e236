"""`chronicle status`: what the database holds and where it is."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..options import add_common_options

if TYPE_CHECKING:
    from rich.console import Console

    from ..app import Outcome, Session


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="what the database holds, and where it is",
        epilog="examples:\n  chronicle status\n  chronicle status --db other.db --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_options(p)
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    from rich.table import Table

    from ..app import Outcome
    from ..inventory import chronicle_rows, event_counts, file_sizes, session_rows
    from .maintenance import summary

    core = s.core()
    store = core.store
    sessions = session_rows(store)
    data: dict[str, Any] = {
        "db_path": str(s.db_path),
        "files": file_sizes(s.db_path),
        "events": store.count(),
        "last_seq": store.last_seq(),
        "sessions": len(sessions),
        "event_types": event_counts(store),
        "chronicles": chronicle_rows(store),
        "maintenance": core.scheduler.maintenance_status(),
    }

    def draw(console: Console) -> None:
        size = sum(data["files"].values())
        console.print(f"[bold]Chronicle[/] {data['db_path']}  ({size / 1024:.0f} KiB on disk)")
        console.print(
            f"{data['events']} events through seq {data['last_seq']}, "
            f"{data['sessions']} sessions, {len(data['chronicles'])} chronicles"
        )
        if data["event_types"]:
            t = Table(title="Events", title_justify="left")
            for col in ("namespace", "type", "count", "seqs"):
                t.add_column(col, justify="right" if col in ("count",) else "left")
            for row in data["event_types"]:
                t.add_row(
                    row["namespace"],
                    row["type"],
                    str(row["count"]),
                    f"{row['first_seq']}..{row['last_seq']}",
                )
            console.print(t)
        if data["chronicles"]:
            t = Table(title="Chronicles", title_justify="left")
            for col in ("chronicle", "sections", "current", "folded through seq"):
                t.add_column(col)
            for row in data["chronicles"]:
                t.add_row(
                    row["chronicle"],
                    str(row["sections"]),
                    str(row["current"]),
                    str(row["through_seq"]),
                )
            console.print(t)
        if data["maintenance"] is not None:
            for line in summary(data["maintenance"]):
                console.print(line)
        console.print("[dim]`chronicle maintenance` shows the schedules; --json prints all[/]")

    return Outcome(data, draw)
