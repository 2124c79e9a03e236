"""The session tree as tables, folded from the log.

Invariants:
- `session_entries` and `session_heads` are a deterministic fold of the "chronicle.chat"
  MessageCaptured events and the "chronicle.session" events, in seq order: dropping both tables
  and folding the log again gives the same rows (`Projector.rebuild` works on `SessionFold`).
- Writers fold their own events in the same transaction that appends them (`fold_pending` first
  catches up anything another writer appended), so the tables are never behind the writer.
- An entry's parent is fixed when it is folded: the event's `parent`, or the session's leaf at
  that point of the log when the event named none.
- The fold's SQL is one dialect for both stores (`log/tables.py`'s `Statements`): the same
  statements fold the tree into SQLite (these migrations) and PostgreSQL (`postgres.py`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence

from ..capture.events import NAMESPACE as CHAT_NAMESPACE
from ..log.projector import Projector
from ..log.store import Migration, PendingEvent, StoredEvent, run_script
from ..log.tables import Statements, insert_rows
from .events import ENTRY_KINDS
from .events import NAMESPACE as SESSION_NAMESPACE

__all__ = [
    "EntryRow",
    "SessionFold",
    "FOLD_NAME",
    "MIGRATIONS",
    "entry_rows",
    "fold_pending",
    "NAMESPACES",
]

FOLD_NAME = "sessions.tree"
NAMESPACES = (CHAT_NAMESPACE, SESSION_NAMESPACE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_entries (
    entry_id  TEXT PRIMARY KEY,
    seq       INTEGER NOT NULL,
    session   TEXT NOT NULL,
    parent_id TEXT,
    kind      TEXT NOT NULL,
    fp        TEXT,
    role      TEXT,
    target_id TEXT
);
CREATE INDEX IF NOT EXISTS session_entries_by_session ON session_entries(session, seq);
CREATE INDEX IF NOT EXISTS session_entries_by_seq ON session_entries(seq);
CREATE TABLE IF NOT EXISTS session_heads (
    session        TEXT PRIMARY KEY,
    conversation   TEXT NOT NULL,
    lineage_root   TEXT NOT NULL,
    parent_session TEXT,
    fork_seq       INTEGER,
    reason         TEXT NOT NULL,
    leaf_id        TEXT,
    started_seq    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS session_heads_by_conversation ON session_heads(conversation);
"""


def _m001_tree(conn: sqlite3.Connection) -> None:
    run_script(conn, _SCHEMA)


def _m002_heads_by_root(conn: sqlite3.Connection) -> None:
    # lineage() reads every head of one root in start order; without this it scans the table.
    run_script(
        conn,
        "CREATE INDEX IF NOT EXISTS session_heads_by_root"
        " ON session_heads(lineage_root, started_seq);",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration("sessions.m001_tree", _m001_tree),
    Migration("sessions.m002_heads_by_root", _m002_heads_by_root),
)


class SessionFold:
    """Folds messages and session events into the entry tree and each session's head."""

    name = FOLD_NAME
    namespaces = NAMESPACES

    def apply(self, conn: Statements, events: Sequence[StoredEvent], prepared: object) -> None:
        apply_events(conn, events)

    def reset(self, conn: Statements) -> None:
        conn.execute("DELETE FROM session_entries")
        conn.execute("DELETE FROM session_heads")


# What makes an event a tree entry: (kind, fingerprint, role, target).
_Entry = tuple[str, str | None, str | None, str | None]

# A session's head row: (conversation, lineage_root, leaf_id).
_Head = tuple[str, str, str | None]


def _head(conn: Statements, session: str) -> _Head | None:
    row: _Head | None = conn.execute(
        "SELECT conversation, lineage_root, leaf_id FROM session_heads WHERE session = ?",
        (session,),
    ).fetchone()
    return row


def _ensure_head(conn: Statements, session: str, seq: int) -> _Head:
    row = _head(conn, session)
    if row is None:
        conn.execute(
            "INSERT INTO session_heads(session, conversation, lineage_root, reason, started_seq)"
            " VALUES (?, ?, ?, 'new', ?)",
            (session, session, session, seq),
        )
        return (session, session, None)
    return row


def _entry_exists(conn: Statements, entry_id: str) -> tuple[int, str] | None:
    row: tuple[int, str] | None = conn.execute(
        "SELECT seq, session FROM session_entries WHERE entry_id = ?", (entry_id,)
    ).fetchone()
    return row


def _add_entry(
    conn: Statements,
    event: StoredEvent,
    kind: str,
    fp: str | None,
    target: str | None,
    role: str | None = None,
) -> None:
    env = event.envelope
    session = env.session or ""
    head = _ensure_head(conn, session, env.seq)
    parent = _parent(event, head[2])
    conn.execute(
        "INSERT INTO session_entries(entry_id, seq, session, parent_id, kind, fp, role,"
        " target_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (env.id, env.seq, session, parent, kind, fp, role, target),
    )
    conn.execute("UPDATE session_heads SET leaf_id = ? WHERE session = ?", (env.id, session))


def _switch(conn: Statements, event: StoredEvent) -> None:
    env = event.envelope
    session = env.session or ""
    parent_session = str(event.payload.get("parent_session") or "")
    reason = str(event.payload.get("reason") or "new")
    existing = _head(conn, session)
    if reason in ("compression", "branch") and parent_session and parent_session != session:
        parent = _ensure_head(conn, parent_session, env.seq)
        has_entries = conn.execute(
            "SELECT 1 FROM session_entries WHERE session = ? LIMIT 1", (session,)
        ).fetchone()
        if has_entries:
            return  # already lived a life of its own: linking it now would rewrite its past
        fork_seq = None
        if reason == "branch" and parent[2] is not None:
            found = _entry_exists(conn, parent[2])
            fork_seq = found[0] if found else None
        lineage_root = parent[1] if reason == "compression" else session
        conn.execute(
            "INSERT INTO session_heads(session, conversation, lineage_root, parent_session,"
            " fork_seq, reason, leaf_id, started_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(session) DO UPDATE SET conversation = excluded.conversation,"
            " lineage_root = excluded.lineage_root, parent_session = excluded.parent_session,"
            " fork_seq = excluded.fork_seq, reason = excluded.reason, leaf_id = excluded.leaf_id",
            (
                session,
                parent[0],
                lineage_root,
                parent_session,
                fork_seq,
                reason,
                parent[2],
                env.seq,
            ),
        )
        return
    if existing is None:
        conn.execute(
            "INSERT INTO session_heads(session, conversation, lineage_root, parent_session,"
            " reason, started_seq) VALUES (?, ?, ?, ?, ?, ?)",
            (session, session, session, parent_session or None, reason, env.seq),
        )


def apply_event(conn: Statements, event: StoredEvent) -> None:
    env = event.envelope
    entry = _entry_of(env.namespace, env.type, event.payload)
    if entry is not None:
        kind, fp, role, target = entry
        _add_entry(conn, event, kind, fp, target, role)
    elif env.namespace != SESSION_NAMESPACE:
        return
    elif env.type == "SessionSwitched":
        _switch(conn, event)
    elif env.type == "LeafMoved":
        leaf = event.payload.get("target")
        session = env.session or ""
        if isinstance(leaf, str) and _entry_exists(conn, leaf):
            _ensure_head(conn, session, env.seq)
            conn.execute("UPDATE session_heads SET leaf_id = ? WHERE session = ?", (leaf, session))


def apply_events(conn: Statements, events: Sequence[StoredEvent]) -> None:
    """Fold `events` in order; the same result as `apply_event` one by one, in fewer statements:
    each run of tree entries (`_apply_run`) at once."""
    run: list[tuple[StoredEvent, _Entry]] = []
    for event in events:
        env = event.envelope
        entry = _entry_of(env.namespace, env.type, event.payload)
        if entry is not None:
            run.append((event, entry))
        elif env.namespace in NAMESPACES:
            _apply_run(conn, run)
            run.clear()
            apply_event(conn, event)
    _apply_run(conn, run)


def _apply_run(conn: Statements, run: Sequence[tuple[StoredEvent, _Entry]]) -> None:
    """A run of tree entries (nothing between them moves a head but the entries themselves):
    the sessions' heads read, and the missing ones started, together; the entries inserted
    together; each session's leaf written once."""
    if not run:
        return
    first: dict[str, int] = {}
    for event, _ in run:
        first.setdefault(event.envelope.session or "", event.envelope.seq)
    leaves = _ensure_heads(conn, first)
    rows: list[tuple[str, int, str, object, str, str | None, str | None, str | None]] = []
    for event, (kind, fp, role, target) in run:
        env = event.envelope
        session = env.session or ""
        rows.append(
            (env.id, env.seq, session, _parent(event, leaves[session]), kind, fp, role, target)
        )
        leaves[session] = env.id
    insert_rows(
        conn,
        "INSERT INTO session_entries(entry_id, seq, session, parent_id, kind,"
        " fp, role, target_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        rows,
    )
    conn.executemany(
        "UPDATE session_heads SET leaf_id = ? WHERE session = ?",
        [(leaf, session) for session, leaf in leaves.items()],
    )


_SESSIONS_A_READ = 500  # sessions whose heads one statement reads


def _ensure_heads(conn: Statements, first: Mapping[str, int]) -> dict[str, str | None]:
    """`_ensure_head` for many sessions at once (`first`: each one's seq where it is first
    met): their leaves, by session."""
    sessions = list(first)
    leaves: dict[str, str | None] = {}
    for i in range(0, len(sessions), _SESSIONS_A_READ):
        chunk = sessions[i : i + _SESSIONS_A_READ]
        rows = conn.execute(
            "SELECT session, leaf_id FROM session_heads"
            f" WHERE session IN ({', '.join('?' * len(chunk))})",
            chunk,
        ).fetchall()
        leaves.update((str(session), leaf) for session, leaf in rows)
    started = [(s, s, s, first[s]) for s in sessions if s not in leaves]
    if started:
        insert_rows(
            conn,
            "INSERT INTO session_heads(session, conversation, lineage_root, reason, started_seq)"
            " VALUES (?, ?, ?, 'new', ?)",
            started,
        )
        leaves.update((s, None) for s, *_ in started)
    return leaves


def _parent(event: StoredEvent | PendingEvent, leaf: str | None) -> object:
    """An entry's parent: the one its event names ("" for none), else the session's leaf."""
    parent = event.payload.get("parent")
    if parent is None:
        return leaf
    return None if parent == "" else parent


# An entry a planned append adds: (entry id, parent id, kind, fingerprint, role, target).
EntryRow = tuple[str, str | None, str, str | None, str | None, str | None]


def entry_rows(
    session: str, leaf: str | None, events: Sequence[PendingEvent]
) -> list[EntryRow] | None:
    """The entries `apply_events` would fold from `events`, appended to `session` while its leaf
    is `leaf` (their seqs aside, which the append gives): for a store that folds them in the
    append's own statement. None unless every event is an entry of `session` (a switch or a
    moved leaf reads the tree as it folds)."""
    rows: list[EntryRow] = []
    for event in events:
        entry = _entry_of(event.namespace, event.type, event.payload)
        if entry is None or event.session != session:
            return None
        kind, fp, role, target = entry
        parent = _parent(event, leaf)
        if parent is not None and not isinstance(parent, str):
            return None
        rows.append((event.id, parent, kind, fp, role, target))
        leaf = event.id
    return rows


def _entry_of(namespace: str, type_: str, payload: Mapping[str, object]) -> _Entry | None:
    """(kind, fingerprint, role, target) when an event of that type is a tree entry."""
    if namespace == CHAT_NAMESPACE:
        if type_ != "MessageCaptured":
            return None
        fp = payload.get("fingerprint")
        role = payload.get("role")
        return (
            "message",
            fp if isinstance(fp, str) else None,
            role if isinstance(role, str) else None,
            None,
        )
    if namespace != SESSION_NAMESPACE:
        return None
    kind = ENTRY_KINDS.get(type_)
    if kind is None:
        return None
    # A compaction's target is the first message it kept verbatim.
    target = payload.get("first_kept_entry" if kind == "compaction" else "target")
    return (kind, None, None, target if isinstance(target, str) else None)


def fold_pending(
    projector: Projector[Statements],
    conn: Statements,
    start: Callable[[Statements], tuple[int, int]],
) -> tuple[int, int]:
    """Fold every event not yet folded, inside the caller's write transaction `conn`. Returns
    (the fold's position before, the log's end now): nobody else appends while the caller
    writes. `start(conn)` reads the fold's position and the log's end (the tree's tables'
    `fold_start`). `projector` drives the one SessionFold over the tree's tables; the backlog streams
    through it in batches (a store bulk-built or imported far ahead of the fold is never held
    in memory at once)."""
    position, end = start(conn)
    if end > position:
        projector.fold_within(conn, after=position, upto=end)
    return position, end
