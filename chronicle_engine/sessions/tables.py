"""Where the session tree's tables live: what the tree needs of its database, on either store.

The tree's fold and readers write one dialect (`log/tables.py`'s `Statements`); a store's
session tables give them its transaction, its reads, its error mapping and its migrations, and
stand in for the store when the tree's Projector folds the log (`projector.FoldedStore`).
`SQLiteSessionTables` is the embedded default; `postgres.PostgresSessionTables` its twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from ..log.store import PendingEvent, SQLiteEventStore, StoredEvent
from ..log.tables import SQLiteTables, Statements
from .fold import FOLD_NAME, MIGRATIONS, EntryRow

__all__ = ["SessionTables", "SQLiteSessionTables"]


class SessionTables(Protocol):
    """The session tree's tables in one database (built migrated)."""

    @property
    def spill_path(self) -> str | None:
        """The database file the spill keeps refused writes beside (None: no spill)."""
        ...

    @property
    def depth(self) -> int: ...

    def writing(self, what: str) -> AbstractContextManager[Statements]: ...

    def fold_start(self, conn: Statements) -> tuple[int, int]:
        """Inside a tree write: the tree fold's position and the log's end."""
        ...

    def append(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Inside a tree write: the log's append (the tree write fails with a refused one)."""
        ...

    @property
    def plans_unlocked(self) -> bool:
        """Whether a capture may plan outside the tree's write lock and have `append_planned`
        take its events (True where writers on other hosts would otherwise queue on the lock
        while each plans: PostgreSQL)."""
        ...

    def append_planned(
        self,
        session: str,
        leaf: str | None,
        events: Sequence[PendingEvent],
        entries: Sequence[EntryRow],
    ) -> list[StoredEvent] | None:
        """Outside any transaction: append `events` of `session`, planned while its leaf was
        `leaf`, and fold them as `entries` (`fold.entry_rows`), at once; None, storing nothing,
        when the plan no longer holds (the leaf moved, something of the tree waits to be
        folded, or one of the events is in the log already)."""
        ...

    def reading(self, what: str) -> AbstractContextManager[Statements]: ...

    # `projector.FoldedStore[Statements]`: the tree's Projector folds through these.

    def atomic(self) -> AbstractContextManager[Statements]: ...

    def errors(self, what: str) -> AbstractContextManager[None]: ...

    def position(self, fold: str) -> int: ...

    def read_position(self, conn: Statements, fold: str, /) -> int:
        """A fold's position as `conn` sees it (`Tables.read_position`)."""
        ...

    def last_seq(self) -> int: ...

    def held_position(self, conn: Statements, fold: str, /) -> int: ...

    def set_position(self, conn: Statements, fold: str, position: int, /) -> None: ...


class SQLiteSessionTables(SQLiteTables):
    """The session tree's tables in the SQLite store's database."""

    def __init__(self, store: SQLiteEventStore) -> None:
        super().__init__(store)
        store.migrate(MIGRATIONS)

    @property
    def spill_path(self) -> str | None:
        return self.store.path

    def last_seq(self) -> int:
        return self.store.last_seq()

    def fold_start(self, conn: Statements) -> tuple[int, int]:
        return self.read_position_and_end(conn, FOLD_NAME)  # one statement

    def append(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        # No savepoint: a refused append fails the tree's whole write (the spill's replay,
        # which goes on after a failure, wraps its appends in a savepoint of its own).
        return self.store.append(events, guarded=False)

    @property
    def plans_unlocked(self) -> bool:
        return False  # one writer at a time on one machine: a capture plans inside its write

    def append_planned(
        self,
        session: str,
        leaf: str | None,
        events: Sequence[PendingEvent],
        entries: Sequence[EntryRow],
    ) -> list[StoredEvent] | None:
        return None  # never asked (plans_unlocked is False): plan inside `writing()`


def _conforms(tables: SQLiteSessionTables) -> SessionTables:
    return tables  # the type checker holds the SQLite tables to the protocol
