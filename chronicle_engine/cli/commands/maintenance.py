"""`chronicle maintenance`: what the scheduler has due, running jobs now, and folding recall's
search index again from the log (`--reindex`)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from ..options import add_common_options

if TYPE_CHECKING:
    from rich.console import Console

    from ...scheduler.scheduler import MaintenanceStatus
    from ..app import Outcome, Session

__all__ = ["add", "run", "summary"]


# The scheduler's TASKS, listed here so building the parser loads no scheduler (a test
# compares them).
TASKS = (
    "consolidate",
    "reap",
    "fts_optimize",
    "belief_sweep",
    "queue_retention",
    "wal_checkpoint",
    "integrity",
)


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "maintenance",
        help="show maintenance status; --run queues tasks and runs what is pending now; "
        "--reindex folds recall's search index again from the log",
        description="Chronicle has no daemon: Hermes' hooks start its scheduled tasks, in Hermes' "
        "own process. This shows "
        "them, the job queue and how far consolidation has got; --json prints all of it.",
        epilog="examples:\n  chronicle maintenance\n  chronicle maintenance --run\n"
        "  chronicle maintenance --run integrity consolidate\n  chronicle maintenance --reindex",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--run",
        nargs="*",
        metavar="TASK",
        dest="run_tasks",
        choices=TASKS,
        help="queue these scheduled tasks now (none: just run what is already pending), "
        f"then run the pending jobs instead of waiting for Hermes' next hook; TASK is one of "
        f"{', '.join(TASKS)}",
    )
    p.add_argument(
        "--reindex",
        action="store_true",
        help="drop recall's search index and fold the whole log into it again (nothing in the "
        "log changes): after every host of a shared store runs a newer Chronicle, so what an "
        "older host indexed gets what the new one notes; searches meanwhile see only what is "
        "folded so far, and with embeddings on every message is embedded again",
    )
    add_common_options(p)
    p.set_defaults(run=run)


def summary(status: MaintenanceStatus) -> list[str]:
    """Maintenance in a few lines a person reads: on or off, the queue, consolidation."""
    if not status:
        return ["maintenance: no status"]
    queue = status.get("queue") or {}
    lines = [
        f"maintenance {'on' if status.get('enabled') else 'OFF (maintenance.enabled: false)'}; "
        f"jobs: {queue.get('pending', 0)} pending, {queue.get('running', 0)} running, "
        f"{queue.get('done', 0)} done, {queue.get('failed', 0)} failed"
    ]
    age = queue.get("oldest_pending_age_s")
    if age:
        lines.append(f"  oldest pending job waits {float(age):.0f}s (jobs run on Hermes' hooks)")
    for failure in (queue.get("recent_failures") or [])[:3]:
        lines.append(f"  failed: {_brief(failure)}")
    c = status.get("consolidation") or {}
    if c:
        units = c.get("open_units") or []
        lines.append(
            f"consolidation at seq {c.get('position', 0)} of {c.get('log_end', 0)} "
            f"({c.get('behind', 0)} events to read), {len(units)} open "
            f"unit{'s' if len(units) != 1 else ''}"
        )
    paused = [e["task"] for e in status.get("schedules", []) if e.get("state") != "active"]
    if paused:
        lines.append(f"not running on schedule: {', '.join(paused)}")
    return lines


def _brief(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items() if v not in (None, "", [], {}))
    return str(value)


def run(s: Session) -> Outcome:
    from rich.box import SIMPLE
    from rich.table import Table

    from ..app import Outcome, when

    core = s.core()
    scheduler = core.scheduler
    reindexed: dict[str, int | float] | None = None
    if s.args.reindex:
        started = time.perf_counter()
        events = core.recall.rebuild()
        reindexed = {"events": events, "seconds": round(time.perf_counter() - started, 3)}
    ran: int | None = None
    queued: list[str] = []
    if s.args.run_tasks is not None:
        for task in s.args.run_tasks:
            scheduler.enqueue(task)
            queued.append(task)
        ran = scheduler.run_pending()
    status = scheduler.maintenance_status()
    data: dict[str, object] = {"queued": queued, "ran": ran, "status": status}
    if reindexed is not None:
        data["reindexed"] = reindexed

    def draw(console: Console) -> None:
        if reindexed is not None:
            console.print(
                f"recall's index folded again: {reindexed['events']:,} events in"
                f" {reindexed['seconds']:.1f}s"
            )
        if ran is not None:
            console.print(f"queued {', '.join(queued) or 'nothing new'}; ran {ran} jobs")
        for line in summary(status):
            console.print(line)
        t = Table(title="Schedules (cron in UTC, times local)", title_justify="left", box=SIMPLE)
        for col in ("task", "cron", "last run", "outcome", "next due"):
            t.add_column(col, overflow="fold", no_wrap=col != "outcome")
        for entry in status.get("schedules", []):
            state = entry.get("state") or ""
            t.add_row(
                str(entry.get("task")),
                str(entry.get("cron") or "")
                + (
                    ""
                    if state == "active"
                    else f" ({state}{': ' + entry['reason'] if entry.get('reason') else ''})"
                ),
                when(entry.get("last_finished"), short=True) or "-",
                str(entry.get("last_outcome") or "-"),
                when(entry.get("next_due"), short=True) or "-",
            )
        console.print(t)
        console.print("[dim]--json prints everything, including sweep cursors and open units[/]")

    return Outcome(data, draw)
