"""`chronicle demo`: a scripted long chat through the real engine, offline, in seconds."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import Outcome, Session


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run a scripted long chat through the real engine, offline",
        description="A scripted 48-turn chat through the real plugin (both slots, as Hermes "
        "calls them), offline, in seconds. By default it writes into a temporary database that "
        "is deleted at the end; --db keeps it. It never adds its synthetic events to an "
        "existing database unless --force.",
        epilog="examples:\n  chronicle demo\n  chronicle demo --db demo.db && chronicle "
        'search "vault path" --db demo.db',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        help="keep the demo's database at PATH, a new file (default: a temporary database, "
        "deleted when the demo ends; never your Hermes database)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="let --db name an existing database and append the demo's synthetic events to it "
        "(the log is append-only: they stay)",
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON document on stdout, nothing else"
    )
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    from ..demo import run_demo

    return run_demo(s)
