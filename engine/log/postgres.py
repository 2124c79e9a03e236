"""The event log on PostgreSQL (psycopg 3): the same port as the SQLite store, for a log shared
by several hosts.

PARTIAL: this is the log alone (events, fold positions, migrations). Nothing above the log runs
on PostgreSQL yet (recall's full-text index, the scheduler's queue, chronicle sections and the
session tree are SQLite tables), so no setting selects this store; the contract suite
(tests/test_log_contract.py) runs it beside the SQLite store.

Invariants:
- Append-only in the database: triggers refuse UPDATE, DELETE and TRUNCATE of `events`.
- `seq` is gap-free and in commit order. A sequence would not do: two transactions that draw
  N and N+1 can commit in the other order, and a reader that saw N+1 first would resume past N
  for ever. Every append instead takes the one row of `log_counter` FOR UPDATE and assigns the
  next seqs from it in the same transaction; the row lock serialises appenders (as SQLite's
  write lock does) until commit, so N is committed before anyone can draw N+1, and a rolled
  back append gives its numbers back.
- A payload is stored as the same JSON text the SQLite store writes, in a `text` column (not
  `jsonb`, which would reorder keys and normalise numbers): it reads back exactly.
- One connection per thread, autocommit outside `atomic()`; `atomic()` is psycopg's
  transaction block, a savepoint when nested. A lock waited on longer than `busy_timeout_ms`
  becomes `StoreBusy`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import TupleRow

from ..errors import (
    AppendOnlyViolation,
    StoreBusy,
    StoreError,
    StoreFull,
    StoreReadOnly,
)
from .port import EventLogStore
from .store import (
    EVENT_COLUMNS,
    Envelope,
    PendingEvent,
    StoredEvent,
    read_pages,
    row_to_event,
    storable,
    utc_now,
)

__all__ = ["PostgresEventStore", "PostgresMigration", "postgres_errors"]

Connection = psycopg.Connection[TupleRow]

_MIGRATION_LOCK = 0x6368726F6E  # advisory lock key: one process migrates a database at a time


@dataclass(frozen=True, slots=True)
class PostgresMigration:
    """A named schema step on PostgreSQL (names share the SQLite store's namespace)."""

    name: str
    apply: Callable[[Connection], None]


_EVENT_SCHEMA = (
    """
    CREATE TABLE events (
        seq        BIGINT  PRIMARY KEY,
        id         TEXT    NOT NULL UNIQUE,
        namespace  TEXT    NOT NULL,
        type       TEXT    NOT NULL,
        version    INTEGER NOT NULL,
        created_at TEXT    NOT NULL,
        session    TEXT,
        payload    TEXT    NOT NULL
    )
    """,
    "CREATE INDEX events_by_session ON events(session, seq)",
    "CREATE INDEX events_by_type ON events(namespace, type, seq)",
    """
    CREATE TABLE log_counter (
        one  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
        last BIGINT  NOT NULL
    )
    """,
    "INSERT INTO log_counter(one, last) VALUES (TRUE, 0)",
    """
    CREATE FUNCTION chronicle_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'chronicle: events are append-only';
    END
    $$
    """,
    """
    CREATE TRIGGER events_never_update BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION chronicle_events_append_only()
    """,
    """
    CREATE TRIGGER events_never_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION chronicle_events_append_only()
    """,
    "CREATE TABLE fold_positions (fold TEXT PRIMARY KEY, position BIGINT NOT NULL)",
)


def _m001_events(conn: Connection) -> None:
    for statement in _EVENT_SCHEMA:
        conn.execute(statement)


LOG_MIGRATIONS: tuple[PostgresMigration, ...] = (
    PostgresMigration("log.m001_events", _m001_events),
)


@contextlib.contextmanager
def postgres_errors(what: str) -> Iterator[None]:
    """The one place that turns psycopg's errors into Chronicle's own."""
    try:
        yield
    except (
        pg_errors.LockNotAvailable,
        pg_errors.DeadlockDetected,
        pg_errors.SerializationFailure,
        pg_errors.QueryCanceled,
    ) as exc:
        raise StoreBusy(
            f"{what}: the database stayed locked by another writer; retry later"
        ) from exc
    except (pg_errors.DiskFull, pg_errors.OutOfMemory) as exc:
        raise StoreFull(f"{what}: the server refused the write ({exc}); free space on it") from exc
    except (pg_errors.ReadOnlySqlTransaction, pg_errors.InsufficientPrivilege) as exc:
        raise StoreReadOnly(
            f"{what}: the database is not writable for this user ({exc}); grant it INSERT on "
            "the log's tables or connect as its owner"
        ) from exc
    except pg_errors.RaiseException as exc:
        if "append-only" in str(exc):
            raise AppendOnlyViolation(f"{what}: {exc}") from exc
        raise StoreError(f"{what}: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"{what}: {exc}") from exc


class PostgresEventStore:
    """The append-only log in one PostgreSQL database (`conninfo`: a libpq connection string or
    URI; a password belongs in PGPASSWORD or a .pgpass file, not in it)."""

    def __init__(
        self,
        conninfo: str,
        *,
        busy_timeout_ms: int = 5000,
        connect_timeout_s: int = 10,
        migrations: Sequence[PostgresMigration] = (),
    ) -> None:
        self.conninfo = conninfo
        self.busy_timeout_ms = busy_timeout_ms
        self.connect_timeout_s = connect_timeout_s
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._connections_lock = threading.Lock()
        self._closed = False
        self.migrate(LOG_MIGRATIONS)
        if migrations:
            self.migrate(migrations)

    # -- connections -----------------------------------------------------------------------

    def _open(self) -> Connection:
        with postgres_errors("connecting to PostgreSQL"):
            conn = psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=self.connect_timeout_s
            )
            # Not the `options` keyword: it would replace options the conninfo sets.
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false)", (f"{int(self.busy_timeout_ms)}ms",)
            )
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    @property
    def connection(self) -> Connection:
        """This thread's connection."""
        if self._closed:
            raise StoreError("the PostgreSQL store is closed; open a new one")
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._open()
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def atomic(self) -> Iterator[Connection]:
        """One transaction; nested calls become savepoints. The only way anything writes."""
        conn = self.connection
        with postgres_errors("committing"), conn.transaction():
            yield conn

    # -- schema ----------------------------------------------------------------------------

    def migrate(self, migrations: Iterable[PostgresMigration]) -> list[str]:
        """Apply the migrations not yet recorded, each atomically with its record (one process
        at a time: an advisory lock held for the transaction)."""
        migrations = list(migrations)
        applied: list[str] = []
        with postgres_errors("migrating the schema"), self.atomic() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {str(row[0]) for row in conn.execute("SELECT name FROM migrations")}
            for migration in migrations:
                if migration.name in done:
                    continue
                with self.atomic() as inner:
                    migration.apply(inner)
                    inner.execute(
                        "INSERT INTO migrations(name, applied_at) VALUES (%s, %s)",
                        (migration.name, utc_now()),
                    )
                applied.append(migration.name)
        return applied

    # -- the log ---------------------------------------------------------------------------

    def append(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Append events in one transaction and return them as stored, in order."""
        if not events:
            return []
        events, texts = storable(events)
        with postgres_errors("appending events"), self.atomic() as conn:
            row = conn.execute(
                "UPDATE log_counter SET last = last + %s RETURNING last", (len(events),)
            ).fetchone()
            assert row is not None
            first = int(row[0]) - len(events) + 1
            return self._insert(conn, first, events, texts)

    def append_new(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Append the events whose id is not in the log yet (idempotent capture). One transaction."""
        if not events:
            return []
        events, texts = storable(events)
        with postgres_errors("appending events"), self.atomic() as conn:
            # The counter's row lock first: every appender is behind it, so no other
            # transaction can insert one of these ids between the look-up and the insert.
            row = conn.execute("SELECT last FROM log_counter FOR UPDATE").fetchone()
            assert row is not None
            last = int(row[0])
            seen = {
                str(i)
                for (i,) in conn.execute(
                    "SELECT id FROM events WHERE id = ANY(%s)", ([e.id for e in events],)
                )
            }
            fresh: list[PendingEvent] = []
            fresh_texts: list[str] = []
            for e, text in zip(events, texts, strict=True):
                if e.id not in seen:
                    seen.add(e.id)
                    fresh.append(e)
                    fresh_texts.append(text)
            if not fresh:
                return []
            conn.execute("UPDATE log_counter SET last = %s", (last + len(fresh),))
            return self._insert(conn, last + 1, fresh, fresh_texts)

    @staticmethod
    def _insert(
        conn: Connection, first: int, events: Sequence[PendingEvent], texts: list[str]
    ) -> list[StoredEvent]:
        rows = [
            (first + i, e.id, e.namespace, e.type, e.version, e.created_at, e.session, text)
            for i, (e, text) in enumerate(zip(events, texts, strict=True))
        ]
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO events({EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
        return [
            StoredEvent(
                Envelope(first + i, e.id, e.namespace, e.type, e.version, e.created_at, e.session),
                e.payload,
            )
            for i, e in enumerate(events)
        ]

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
        """Events with `after < seq <= upto`, in seq order, read a page at a time. (`by_seq` is
        a hint for SQLite's planner; PostgreSQL's chooses from its statistics.)"""
        where = ["seq > %s"]
        params: list[object] = []
        if upto is not None:
            where.append("seq <= %s")
            params.append(upto)
        if session is not None:
            where.append("session = %s")
            params.append(session)
        if sessions is not None:
            if not sessions:
                return
            where.append("session = ANY(%s)")
            params.append(list(sessions))
        if namespaces is not None:
            if not namespaces:
                return
            where.append("namespace = ANY(%s)")
            params.append(list(namespaces))
        sql = (
            f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq LIMIT %s"
        )

        def fetch(cursor: int, page: int) -> list[TupleRow]:
            with postgres_errors("reading events"):
                return self.connection.execute(sql, (cursor, *params, page)).fetchall()

        yield from read_pages(fetch, after, limit)

    def get(self, seq: int) -> StoredEvent | None:
        with postgres_errors("reading an event"):
            row = self.connection.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE seq = %s", (seq,)
            ).fetchone()
        return row_to_event(row) if row else None

    def get_by_id(self, event_id: str) -> StoredEvent | None:
        with postgres_errors("reading an event"):
            row = self.connection.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE id = %s", (event_id,)
            ).fetchone()
        return row_to_event(row) if row else None

    def last_seq(self) -> int:
        # Not the counter: it runs ahead of the rows while an append is uncommitted.
        with postgres_errors("reading the log's end"):
            row = self.connection.execute("SELECT MAX(seq) FROM events").fetchone()
        return int(row[0] or 0) if row else 0

    def count(self) -> int:
        with postgres_errors("counting events"):
            row = self.connection.execute("SELECT COUNT(*) FROM events").fetchone()
        return int(row[0]) if row else 0

    # -- fold positions ---------------------------------------------------------------------

    def position(self, fold: str, conn: Connection | None = None) -> int:
        with postgres_errors("reading a fold position"):
            row = (
                (conn or self.connection)
                .execute("SELECT position FROM fold_positions WHERE fold = %s", (fold,))
                .fetchone()
            )
        return int(row[0]) if row else 0

    @staticmethod
    def set_position(conn: Connection, fold: str, position: int) -> None:
        with postgres_errors("moving a fold position"):
            conn.execute(
                "INSERT INTO fold_positions(fold, position) VALUES (%s, %s)"
                " ON CONFLICT(fold) DO UPDATE SET position = excluded.position",
                (fold, position),
            )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection this store opened (from any thread)."""
        if self._closed:
            return
        with self._connections_lock:
            for conn in self._connections:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            self._connections.clear()
            self._closed = True

    def __enter__(self) -> PostgresEventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "PostgresEventStore(...)"  # the conninfo may hold a password


def _conforms(store: PostgresEventStore) -> EventLogStore[Connection, PostgresMigration]:
    return store  # the type checker holds the PostgreSQL store to the port
