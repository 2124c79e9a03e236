"""The scheduler's parts for whichever store the log is in (`tables.SchedulerTables`).

Its own module so that `tables.py` (the parts' rules) and `postgres.py` (PostgreSQL's parts,
which build on those rules) never import each other; the driver is imported only when a
PostgreSQL store is handed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..log.store import SQLiteEventStore
from .tables import SQLiteSchedulerTables

if TYPE_CHECKING:
    from ..log.postgres import PostgresEventStore
    from .postgres import PostgresSchedulerTables

__all__ = ["open_tables"]


def open_tables(
    store: SQLiteEventStore | PostgresEventStore,
) -> SQLiteSchedulerTables | PostgresSchedulerTables:
    """The scheduler's parts in `store`'s database, migrated."""
    if isinstance(store, SQLiteEventStore):
        return SQLiteSchedulerTables(store)
    from .postgres import PostgresSchedulerTables  # the driver only for a server database

    return PostgresSchedulerTables(store)
