"""`chronicle maintenance`: what the scheduler has due, and running it now."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.pretty import Pretty

from ..app import Outcome, Session, add_common_options
from ._optional import subsystem


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "maintenance",
        help="show maintenance status; --run does the due jobs now instead of on the next hook",
    )
    p.add_argument("--run", action="store_true", help="run the jobs that are due now")
    add_common_options(p)
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    core = s.core()
    scheduler = subsystem("scheduler", lambda: core.scheduler)
    ran = None
    if s.args.run:
        ran = scheduler.tick("cli")
    data = {"ran": ran, "status": scheduler.maintenance_status()}

    def draw(console: Console) -> None:
        if s.args.run:
            console.print("ran:", Pretty(ran))
        console.print(Pretty(data["status"]))

    return Outcome(data, draw)
