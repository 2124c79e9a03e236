"""The event log on PostgreSQL (psycopg 3): the same port as the SQLite store, for a log shared
by several hosts.

The log (events, fold positions, migrations); each room's twin keeps its own tables over
`PostgresTables`. `chronicle.store` in config.yaml selects it (config.py), and the core builds
every room's twin over it (core.py); the contract suites (tests/test_log_contract.py and the
rooms' suites parametrised by `target` or `store_settings`) run it beside the SQLite store.

Invariants:
- Append-only in the database: triggers refuse UPDATE, DELETE and TRUNCATE of `events`.
- `seq` is gap-free and in commit order. A sequence would not do: two transactions that draw
  N and N+1 can commit in the other order, and a reader that saw N+1 first would resume past N
  for ever. Every append instead takes the one row of `log_counter` FOR UPDATE and assigns the
  next seqs from it in the same transaction; the row lock serialises appenders (as SQLite's
  write lock does) until commit, so N is committed before anyone can draw N+1, and a rolled
  back append gives its numbers back. The append is one server-side call
  (`chronicle_append`), so outside a caller's transaction the lock is held for the server's
  work alone, not across round trips.
- A payload is stored as the same JSON text the SQLite store writes, in a `text` column (not
  `jsonb`, which would reorder keys and normalise numbers): it reads back exactly.
- One connection per thread, autocommit outside `atomic()`; `atomic()` is psycopg's
  transaction block, a savepoint when nested. A lock waited on longer than `busy_timeout_ms`
  becomes `StoreBusy`; a server that cannot be reached or drops the connection becomes
  `StoreUnreachable` (a `StoreBusy`), and the thread's next call opens a new connection.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import make_conninfo
from psycopg.rows import TupleRow

from ..errors import (
    AppendOnlyViolation,
    StoreBusy,
    StoreError,
    StoreFull,
    StoreReadOnly,
    StoreUnreachable,
    UsageError,
)
from .pg_text import escape_stored_text, nul_safe
from .port import EventLogStore
from .store import (
    EVENT_COLUMNS,
    RARE_NAMESPACES,
    Envelope,
    PendingEvent,
    StoredEvent,
    kept_alive,
    pending_of,
    read_pages,
    restorable,
    restored,
    row_to_event,
    storable,
    utc_now,
)
from .tables import SQLCursor, Statements, Tables

__all__ = [
    "PostgresEventStore",
    "PostgresMigration",
    "PostgresTables",
    "QmarkConnection",
    "postgres_errors",
]

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
    # One call appends a batch: the counter's row lock is held for the server's work only, not
    # across round trips. Each statement of a volatile function reads a fresh snapshot, so the
    # look-up of held ids, taken after the lock, sees every earlier appender's commit.
    # Returns the seq each stored event got and its place (1-based) in the arrays.
    """
    CREATE FUNCTION chronicle_append(
        ids TEXT[], namespaces TEXT[], types TEXT[], versions INTEGER[], created TEXT[],
        sessions TEXT[], payloads TEXT[], only_new BOOLEAN
    ) RETURNS TABLE(seq BIGINT, place BIGINT) LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        base BIGINT;
        stored BIGINT;
    BEGIN
        SELECT c.last INTO base FROM log_counter c FOR UPDATE;
        RETURN QUERY
        WITH given AS (
            SELECT g.*
            FROM unnest(ids, namespaces, types, versions, created, sessions, payloads)
                WITH ORDINALITY AS g(id, namespace, type, version, created_at, session, payload,
                                     place)
        ), kept AS (
            SELECT g.* FROM given g
            WHERE NOT only_new OR (
                NOT EXISTS (SELECT 1 FROM events e WHERE e.id = g.id)
                AND g.place = (SELECT MIN(d.place) FROM given d WHERE d.id = g.id)
            )
        ), numbered AS (
            SELECT k.*, base + row_number() OVER (ORDER BY k.place) AS seq FROM kept k
        ), inserted AS (
            INSERT INTO events(seq, id, namespace, type, version, created_at, session, payload)
            SELECT n.seq, n.id, n.namespace, n.type, n.version, n.created_at, n.session,
                   n.payload
            FROM numbered n ORDER BY n.seq
            RETURNING events.seq
        )
        SELECT n.seq, n.place FROM numbered n JOIN inserted i ON i.seq = n.seq ORDER BY n.seq;
        GET DIAGNOSTICS stored = ROW_COUNT;
        UPDATE log_counter SET last = base + stored;
    END
    $$
    """,
)


def _m001_events(conn: Connection) -> None:
    for statement in _EVENT_SCHEMA:
        conn.execute(statement)


# Questions on the log asked by other rooms' server-side functions (the session tree's
# `chronicle_tree_append`), so only the log's own SQL reads `events`. Planned per call: a plan
# cached for any position would not know that few events lie past it.
_QUESTIONS = (
    """
    CREATE FUNCTION chronicle_any_after(after BIGINT, wanted TEXT[]) RETURNS BOOLEAN
    LANGUAGE plpgsql STABLE SET plan_cache_mode = force_custom_plan AS $$
    BEGIN
        RETURN EXISTS (SELECT 1 FROM events e WHERE e.seq > after AND e.namespace = ANY(wanted));
    END
    $$
    """,
    """
    CREATE FUNCTION chronicle_holds_any(ids TEXT[]) RETURNS BOOLEAN
    LANGUAGE plpgsql STABLE SET plan_cache_mode = force_custom_plan AS $$
    BEGIN
        RETURN EXISTS (SELECT 1 FROM events e WHERE e.id = ANY(ids));
    END
    $$
    """,
)


def _m002_questions(conn: Connection) -> None:
    for statement in _QUESTIONS:
        conn.execute(statement)


_RARE = "namespace IN (" + ", ".join(f"'{n}'" for n in RARE_NAMESPACES) + ")"
"""The rare namespaces' partial index's own term (`log.m004_rare_by_session`). Unlike SQLite, a
read need not repeat it: the reads that want the index are planned for their values (`_rows`'
`own_plan`, `read`'s unprepared pages), and the server proves `namespace = ANY('{...}')` of
rare names implies it. Repeating it made the planner count the namespace's selectivity twice
(`latest` then chose the (namespace, type) and (session, seq) indexes, ANDed)."""


def _m004_rare_by_session(conn: Connection) -> None:
    """A conversation's rare events (compaction's context events, the host's reports, the
    session tree's switches) found among its messages by an index that holds only them, as
    SQLite's `events_rare_by_session`: before it the reads walked the session's (session, seq)
    index over every message. Partial, so an append of a message adds no entry to it. Built in
    the migration's transaction, which holds appends back while it reads the log once."""
    conn.execute(
        f"CREATE INDEX events_rare_by_session ON events(session, namespace, seq) WHERE {_RARE}"
    )


LOG_MIGRATIONS: tuple[PostgresMigration, ...] = (
    PostgresMigration("log.m001_events", _m001_events),
    PostgresMigration("log.m002_questions", _m002_questions),
    PostgresMigration("log.m003_escaped_text", escape_stored_text),
    PostgresMigration("log.m004_rare_by_session", _m004_rare_by_session),
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
    except psycopg.OperationalError as exc:
        # The server is gone or refused us (refused, restarted, terminated our backend, too
        # many connections): a busy store's case; the next call opens a new connection.
        raise StoreUnreachable(
            f"{what}: the PostgreSQL server could not be reached ({exc}); retry later"
        ) from exc
    except pg_errors.RaiseException as exc:
        if "append-only" in str(exc):
            raise AppendOnlyViolation(f"{what}: {exc}") from exc
        raise StoreError(f"{what}: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"{what}: {exc}") from exc


class _ThreadState(threading.local):
    """One thread's connection and how deeply it is nested in `atomic()`."""

    conn: Connection | None = None
    depth: int = 0
    budget_ms: int | None = None  # the lock wait `patience` allows, inside its block


BEHIND = (
    "coalesce((SELECT position FROM fold_positions WHERE fold = %s), 0)"
    " < coalesce((SELECT MAX(seq) FROM events), 0)"
)
"""`PostgresEventStore.behind` as an SQL expression (the fold's name its one parameter), for a
room that asks it beside a question of its own in one round trip."""


class PostgresEventStore:
    """The append-only log in one PostgreSQL database (`conninfo`: a libpq connection string or
    URI; a password belongs in PGPASSWORD, a .pgpass file or `password`, never in it)."""

    def __init__(
        self,
        conninfo: str,
        *,
        busy_timeout_ms: int = 5000,
        connect_timeout_s: int = 10,
        migrations: Sequence[PostgresMigration] = (),
        password: str | None = None,
    ) -> None:
        self.conninfo = conninfo
        # Given apart from the conninfo (which is shown, and keys the core registry) and
        # handed to libpq at each connect; None leaves it to PGPASSWORD or ~/.pgpass.
        self._password = password
        self.busy_timeout_ms = busy_timeout_ms
        self.connect_timeout_s = connect_timeout_s
        self._local = _ThreadState()
        self._connections: list[tuple[threading.Thread | None, Connection]] = []  # with its thread
        self._connections_lock = threading.Lock()
        self._closed = False
        self.migrate(LOG_MIGRATIONS)
        if migrations:
            self.migrate(migrations)

    # -- connections -----------------------------------------------------------------------

    def _open(self) -> Connection:
        with postgres_errors("connecting to PostgreSQL"):
            conninfo = self.conninfo
            if self._password is not None:  # libpq's own keyword, added at the connect only
                conninfo = make_conninfo(conninfo, password=self._password)
            conn = psycopg.connect(
                conninfo, autocommit=True, connect_timeout=self.connect_timeout_s
            )
            nul_safe(conn)  # text holding a NUL is stored escaped, not refused (pg_text.py)
            # Not the `options` keyword: it would replace options the conninfo sets.
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false)", (f"{int(self.busy_timeout_ms)}ms",)
            )
        with self._connections_lock:
            self._connections = kept_alive(self._connections, psycopg.Error)
            self._connections.append((threading.current_thread(), conn))
        return conn

    @property
    def connection(self) -> Connection:
        """This thread's connection."""
        if self._closed:
            raise StoreError("the PostgreSQL store is closed; open a new one")
        conn = self._local.conn
        if conn is None or conn.closed or conn.broken:
            conn = self._open()
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def atomic(self) -> Iterator[Connection]:
        """One transaction; nested calls become savepoints. The only way anything writes."""
        conn = self.connection
        self._local.depth += 1
        try:
            with postgres_errors("committing"), conn.transaction():
                yield conn
        finally:
            self._local.depth -= 1

    @property
    def depth(self) -> int:
        """How deeply this thread is nested in `atomic()` (1: the outermost transaction)."""
        return self._local.depth

    @contextlib.contextmanager
    def patience(self, budget_ms: int) -> Iterator[None]:
        """Within the block, this thread waits at most `budget_ms` for a lock (the server's
        `lock_timeout`), then gets StoreBusy: as SQLite's `patience`, for calls on Hermes'
        main thread, which must degrade quickly rather than hold the turn."""
        previous = self._local.budget_ms
        budget = int(budget_ms if previous is None else min(previous, budget_ms))
        conn = self.connection
        with postgres_errors("setting the lock timeout"):
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{budget}ms",))
        self._local.budget_ms = budget
        try:
            yield
        finally:
            self._local.budget_ms = previous
            restore = f"{previous if previous is not None else self.busy_timeout_ms}ms"
            with contextlib.suppress(psycopg.Error):
                if not conn.closed and not conn.broken:
                    conn.execute("SELECT set_config('lock_timeout', %s, false)", (restore,))

    def checkpoint(self) -> None:
        """Nothing to do: the server writes its own WAL back (SQLite's store folds its WAL
        here, and the slots call this on either)."""

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection to read from (this thread's)."""
        yield self.connection

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

    def migrated(self) -> set[str]:
        """The names of the migrations recorded in this database (by this build or another)."""
        with postgres_errors("reading the schema"), self.reading() as conn:
            return {str(row[0]) for row in conn.execute("SELECT name FROM migrations")}

    # -- the log ---------------------------------------------------------------------------

    def append(self, events: Sequence[PendingEvent], *, guarded: bool = True) -> list[StoredEvent]:
        """Append events in one transaction and return them as stored, in order. Inside a
        caller's transaction the append is a savepoint, so a refused batch leaves the caller's
        work; `guarded=False` leaves it out (two round trips) for a caller whose transaction
        ends with the refusal anyway."""
        return self._append(events, only_new=False, guarded=guarded)

    def append_new(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Append the events whose id is not in the log yet (idempotent capture). One transaction."""
        return self._append(events, only_new=True, guarded=True)

    def _append(
        self, events: Sequence[PendingEvent], *, only_new: bool, guarded: bool
    ) -> list[StoredEvent]:
        sql = "chronicle_append({arrays}, %s)"
        conn = self.connection
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE or not guarded:
            # Outside a transaction the call is its own: one round trip, and the counter's
            # lock is released at the server's commit.
            return self.append_through(sql, events, after=(only_new,))
        with postgres_errors("appending events"), conn.transaction():
            # a savepoint: a refused batch leaves the caller's work
            return self.append_through(sql, events, after=(only_new,))

    def append_through(
        self,
        function: str,
        events: Sequence[PendingEvent],
        *,
        before: Sequence[object] = (),
        after: Sequence[object] = (),
    ) -> list[StoredEvent]:
        """Append `events` through a server-side function that returns (seq, place) rows as
        `chronicle_append` does: `chronicle_append` itself, or a room's function that appends
        through it and writes its own rows in the same statement (the session tree's
        `chronicle_tree_append`). `function` is its call, with `{arrays}` where the append's
        seven arrays go, `before` and `after` the parameters around them. One round trip, in
        the caller's transaction if there is one; the events as stored, in order (those the
        function did not store left out)."""
        if not events:
            return []
        events, texts = storable(events)
        arrays = (
            [e.id for e in events],
            [e.namespace for e in events],
            [e.type for e in events],
            [e.version for e in events],
            [e.created_at for e in events],
            [e.session for e in events],
            texts,
        )
        sql = "SELECT seq, place FROM " + function.format(
            arrays="%s::text[], %s::text[], %s::text[], %s::integer[], %s::text[], %s::text[],"
            " %s::text[]"
        )
        with postgres_errors("appending events"):
            rows = self.connection.execute(sql, (*before, *arrays, *after)).fetchall()
        stored: list[StoredEvent] = []
        for seq, place in rows:
            e = events[int(place) - 1]
            stored.append(
                StoredEvent(
                    Envelope(
                        int(seq), e.id, e.namespace, e.type, e.version, e.created_at, e.session
                    ),
                    e.payload,
                )
            )
        return stored

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
                return self.connection.execute(
                    sql,
                    (cursor, *params, page),
                    prepare=False,  # (see `_rows`)
                ).fetchall()

        yield from read_pages(fetch, after, limit)

    def restore(self, events: Sequence[StoredEvent]) -> list[StoredEvent]:
        """Store exported events at the seqs they had in the log they came from (as the SQLite
        store's `restore`): the counter's row lock is held while they are checked and written,
        and the counter moves to the last of them. The seqs keep the source's gaps."""
        with postgres_errors("restoring events"), self.atomic() as conn:
            row = conn.execute("SELECT last FROM log_counter FOR UPDATE").fetchone()
            last = int(row[0]) if row else 0
            fresh = restorable(events, self.seqs_of(e.envelope.id for e in events), last)
            if not fresh:
                return []
            pending, texts = storable([pending_of(e) for e in fresh])
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO events(seq, id, namespace, type, version, created_at, session,"
                    " payload) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (src.seq, e.id, e.namespace, e.type, e.version, e.created_at, e.session, t)
                        for src, e, t in zip(fresh, pending, texts, strict=True)
                    ],
                )
            conn.execute("UPDATE log_counter SET last = %s", (fresh[-1].seq,))
        return [restored(src.seq, e) for src, e in zip(fresh, pending, strict=True)]

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

    def behind(self, fold: str) -> bool:
        """Whether the log holds events past `fold`'s position: `position` against `last_seq`
        in one round trip (a read catches up first, and mostly finds nothing to fold)."""
        with postgres_errors("reading a fold position"):
            row = self.connection.execute(f"SELECT {BEHIND}", (fold,)).fetchone()
        return bool(row[0]) if row else True

    def count(self) -> int:
        with postgres_errors("counting events"):
            row = self.connection.execute("SELECT COUNT(*) FROM events").fetchone()
        return int(row[0]) if row else 0

    # -- the named questions the rooms above ask (as the SQLite store's, same answers) ---------

    def _rows(
        self, what: str, sql: str, params: Sequence[object], *, own_plan: bool = False
    ) -> list[TupleRow]:
        """`sql`'s rows. `own_plan`: sent unprepared, so the server plans it for these values.
        The log's reads past a position and its questions whose best plan depends on their
        values (`read`, `any_after`, `latest`) need it: after five runs of a prepared statement
        the server may keep one plan for any values, and the plans it kept for these (a
        sequential or backward scan of the whole log, filtered) read every event when few or
        none match (`any_after` of the tree's position and `latest`: ~9 ms each on a log of
        23,000 events, at every turn). Look-ups by seq or id need it too: the plan kept while
        the log was young is a sequential scan, and stays one until the table is analyzed
        (`seqs_of` took 2 ms at 4,000 events, inside a compaction's hold of the log's counter)."""
        with postgres_errors(what):
            prepare = False if own_plan else None
            return self.connection.execute(sql, params, prepare=prepare).fetchall()

    def get_many(self, seqs: Iterable[int]) -> dict[int, StoredEvent]:
        """The events at `seqs` (the ones the log holds), by seq."""
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE seq = ANY(%s)"
        rows = self._rows("reading events", sql, (list(seqs),), own_plan=True)
        return {int(row[0]): row_to_event(row) for row in rows}

    def seqs_of(self, ids: Iterable[str]) -> dict[str, int]:
        """The seq of each event id the log holds (ids it does not hold are left out)."""
        sql = "SELECT id, seq FROM events WHERE id = ANY(%s)"
        rows = self._rows("looking events up by id", sql, (list(ids),), own_plan=True)
        return {str(i): int(seq) for i, seq in rows}

    def holds(self, seqs: Iterable[int]) -> set[int]:
        """Which of `seqs` the log holds."""
        sql = "SELECT seq FROM events WHERE seq = ANY(%s)"
        return {
            int(seq)
            for (seq,) in self._rows("looking events up by seq", sql, (list(seqs),), own_plan=True)
        }

    def any_after(
        self,
        after: int,
        *,
        namespaces: Sequence[str] | None = None,
        session: str | None = None,
    ) -> bool:
        """Whether the log holds an event past `after` (of those namespaces; of that session)."""
        where = ["seq > %s"]
        params: list[object] = [after]
        if session is not None:
            where.append("session = %s")
            params.append(session)
        if namespaces is not None:
            if not namespaces:
                return False
            where.append("namespace = ANY(%s)")
            params.append(list(namespaces))
        sql = f"SELECT 1 FROM events WHERE {' AND '.join(where)} LIMIT 1"
        return bool(self._rows("reading the log's end", sql, params, own_plan=True))

    def latest(self, namespace: str, type_: str, *, sessions: Sequence[str]) -> StoredEvent | None:
        """The last event of (namespace, type) written in any of `sessions`."""
        if not sessions:
            return None
        rows = self._rows(
            "reading the latest event",
            f"SELECT {EVENT_COLUMNS} FROM events WHERE namespace = %s AND type = %s"
            " AND session = ANY(%s) ORDER BY seq DESC LIMIT 1",
            (namespace, type_, list(sessions)),
            own_plan=True,
        )
        return row_to_event(rows[0]) if rows else None

    def seqs_containing(self, lo: int, hi: int, namespace: str, text: str) -> list[int]:
        """Seqs in [lo, hi] of `namespace` whose stored payload (its JSON text) contains `text`."""
        rows = self._rows(
            "searching stored payloads",
            "SELECT seq FROM events WHERE seq BETWEEN %s AND %s AND namespace = %s"
            " AND strpos(payload, %s) > 0 ORDER BY seq",
            (lo, hi, namespace, text),
        )
        return [int(seq) for (seq,) in rows]

    def type_counts(self) -> list[tuple[str, str, int, int, int]]:
        """(namespace, type, count, first seq, last seq) of every event type the log holds."""
        rows = self._rows(
            "counting events",
            "SELECT namespace, type, COUNT(*), MIN(seq), MAX(seq) FROM events"
            # byte order, as SQLite's, whatever the database's collation
            ' GROUP BY namespace, type ORDER BY namespace COLLATE "C", type COLLATE "C"',
            (),
        )
        return [(str(ns), str(t), int(n), int(lo), int(hi)) for ns, t, n, lo, hi in rows]

    def session_counts(self, limit: int | None = None) -> list[tuple[str, int, int, int, str, str]]:
        """(session, events, first seq, last seq, first created_at, last created_at) of every
        session the log holds events of, most recent first."""
        sql = (
            "SELECT session, COUNT(*), MIN(seq), MAX(seq), MIN(created_at), MAX(created_at)"
            " FROM events WHERE session IS NOT NULL GROUP BY session ORDER BY MAX(seq) DESC"
        )
        params: tuple[object, ...] = ()
        if limit is not None:
            sql += " LIMIT %s"
            params = (limit,)
        return [
            (str(s), int(n), int(lo), int(hi), str(t0), str(t1))
            for s, n, lo, hi, t0, t1 in self._rows("listing sessions", sql, params)
        ]

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
    def held_position(conn: Connection, fold: str) -> int:
        """`fold`'s position inside the write transaction `conn`, its row locked until that
        transaction ends (made first, at 0, for a fold that has none): another writer of the
        fold waits, then reads what this one committed."""
        with postgres_errors("holding a fold position"):
            row = conn.execute(_HOLD_POSITION.replace("?", "%s"), (fold,)).fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def errors(what: str) -> AbstractContextManager[None]:
        """This store's driver errors turned into Chronicle's own (`postgres_errors`)."""
        return postgres_errors(what)

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
            for _, conn in self._connections:
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


# A fold's position, its row locked to the end of the transaction (READ COMMITTED: the value
# last committed, once the lock is had); a fold with no row yet gets one to lock.
_HOLD_POSITION = (
    "INSERT INTO fold_positions(fold, position) VALUES (?, 0)"
    " ON CONFLICT(fold) DO UPDATE SET position = fold_positions.position RETURNING position"
)


class PostgresTables(Tables[PostgresEventStore, Connection]):
    """A room's tables in the PostgreSQL store's database (`tables.py`)."""

    def held_position(self, conn: Statements, fold: str, /) -> int:
        row = conn.execute(_HOLD_POSITION, (fold,)).fetchone()
        return int(row[0]) if row else 0

    def _atomic(self) -> AbstractContextManager[Connection]:
        return self.store.atomic()

    def _reading(self) -> AbstractContextManager[Connection]:
        return self.store.reading()

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return postgres_errors(what)

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def statements(self, conn: object) -> Statements:
        if isinstance(conn, QmarkConnection):
            return conn
        if isinstance(conn, psycopg.Connection):
            return QmarkConnection(conn)
        raise UsageError(f"a PostgreSQL store's tables take its psycopg connection, not {conn!r}")

    @property
    def depth(self) -> int:
        return self.store.depth


class QmarkConnection:
    """A psycopg connection that reads SQL written with `?` placeholders (`tables.Statements`):
    the one dialect a room's small SQL functions write for both databases."""

    def __init__(self, raw: Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[object] = (), /) -> SQLCursor:
        return self.raw.execute(*_psycopg(sql, params))

    def look_up(self, sql: str, params: Sequence[object], /) -> list[TupleRow]:
        """`execute(sql, params).fetchall()`, sent unprepared (`tables.look_up`)."""
        return self.raw.execute(*_psycopg(sql, params), prepare=False).fetchall()

    def executemany(self, sql: str, rows: Iterable[Sequence[object]], /) -> object:
        """Each row through `sql`, as psycopg sends it (the server types each parameter by its
        column)."""
        with self.raw.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)
        return None

    def insert_rows(self, sql: str, rows: Iterable[Sequence[object]], /) -> None:
        """`executemany` of an INSERT of one VALUES row into text and integer columns only (the
        caller vouches for the columns: `tables.insert_rows`), as one statement over arrays
        (`_as_arrays`) when it can: the server runs a statement per row otherwise, however the
        rows are sent. Typed by the values' Python types, so only for columns of those types."""
        rows = list(rows)
        arrays = _as_arrays(sql, rows) if len(rows) > 1 else None
        if arrays is not None:
            self.raw.execute(*arrays)
        else:
            self.executemany(sql, rows)


def _psycopg(sql: str, params: Sequence[object]) -> tuple[str, Sequence[object]]:
    """`?` SQL and its parameters as psycopg takes them (a long `IN` list as `= ANY`)."""
    if len(params) > _LONG_LIST and " IN (" in sql:
        sql, params = _as_any(sql, params)
    return sql.replace("?", "%s"), params


# More parameters than psycopg caches a statement's parsing for (its 50): a long `IN (?, ...)`
# list, whose length varies from call to call, is sent as `= ANY(?)` over one array instead, so
# the statement's text is the same at every length (parsed once, prepared by the server).
_LONG_LIST = 50
_IN_LIST = re.compile(r"(?<!NOT )\bIN \((\?(?:\s*,\s*\?)*)\)")


def _as_any(sql: str, params: Sequence[object]) -> tuple[str, Sequence[object]]:
    """`sql` with each `IN (?, ...)` list of one Python type (int or str) as `= ANY(?)`, its
    parameters as one list; the same statement otherwise."""
    out: list[str] = []
    values: list[object] = []
    at = taken = 0
    for found in _IN_LIST.finditer(sql):
        before = sql[at : found.start()]
        first = taken + before.count("?")
        count = found.group(1).count("?")
        listed = list(params[first : first + count])
        kinds = {type(v) for v in listed}
        out.append(before)
        values += params[taken:first]
        if len(kinds) == 1 and kinds <= {int, str}:
            out.append("= ANY(?)")
            values.append(listed)
        else:
            out.append(found.group(0))
            values += listed
        taken, at = first + count, found.end()
    out.append(sql[at:])
    values += params[taken:]
    return "".join(out), values


_VALUES_ROW = re.compile(r"\bVALUES\s*\(([^()]*)\)", re.IGNORECASE)
_ARRAY_TYPES = {str: "text[]", int: "bigint[]"}
_BIGINT = range(-(2**63), 2**63)


def _fits(values: Sequence[object]) -> bool:
    """Whether a column's values fit its array's type: any text; integers within bigint."""
    return all(not isinstance(v, int) or v in _BIGINT for v in values)


def _as_arrays(sql: str, rows: Sequence[Sequence[object]]) -> tuple[str, list[object]] | None:
    """`INSERT ... VALUES (?, ...)` for every row of `rows` as one INSERT ... SELECT over
    unnest() of one array a column, or None when it cannot be: not such an INSERT, one with
    DO UPDATE (which must not meet a row twice in one statement), or a column whose values are
    not all text or all integers (NULLs aside). A column of NULLs only is written NULL."""
    if not sql.lstrip().upper().startswith("INSERT") or "DO UPDATE" in sql.upper():
        return None
    found = list(_VALUES_ROW.finditer(sql))
    if len(found) != 1:
        return None
    parts = found[0].group(1).split("?")
    if len(parts) < 2 or any(len(row) != len(parts) - 1 for row in rows):
        return None
    selected: list[str] = [parts[0]]
    arrays: list[str] = []
    params: list[object] = []
    for k, values in enumerate(zip(*rows, strict=True)):
        kinds = {type(v) for v in values if v is not None}
        if not kinds:
            selected.append("NULL")
        elif len(kinds) == 1 and (kind := kinds.pop()) in _ARRAY_TYPES and _fits(values):
            selected.append(f"v.c{k}")
            arrays.append(f"%s::{_ARRAY_TYPES[kind]}")
            params.append(list(values))
        else:
            return None
        selected.append(parts[k + 1])
    if not arrays:
        return None
    names = ", ".join(f"c{k}" for k, part in enumerate(selected[1::2]) if part.startswith("v."))
    rows_sql = (
        f"SELECT {''.join(selected)} FROM unnest({', '.join(arrays)}) AS v({names}) WHERE TRUE"
    )
    at = found[0]
    return sql[: at.start()] + rows_sql + sql[at.end() :], params
