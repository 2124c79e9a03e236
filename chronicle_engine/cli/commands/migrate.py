"""`chronicle migrate --to postgresql://...`: this database's log, sections and session tree,
copied into a PostgreSQL database in one step, with progress.

What is copied is everything that is not derived: the log (every event at its own seq, payloads
exactly, a batch per transaction, so an interrupted run resumes) and every chronicle's sections
(superseded ones too). The session tree is then folded there from the copied log. Recall's index,
consolidation units and the scheduler's jobs are projections or passing state: they are built
from the log by whatever runs on the database next.

The password never comes from the command line or config.yaml: libpq reads PGPASSWORD or
~/.pgpass, and a URL or conninfo that holds one is refused before anything connects.

After it, point Hermes at the migrated database with `chronicle.store` in config.yaml
(docs/scaling.md); recall's index and the scheduler's tables are built there by the first core
that opens it.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..exits import CommandFailed, Exit
from ..options import add_common_options, examples

if TYPE_CHECKING:
    from rich.console import Console

    from ..app import Outcome, Session


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "migrate",
        help="copy this database's log, sections and session tree into PostgreSQL",
        description="Copies every event at its own seq and every chronicle's sections into the "
        "PostgreSQL database --to names (empty, or holding the beginning of this same log: a "
        "run that was interrupted resumes), then folds the session tree there. The password "
        "comes from PGPASSWORD or ~/.pgpass, never from the command line.",
        epilog=examples(
            "PGPASSWORD=... chronicle migrate --to postgresql://chronicle@db.internal/chronicle",
            "chronicle migrate --db other.db --to postgresql://me@127.0.0.1:5432/memory --json",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the PostgreSQL database, e.g. postgresql://chronicle@db.internal/chronicle",
    )
    add_common_options(p)
    p.set_defaults(run=migrate)


def conninfo_without_password(given: str) -> str:
    """`given` if it names a PostgreSQL database and holds no password; else CommandFailed."""
    if not given.startswith(("postgresql://", "postgres://")):
        raise CommandFailed(
            f"--to takes a postgresql:// URL, not {given.split('://')[0]!r}", Exit.USAGE
        )
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise CommandFailed(
            "migrating to PostgreSQL needs psycopg 3: pip install 'psycopg[binary]>=3.1'",
            Exit.FAILED,
        ) from None
    try:
        parts = conninfo_to_dict(given)
    except Exception as exc:  # psycopg's ProgrammingError; its text names what is wrong
        raise CommandFailed(
            f"--to is not a PostgreSQL URL libpq reads: {exc}", Exit.USAGE
        ) from None
    if parts.get("password"):
        raise CommandFailed(
            "--to holds a password; leave it out and put it in PGPASSWORD or ~/.pgpass "
            "(a password on the command line is visible to every user of this machine)",
            Exit.USAGE,
        )
    return given


def migrate(s: Session) -> Outcome:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from ... import transfer
    from ...chronicle.postgres import PostgresChronicleStore
    from ...log.events import EventReader
    from ...log.postgres import PostgresEventStore
    from ...log.projector import Projector
    from ...sessions.fold import SessionFold
    from ...sessions.postgres import PostgresSessionTables
    from ..app import Outcome

    conninfo = conninfo_without_password(s.args.to)
    core = s.core()
    stderr = Console(stderr=True)
    dest = PostgresEventStore(conninfo, busy_timeout_ms=core.config.settings.busy_timeout_ms)
    try:
        total = core.store.count()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=stderr,
            disable=s.json,
            transient=True,
        ) as bar:
            task = bar.add_task("copying events", total=total)
            held, copied = transfer.copy_log(
                core.store, dest, progress=lambda n: bar.advance(task, n)
            )
            bar.update(task, description="carrying sections")
            sections = transfer.copy_sections(core.chronicle(), PostgresChronicleStore(dest))
            bar.update(task, description="folding the session tree")
            tables = PostgresSessionTables(dest)
            reader = EventReader(dest, core.upcasts, core.types)
            Projector(tables, reader, [SessionFold()], batch_size=2000).catch_up()
        if dest.count() != total or dest.last_seq() != core.store.last_seq():
            raise CommandFailed(
                f"the copy holds {dest.count()} events up to seq {dest.last_seq()}, the source "
                f"{total} up to {core.store.last_seq()}: another writer changed one of them "
                "during the run; stop it and run migrate again (it resumes)",
                Exit.FAILED,
            )
    finally:
        dest.close()
    data = {
        "to": conninfo,
        "events": total,
        "already_there": held,
        "copied": copied,
        "sections": sections,
        "last_seq": core.store.last_seq(),
    }

    def draw(console: Console) -> None:
        console.print(
            f"copied {copied} events ({held} were already there; {total} in all, up to seq "
            f"{data['last_seq']}) and {sum(sections.values())} new sections of "
            f"{len(sections)} chronicles; the session tree is folded there"
        )

    return Outcome(data, draw)
