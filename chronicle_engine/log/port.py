"""What an event log store must do, whatever database holds it.

Invariants every store keeps (tests/test_log_contract.py runs the same tests against each):
- Append-only: the database itself refuses UPDATE and DELETE of an event.
- `seq` rises in commit order: a reader that has seen seq N never later finds an event below N
  it had not seen, so a fold's position (the last seq it read) is always safe to resume from,
  however many writers append at once. (Numbers may be skipped: SQLite's AUTOINCREMENT spends
  one on a duplicate `append_new` ignores. The PostgreSQL store skips none of its own; a log
  restored from an export keeps its source's gaps.)
- A payload reads back exactly as it was appended (after a lone surrogate is escaped, as
  `storable.py` says), whatever its size or script.
- `append_new` stores an event whose id the log already holds nothing twice, across threads,
  processes and hosts.
- Everything a caller does inside one `atomic()` block commits together or not at all; nested
  blocks are savepoints. The log's own tables (events, fold positions, migrations) are created
  by `migrate` when a store opens.

Two stores implement it: `store.SQLiteEventStore` (the embedded default, the one the core uses)
and `postgres.PostgresEventStore` (partial: the rooms above with a twin of their own run on it;
nothing selects it for a whole core yet).
The SQLite-only parts (`patience`, `checkpoint`, `reading`, the `sqlite3.Connection` a fold
writes its own tables through) are not part of this port: they are what moving a room's tables
to PostgreSQL has to replace.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Never, Protocol, TypeVar

from .store import Migration, PendingEvent, SQLiteEventStore, StoredEvent

__all__ = ["EventLogStore", "LogStore"]

Conn = TypeVar("Conn", covariant=True)
Step = TypeVar("Step", contravariant=True)


class EventLogStore(Protocol[Conn, Step]):
    """An append-only event log. `Conn` is the store's connection type (what `atomic()` hands a
    caller writing its own tables in the same transaction); `Step` its migration type."""

    def append(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Store every event, in order, in one transaction; a duplicate id is an error."""
        ...

    def append_new(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Store the events whose id the log does not hold yet (the first of an id repeated in
        `events`); return those stored, in order. One transaction."""
        ...

    def restore(self, events: Sequence[StoredEvent]) -> list[StoredEvent]:
        """Store exported events at their own seqs (ids held are skipped; the rest must rise
        above the log's last seq). One transaction."""
        ...

    def read(
        self,
        *,
        after: int = 0,
        upto: int | None = None,
        session: str | None = None,
        sessions: Sequence[str] | None = None,
        namespaces: Sequence[str] | None = None,
        limit: int | None = None,
        by_seq: bool = False,
    ) -> Iterator[StoredEvent]:
        """Events with `after < seq <= upto` (of those sessions and namespaces), in seq order."""
        ...

    def get(self, seq: int) -> StoredEvent | None: ...

    def get_by_id(self, event_id: str) -> StoredEvent | None: ...

    def last_seq(self) -> int:
        """The highest committed seq (0 for an empty log)."""
        ...

    def count(self) -> int: ...

    # The named questions the rooms above ask instead of running SQL on the log's tables.

    def get_many(self, seqs: Iterable[int]) -> dict[int, StoredEvent]: ...

    def seqs_of(self, ids: Iterable[str]) -> dict[str, int]: ...

    def holds(self, seqs: Iterable[int]) -> set[int]: ...

    def any_after(
        self, after: int, *, namespaces: Sequence[str] | None = None, session: str | None = None
    ) -> bool: ...

    def latest(
        self, namespace: str, type_: str, *, sessions: Sequence[str]
    ) -> StoredEvent | None: ...

    def seqs_containing(self, lo: int, hi: int, namespace: str, text: str) -> list[int]: ...

    def type_counts(self) -> list[tuple[str, str, int, int, int]]: ...

    def atomic(self) -> AbstractContextManager[Conn]:
        """One transaction (a savepoint when nested); the only way anything writes."""
        ...

    def position(self, fold: str) -> int:
        """The last seq a fold has folded (0 before its first)."""
        ...

    def migrate(self, migrations: Iterable[Step]) -> list[str]:
        """Apply the migrations not yet recorded, each atomically with its record."""
        ...

    def migrated(self) -> set[str]:
        """The names of the migrations recorded in the database (by this build or another)."""
        ...

    def close(self) -> None: ...


def _sqlite_conforms(store: SQLiteEventStore) -> EventLogStore[sqlite3.Connection, Migration]:
    return store  # the type checker holds the SQLite store to the port


LogStore = EventLogStore[object, Never]
"""Either store, as a reader that neither writes through its connection nor migrates it sees it
(the event reader, a room whose tables come from its own `Tables`)."""
