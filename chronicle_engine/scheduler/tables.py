"""Where the scheduler's tables live: the parts of one database the scheduler works through.

The `Scheduler`, the consolidation fold and the maintenance sweeps are written once; what a
database gives them is collected here (`stores.open_tables` picks the database's own): its job queue, its statements (`?`
placeholders on either store), the chronicle store consolidation writes sections to, and, on a
server database, the lock that makes a fold's transaction the only one of its kind across every
host. SQLite needs no such lock: its one writer already serialises every write transaction.

Each database's parts migrate what the scheduler reads and writes (the chronicle's sections, the
queue, the watermarks, the sweep cursors, the consolidation fold's open units) when built.
PostgreSQL's (`postgres.PostgresSchedulerTables`) are imported only when a PostgreSQL store is
handed in, so the embedded default never imports the driver.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Generic, TypeVar

from ..chronicle.store import CHRONICLE_MIGRATIONS, ChronicleStoreBase, SQLiteChronicleStore
from ..log.port import LogStore
from ..log.projector import FoldedStore
from ..log.store import SQLiteEventStore
from ..log.tables import SQLConnection, SQLiteTables, Statements, Tables
from .queue import JobQueue, JobQueueBase
from .schema import SCHEDULER_MIGRATIONS

__all__ = ["SchedulerTables", "SQLiteSchedulerTables"]

S = TypeVar("S")
C = TypeVar("C", bound=SQLConnection)


class SchedulerTables(ABC, Generic[S, C]):
    """The scheduler's parts in one database (`S` its event store, `C` its connection).

    `log` is the event store as the scheduler reads and appends to it; `folded` the same store
    as a projector folds through it; `tables` reaches the scheduler's own tables through
    `Statements`; `chronicles` is the chronicle named "default" in this database (`named()`
    gives the others); `queue()` builds the job queue."""

    def __init__(
        self, store: S, tables: Tables[S, C], chronicles: ChronicleStoreBase[S, C]
    ) -> None:
        self.store = store
        self.tables = tables
        self.chronicles = chronicles

    @property
    @abstractmethod
    def log(self) -> LogStore: ...

    @property
    @abstractmethod
    def folded(self) -> FoldedStore[C]: ...

    @property
    def embedded(self) -> bool:
        """True for SQLite (one file, one machine): the sweeps that are SQLite's own run."""
        return False

    @abstractmethod
    def queue(
        self, *, clock: Callable[[], float], lease_seconds: float, max_attempts: int
    ) -> JobQueueBase[S, C]: ...

    def lock(self, conn: Statements, name: str) -> None:
        """Inside a write transaction: make it the only one holding `name` until it ends, on
        every host. Nothing to do where write transactions already run one at a time."""


class SQLiteSchedulerTables(SchedulerTables[SQLiteEventStore, sqlite3.Connection]):
    """The scheduler's parts in the SQLite store's database."""

    def __init__(self, store: SQLiteEventStore) -> None:
        store.migrate((*CHRONICLE_MIGRATIONS, *SCHEDULER_MIGRATIONS))
        super().__init__(store, SQLiteTables(store), SQLiteChronicleStore(store, migrated=True))

    @property
    def log(self) -> LogStore:
        return self.store

    @property
    def folded(self) -> FoldedStore[sqlite3.Connection]:
        return self.store

    @property
    def embedded(self) -> bool:
        return True

    def queue(
        self, *, clock: Callable[[], float], lease_seconds: float, max_attempts: int
    ) -> JobQueue:
        return JobQueue(
            self.store, clock=clock, lease_seconds=lease_seconds, max_attempts=max_attempts
        )
