"""A named chronicle in whichever store holds the log: SQLite's sections table, or the
PostgreSQL twin's (imported only when a PostgreSQL store is given, so SQLite needs no psycopg).

The rooms that write sections (compaction, forgetting) are typed against SQLite's store and take
either at run time; both chronicle stores keep the same methods (`ChronicleStoreBase`), and a
connection from the store's own `atomic()` is the one each takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ..log.store import SQLiteEventStore
from .store import SQLiteChronicleStore

if TYPE_CHECKING:
    from ..log.postgres import PostgresEventStore

__all__ = ["chronicle_of"]


def chronicle_of(
    store: SQLiteEventStore | PostgresEventStore, name: str = "default"
) -> SQLiteChronicleStore:
    """The chronicle `name` in `store`, in that store's dialect. Typed as SQLite's, whose
    methods the PostgreSQL twin shares: the callers are typed against the SQLite store."""
    if isinstance(store, SQLiteEventStore):
        return SQLiteChronicleStore(store, name)
    from .postgres import PostgresChronicleStore

    return cast(SQLiteChronicleStore, PostgresChronicleStore(store, name))
