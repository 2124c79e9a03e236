"""Read-only counts for the `chronicle` command: what a database holds, at a glance.

Invariant: only reads, through the store's reading connection; never writes, never decodes
payloads (so an event type this build does not know still counts).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ..chronicle.store import SQLiteChronicleStore
from ..chronicle.stores import chronicle_of
from ..log.store import SQLiteEventStore, sqlite_errors
from .exits import CommandFailed, Exit

if TYPE_CHECKING:
    from ..log.postgres import PostgresEventStore

__all__ = [
    "file_sizes",
    "event_counts",
    "session_rows",
    "resolve_session",
    "chronicle_rows",
    "has_table",
    "LATEST",
    "EventCount",
    "SessionRow",
    "ChronicleRow",
]

LATEST = ("latest", "@")  # what --session accepts for the most recent conversation


class EventCount(TypedDict):
    namespace: str
    type: str
    count: int
    first_seq: int
    last_seq: int


class SessionRow(TypedDict):
    session: str
    events: int
    first_seq: int
    last_seq: int
    started: str
    last_active: str


class ChronicleRow(TypedDict):
    chronicle: str
    sections: int
    current: int
    through_seq: int


def file_sizes(path: str | os.PathLike[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            out[p.name] = p.stat().st_size
    return out


def sqlite_store(store: SQLiteEventStore | PostgresEventStore, what: str) -> SQLiteEventStore:
    """`store`, when it is a SQLite file: `what` (a command's work on the file itself: its pages,
    its integrity) has no PostgreSQL counterpart here, and is refused on a server's store."""
    if isinstance(store, SQLiteEventStore):
        return store
    raise CommandFailed(
        f"{what} works on a SQLite file, and config.yaml's chronicle.store names a PostgreSQL "
        "server: use the server's own tools (pg_dump, amcheck), or --db PATH for a file",
        Exit.USAGE,
    )


def has_table(store: SQLiteEventStore, name: str) -> bool:
    with sqlite_errors("reading the schema"), store.reading() as conn:
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
    return row is not None


def event_counts(store: SQLiteEventStore | PostgresEventStore) -> list[EventCount]:
    rows = store.type_counts()
    return [
        EventCount(namespace=ns, type=t, count=n, first_seq=lo, last_seq=hi)
        for ns, t, n, lo, hi in rows
    ]


def session_rows(
    store: SQLiteEventStore | PostgresEventStore, limit: int | None = None
) -> list[SessionRow]:
    """Sessions seen in the log, most recent first."""
    rows = store.session_counts(limit)
    return [
        SessionRow(session=s, events=n, first_seq=lo, last_seq=hi, started=t0, last_active=t1)
        for s, n, lo, hi, t0, t1 in rows
    ]


def resolve_session(store: SQLiteEventStore | PostgresEventStore, given: str) -> str:
    """A session as a person names it: `latest` (or `@`), a whole id, or an unambiguous prefix
    of one. An id the database does not hold is refused, naming the ones it does."""
    known = [str(r["session"]) for r in session_rows(store)]
    if given in LATEST:
        if not known:
            raise CommandFailed("the database holds no conversation yet", Exit.NOT_FOUND)
        return known[0]
    if given in known:
        return given
    matches = [k for k in known if k.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise CommandFailed(
            f"session {given!r} is ambiguous: it starts {len(matches)} ids "
            f"({', '.join(matches[:5])}{', …' if len(matches) > 5 else ''}); type more of it",
            Exit.USAGE,
        )
    recent = ", ".join(known[:5]) or "none"
    where = store.path if isinstance(store, SQLiteEventStore) else "the PostgreSQL store"
    raise CommandFailed(
        f"no session {given!r} in {where}; the most recent are: {recent} "
        "(`chronicle tree` lists them all; `--session latest` picks the newest)",
        Exit.NOT_FOUND,
    )


def chronicle_rows(store: SQLiteEventStore | PostgresEventStore) -> list[ChronicleRow]:
    """Each chronicle in the database with its section counts and the seq it is folded through."""
    if isinstance(store, SQLiteEventStore):
        if not has_table(store, "sections"):
            return []
        rows = SQLiteChronicleStore(store, migrated=True).summary()  # (reads; migrates nothing)
    else:  # PostgreSQL: its chronicle store migrates on open, as every host's core does
        rows = chronicle_of(store).summary()
    return [
        ChronicleRow(chronicle=name, sections=n, current=cur, through_seq=hi)
        for name, n, cur, hi in rows
    ]
