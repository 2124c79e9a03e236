"""The session tree's tables on PostgreSQL, shared by every host that opens the same database.

The same fold and readers as on SQLite (`fold.py`, `paths.py`: one dialect, `Statements`), over
the same two tables. Writers take turns as under SQLite's one writer: every outermost tree write
transaction first takes an advisory lock (`pg_advisory_xact_lock`, held to its commit), then
folds what other hosts appended (`fold_pending`), so two hosts never fold the same events at
once, and the fold's position moves in the transaction that wrote the rows it covers. (The log's
append already holds the counter's row lock to commit, so the lock costs capture no
concurrency it had.) A lock waited on past the store's `busy_timeout_ms` is StoreBusy.

`session_heads.rowid` stands in for SQLite's implicit rowid (the order heads were first written,
which breaks ties between heads started at the same seq in `lineage()`).

The spill is this host's: given a local `spill_path` (a file name the spill's files are named
after; the wiring's choice), captured events the server would not take (busy past the timeout,
unreachable, read-only) wait on this host's disk and are written, once, by this host's next tree
write. Without one, such a write raises to the caller and keeps nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from ..log.postgres import Connection, PostgresEventStore, PostgresMigration, PostgresTables
from ..log.store import PendingEvent, StoredEvent
from ..log.tables import Statements
from .fold import FOLD_NAME
from .tables import SessionTables

__all__ = ["PG_SESSION_MIGRATIONS", "PostgresSessionTables"]

_SCHEMA = (
    """
    CREATE TABLE session_entries (
        entry_id  TEXT PRIMARY KEY,
        seq       BIGINT NOT NULL,
        session   TEXT NOT NULL,
        parent_id TEXT,
        kind      TEXT NOT NULL,
        fp        TEXT,
        role      TEXT,
        target_id TEXT
    )
    """,
    "CREATE INDEX session_entries_by_session ON session_entries(session, seq)",
    "CREATE INDEX session_entries_by_seq ON session_entries(seq)",
    """
    CREATE TABLE session_heads (
        session        TEXT PRIMARY KEY,
        conversation   TEXT NOT NULL,
        lineage_root   TEXT NOT NULL,
        parent_session TEXT,
        fork_seq       BIGINT,
        reason         TEXT NOT NULL,
        leaf_id        TEXT,
        started_seq    BIGINT NOT NULL,
        rowid          BIGSERIAL NOT NULL
    )
    """,
    "CREATE INDEX session_heads_by_conversation ON session_heads(conversation)",
    "CREATE INDEX session_heads_by_root ON session_heads(lineage_root, started_seq)",
)


def _m001_tree(conn: Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


_TREE_LOCK = 0x73657373  # the advisory lock tree writers take turns on

PG_SESSION_MIGRATIONS: tuple[PostgresMigration, ...] = (
    # SQLite's m001 and m002 in one step: the index by root is there from the start.
    PostgresMigration("sessions.m001_tree", _m001_tree),
)


class PostgresSessionTables(PostgresTables):
    """The session tree's tables in the PostgreSQL store's database."""

    def __init__(self, store: PostgresEventStore, *, spill_path: str | None = None) -> None:
        super().__init__(store)
        store.migrate(PG_SESSION_MIGRATIONS)
        self._spill_path = spill_path

    @property
    def spill_path(self) -> str | None:
        return self._spill_path

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[Statements]:
        with super().writing(what) as conn:
            if self.depth == 1:
                conn.execute("SELECT pg_advisory_xact_lock(?)", (_TREE_LOCK,))
            yield conn

    def last_seq(self) -> int:
        return self.store.last_seq()

    def fold_start(self, conn: Statements) -> tuple[int, int]:
        # One round trip, read after the lock: every writer before us has committed.
        return self.read_position_and_end(conn, FOLD_NAME)

    def append(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        # No savepoint: a refused append fails the tree's whole write (the spill's replay,
        # which goes on after a failure, wraps its appends in a savepoint of its own).
        return self.store.append(events, guarded=False)


def _conforms(tables: PostgresSessionTables) -> SessionTables:
    return tables  # the type checker holds the PostgreSQL tables to the protocol
