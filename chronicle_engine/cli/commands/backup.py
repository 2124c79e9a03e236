"""`chronicle backup`: an online copy, safe while Hermes is writing."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..options import add_common_options

if TYPE_CHECKING:
    from rich.console import Console

    from ..app import Outcome, Session


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "backup",
        help="copy the database online (SQLite backup API; safe against a running writer)",
        description="Never copy a live WAL database with cp: the copy can silently miss committed "
        "transactions. This uses SQLite's backup API, folds the WAL in, and writes one "
        "self-contained file.",
    )
    p.add_argument(
        "dest",
        nargs="?",
        help="the new file (default: chronicle-YYYYmmdd-HHMMSS.db next to the database)",
    )
    add_common_options(p)
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    from ... import transfer
    from ..app import Outcome
    from ..inventory import sqlite_store

    core = s.core()
    store = sqlite_store(core.store, "backup")
    if s.args.dest:
        dest = Path(s.args.dest).expanduser()
    else:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        dest = s.db_path.with_name(f"chronicle-{stamp}.db")
    with Progress(
        TextColumn("backing up"),
        BarColumn(),
        TaskProgressColumn(),
        console=Console(stderr=True),
        disable=s.json,
        transient=True,
    ) as bar:
        task = bar.add_task("backup", total=None)
        transfer.backup(
            store,
            dest,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    data = {"source": str(s.db_path), "backup": str(dest), "bytes": dest.stat().st_size}

    def draw(console: Console) -> None:
        console.print(f"backed up {data['source']} to {data['backup']} ({data['bytes']} bytes)")

    return Outcome(data, draw)
