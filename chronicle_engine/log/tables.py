"""A room's tables in the database the log lives in, on either store.

A room above the log that keeps tables of its own (the scheduler's queue, the chronicle's
sections) writes its rules once, over `Tables`: SQL with `?` placeholders, run through the
transaction, reads and error mapping its store gives. `SQLiteTables` gives SQLite's;
`postgres.PostgresTables` gives PostgreSQL's and turns `?` into psycopg's `%s`. What the rules
cannot share (a row lock, an upsert that must hold across hosts) each room's PostgreSQL twin
writes itself.

A room whose SQL runs in many small functions handed a connection (the session tree's fold and
path readers) takes `Statements` instead: a connection that reads `?` placeholders on either
database (`statements` gives it; on SQLite it is the connection itself). Its SQL keeps to what
both dialects read alike: `?` only as a placeholder, no literal `%`, `ON CONFLICT` rather than
`INSERT OR ...`, no `rowid` unless the PostgreSQL table declares a column of that name.
"""

from __future__ import annotations

import contextlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from ..errors import UsageError
from .store import Row, SQLiteEventStore, sqlite_errors

__all__ = [
    "SQLConnection",
    "SQLCursor",
    "SQLiteTables",
    "Statements",
    "TableAccess",
    "Tables",
    "insert_rows",
]


class SQLCursor(Protocol):
    """What a query hands back, on either database."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> list[Row]: ...

    def __iter__(self) -> Iterator[Row]: ...


class SQLConnection(Protocol):
    """What a room's SQL needs of a connection: sqlite3's and psycopg's `execute` both fit."""

    def execute(self, sql: str, params: Sequence[object] = ..., /) -> SQLCursor: ...


class Statements(SQLConnection, Protocol):
    """A connection that reads SQL with `?` placeholders on either database."""

    def executemany(self, sql: str, rows: Iterable[Sequence[object]], /) -> object: ...


def look_up(conn: Statements, sql: str, params: Sequence[object]) -> list[Row]:
    """The rows of `sql`, a look-up by key (`WHERE key IN (?, ...)`), planned for these values
    where the store would keep one plan for any (PostgreSQL, `QmarkConnection.look_up`): a plan
    kept while the table was young is a sequential scan, and stays one as the table grows."""
    fresh = getattr(conn, "look_up", None)
    return conn.execute(sql, params).fetchall() if fresh is None else fresh(sql, params)


def insert_rows(conn: Statements, sql: str, rows: Sequence[Sequence[object]]) -> None:
    """`conn.executemany(sql, rows)` for an INSERT of one VALUES row into columns that are all
    text or integers (the caller vouches for it): on PostgreSQL one statement over arrays
    (`QmarkConnection.insert_rows`), elsewhere `executemany`."""
    bulk = getattr(conn, "insert_rows", None)
    if bulk is None:
        conn.executemany(sql, rows)
    else:
        bulk(sql, rows)


class TableAccess(Protocol):
    """A room's tables as its `Statements` reach them, whatever the store (any `Tables`)."""

    def writing(self, what: str) -> AbstractContextManager[Statements]: ...

    def reading(self, what: str) -> AbstractContextManager[Statements]: ...


Store = TypeVar("Store")
Conn = TypeVar("Conn", bound=SQLConnection)


class Tables(ABC, Generic[Store, Conn]):
    """A room's tables in `store`'s database."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @abstractmethod
    def _atomic(self) -> AbstractContextManager[Conn]:
        """One transaction (a savepoint when nested)."""

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Conn]:
        """A connection to read from."""

    @abstractmethod
    def _errors(self, what: str) -> AbstractContextManager[None]:
        """The driver's errors turned into Chronicle's own."""

    def _sql(self, text: str) -> str:
        """`text` with its `?` placeholders in the driver's form."""
        return text

    @abstractmethod
    def statements(self, conn: object) -> Statements:
        """`conn` (this store's connection, or one `statements` already gave) reading `?`
        placeholders."""

    @property
    @abstractmethod
    def depth(self) -> int:
        """How deeply this thread is nested in the store's transactions (0: in none)."""

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[Statements]:
        """One transaction (a savepoint when nested), its errors as Chronicle's own."""
        with self._errors(what), self._atomic() as conn:
            yield self.statements(conn)

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[Statements]:
        """A connection to read from, its errors as Chronicle's own."""
        with self._errors(what), self._reading() as conn:
            yield self.statements(conn)

    # A room that folds the log through these tables hands them to its Projector as the store
    # (`projector.FoldedStore`): the fold then writes through `Statements` on either database.

    def atomic(self) -> AbstractContextManager[Statements]:
        return self.writing("writing")

    def errors(self, what: str) -> AbstractContextManager[None]:
        return self._errors(what)

    def position(self, fold: str) -> int:
        with self.reading("reading a fold position") as conn:
            return self.read_position(conn, fold)

    @staticmethod
    def read_position(conn: Statements, fold: str) -> int:
        """A fold's position as `conn` sees it (the log's `fold_positions`)."""
        row = conn.execute("SELECT position FROM fold_positions WHERE fold = ?", (fold,)).fetchone()
        return int(row[0]) if row else 0

    def held_position(self, conn: Statements, fold: str, /) -> int:
        """`fold`'s position inside the write transaction `conn`, held against every other
        writer until it ends: SQLite's one writer holds it already; PostgreSQL locks the row
        (`PostgresTables`)."""
        return self.read_position(conn, fold)

    @staticmethod
    def read_position_and_end(conn: Statements, fold: str) -> tuple[int, int]:
        """A fold's position and the log's last seq, as `conn` sees them, in one statement."""
        row = conn.execute(
            "SELECT (SELECT position FROM fold_positions WHERE fold = ?),"
            " (SELECT MAX(seq) FROM events)",
            (fold,),
        ).fetchone()
        return (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)

    @staticmethod
    def set_position(conn: Statements, fold: str, position: int, /) -> None:
        """Move a fold's position in `conn`'s transaction (the fold's own writes beside it)."""
        conn.execute(
            "INSERT INTO fold_positions(fold, position) VALUES (?, ?)"
            " ON CONFLICT(fold) DO UPDATE SET position = excluded.position",
            (fold, position),
        )


class SQLiteTables(Tables[SQLiteEventStore, sqlite3.Connection]):
    """A room's tables in the SQLite store's database."""

    def _atomic(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.store.atomic()

    def _reading(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.store.reading()

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return sqlite_errors(what)

    def statements(self, conn: object) -> Statements:
        if isinstance(conn, sqlite3.Connection):
            return conn
        raise UsageError(f"a SQLite store's tables take its sqlite3 connection, not {conn!r}")

    @property
    def depth(self) -> int:
        return self.store.depth
