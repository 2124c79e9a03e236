"""A room's tables in the database the log lives in, on either store.

A room above the log that keeps tables of its own (the scheduler's queue, the chronicle's
sections) writes its rules once, over `Tables`: SQL with `?` placeholders, run through the
transaction, reads and error mapping its store gives. `SQLiteTables` gives SQLite's;
`postgres.PostgresTables` gives PostgreSQL's and turns `?` into psycopg's `%s`. What the rules
cannot share (a row lock, an upsert that must hold across hosts) each room's PostgreSQL twin
writes itself.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from .store import Row, SQLiteEventStore, sqlite_errors

__all__ = ["SQLConnection", "SQLCursor", "SQLiteTables", "Tables"]


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


class SQLiteTables(Tables[SQLiteEventStore, sqlite3.Connection]):
    """A room's tables in the SQLite store's database."""

    def _atomic(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.store.atomic()

    def _reading(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.store.reading()

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return sqlite_errors(what)
