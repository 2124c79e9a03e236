"""`chronicle maintenance`: what the scheduler has due, and running jobs now."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.pretty import Pretty
from rich.table import Table

from ..app import Outcome, Session, add_common_options


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "maintenance",
        help="show maintenance status; --run queues tasks and runs what is pending now",
    )
    p.add_argument(
        "--run",
        nargs="*",
        metavar="TASK",
        dest="run_tasks",
        help="queue these scheduled tasks now (none: just run what is already pending), "
        "then run the pending jobs instead of waiting for Hermes' next hook",
    )
    add_common_options(p)
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    core = s.core()
    scheduler = core.scheduler
    ran: int | None = None
    queued: list[str] = []
    if s.args.run_tasks is not None:
        for task in s.args.run_tasks:
            scheduler.enqueue(task)
            queued.append(task)
        ran = scheduler.run_pending()
    status: dict[str, Any] = scheduler.maintenance_status()
    data = {"queued": queued, "ran": ran, "status": status}

    def draw(console: Console) -> None:
        if ran is not None:
            console.print(f"queued {', '.join(queued) or 'nothing new'}; ran {ran} jobs")
        console.print(
            f"maintenance {'on' if status.get('enabled') else 'off'} at {status.get('now')}"
        )
        t = Table(title="Schedules", title_justify="left")
        for col in ("task", "cron", "state", "last finished", "outcome", "next due"):
            t.add_column(col, overflow="fold")
        for entry in status.get("schedules", []):
            t.add_row(
                str(entry.get("task")),
                str(entry.get("cron") or ""),
                str(entry.get("state") or "")
                + (f" ({entry['reason']})" if entry.get("reason") else ""),
                str(entry.get("last_finished") or "-"),
                str(entry.get("last_outcome") or "-"),
                str(entry.get("next_due") or "-"),
            )
        console.print(t)
        console.print("[bold]queue[/]", Pretty(status.get("queue")))
        console.print("[bold]consolidation[/]", Pretty(status.get("consolidation")))

    return Outcome(data, draw)
