"""The session tree's tables on PostgreSQL, shared by every host that opens the same database.

The same fold and readers as on SQLite (`fold.py`, `paths.py`: one dialect, `Statements`), over
the same two tables. Writers take turns as under SQLite's one writer: every outermost tree write
transaction first takes an advisory lock (`pg_advisory_xact_lock`, held to its commit), then
folds what other hosts appended (`fold_pending`), so two hosts never fold the same events at
once, and the fold's position moves in the transaction that wrote the rows it covers. (The log's
append already holds the counter's row lock to commit, so the lock costs capture no
concurrency it had.) A lock waited on past the store's `busy_timeout_ms` is StoreBusy.

A capture need not wait for that lock while it plans: it plans against the tree as it reads it
(no lock, no transaction) and hands its events with the entries they fold into to
`append_planned`, one server-side call (`chronicle_tree_append`) that takes the tree's lock and
the log's counter, checks the plan still holds (nothing of the tree's namespaces past the fold's
position, the session's leaf the one it planned on, none of its ids in the log), then appends,
folds the entries, moves the session's leaf and the fold's position, and commits: both locks are
held for the server's work alone. A plan that no longer holds stores nothing, and the capture
plans again inside `writing()`.

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
from .fold import FOLD_NAME, NAMESPACES, EntryRow
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


_TREE_APPEND = """
CREATE OR REPLACE FUNCTION chronicle_tree_append(
    tree_lock BIGINT, fold_name TEXT, folded TEXT[], tree_session TEXT, planned_leaf TEXT,
    ids TEXT[], namespaces TEXT[], types TEXT[], versions INTEGER[], created TEXT[],
    sessions TEXT[], payloads TEXT[],
    parents TEXT[], kinds TEXT[], fps TEXT[], roles TEXT[], targets TEXT[]
) RETURNS TABLE(seq BIGINT, place BIGINT) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    log_end BIGINT;
    folded_to BIGINT;
    seqs BIGINT[];
BEGIN
    -- The tree's lock, then the counter's (the order every tree writer takes them in); each
    -- statement after reads a fresh snapshot, so the checks see every earlier writer's commit.
    PERFORM pg_advisory_xact_lock(tree_lock);
    SELECT c.last INTO log_end FROM log_counter c FOR UPDATE;
    SELECT coalesce(max(p.position), 0) INTO folded_to
    FROM fold_positions p WHERE p.fold = fold_name;
    -- (the log's own questions: only the log's SQL reads its table; a log that ends at the
    -- fold's position has nothing past it, and the question is not asked)
    IF (log_end > folded_to AND chronicle_any_after(folded_to, folded))
       OR (SELECT h.leaf_id FROM session_heads h WHERE h.session = tree_session)
          IS DISTINCT FROM planned_leaf
       OR chronicle_holds_any(ids) THEN
        RETURN;  -- the plan no longer holds: nothing stored, the caller plans again
    END IF;
    SELECT array_agg(a.seq ORDER BY a.place) INTO seqs
    FROM chronicle_append(ids, namespaces, types, versions, created, sessions, payloads, FALSE) a;
    -- What the fold (sessions/fold.py apply_events) writes for a run of one session's entries.
    INSERT INTO session_heads(session, conversation, lineage_root, reason, started_seq)
    VALUES (tree_session, tree_session, tree_session, 'new', seqs[1])
    ON CONFLICT (session) DO NOTHING;
    INSERT INTO session_entries(entry_id, seq, session, parent_id, kind, fp, role, target_id)
    SELECT ids[i], seqs[i], tree_session, parents[i], kinds[i], fps[i], roles[i], targets[i]
    FROM generate_subscripts(ids, 1) AS i ORDER BY i
    ON CONFLICT DO NOTHING;
    UPDATE session_heads h SET leaf_id = ids[cardinality(ids)] WHERE h.session = tree_session;
    INSERT INTO fold_positions(fold, position) VALUES (fold_name, seqs[cardinality(seqs)])
    ON CONFLICT (fold) DO UPDATE SET position = excluded.position;
    RETURN QUERY SELECT u.s, u.i FROM unnest(seqs) WITH ORDINALITY AS u(s, i);
END
$$
"""


def _m003_planned_append(conn: Connection) -> None:
    conn.execute(_TREE_APPEND)


def _m004_append_at_the_end(conn: Connection) -> None:
    """The planned append as it now stands (`_TREE_APPEND`, which m003 also runs): it asks
    whether anything waits past the fold's position only when the log goes on past it."""
    conn.execute(_TREE_APPEND)


_TREE_LOCK = 0x73657373  # the advisory lock tree writers take turns on

PG_SESSION_MIGRATIONS: tuple[PostgresMigration, ...] = (
    # SQLite's m001 and m002 in one step: the index by root is there from the start.
    PostgresMigration("sessions.m001_tree", _m001_tree),
    PostgresMigration("sessions.m003_planned_append", _m003_planned_append),
    PostgresMigration("sessions.m004_append_at_the_end", _m004_append_at_the_end),
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

    @property
    def plans_unlocked(self) -> bool:
        return True

    def append_planned(
        self,
        session: str,
        leaf: str | None,
        events: Sequence[PendingEvent],
        entries: Sequence[EntryRow],
    ) -> list[StoredEvent] | None:
        if not events:
            return []
        # The entries' ids are the events' (and in their order); the server adds the seqs.
        parents, kinds, fps, roles, targets = ([row[k] for row in entries] for k in range(1, 6))
        stored = self.store.append_through(
            "chronicle_tree_append(%s, %s, %s::text[], %s, %s, {arrays},"
            " %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])",
            events,
            before=(_TREE_LOCK, FOLD_NAME, list(NAMESPACES), session, leaf),
            after=(parents, kinds, fps, roles, targets),
        )
        return stored or None


def _conforms(tables: PostgresSessionTables) -> SessionTables:
    return tables  # the type checker holds the PostgreSQL tables to the protocol
