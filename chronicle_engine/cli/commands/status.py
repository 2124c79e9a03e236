"""`chronicle status`: what the database holds and where it is."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

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
    files = file_sizes(s.db_path)
    events, last_seq = store.count(), store.last_seq()
    event_types = event_counts(store)
    chronicles = chronicle_rows(store)
    maintenance = core.scheduler.maintenance_status()
    data = {
        "db_path": s.location,
        "files": files,
        "events": events,
        "last_seq": last_seq,
        "sessions": len(sessions),
        "event_types": event_types,
        "chronicles": chronicles,
        "maintenance": maintenance,
    }

    def draw(console: Console) -> None:
        size = sum(files.values())
        console.print(f"[bold]Chronicle[/] {s.location}  ({size / 1024:.0f} KiB on disk)")
        console.print(
            f"{events} events through seq {last_seq}, "
            f"{len(sessions)} sessions, {len(chronicles)} chronicles"
        )
        if event_types:
            t = Table(title="Events", title_justify="left")
            for col in ("namespace", "type", "count", "seqs"):
                t.add_column(col, justify="right" if col in ("count",) else "left")
            for row in event_types:
                t.add_row(
                    row["namespace"],
                    row["type"],
                    str(row["count"]),
                    f"{row['first_seq']}..{row['last_seq']}",
                )
            console.print(t)
        if chronicles:
            t = Table(title="Chronicles", title_justify="left")
            for col in ("chronicle", "sections", "current", "folded through seq"):
                t.add_column(col)
            for chronicle in chronicles:
                t.add_row(
                    chronicle["chronicle"],
                    str(chronicle["sections"]),
                    str(chronicle["current"]),
                    str(chronicle["through_seq"]),
                )
            console.print(t)
        if maintenance is not None:
            for line in summary(maintenance):
                console.print(line)
        console.print("[dim]`chronicle maintenance` shows the schedules; --json prints all[/]")

    return Outcome(data, draw)
