"""Reading paths of the session tree: from a leaf back to its root.

Invariant: a path is read from the folded tables only, and every walk is bounded, so a cycle
(which the fold never creates, but a hand-edited import could) cannot hang a reader.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

__all__ = ["PathEntry", "read_leaf", "read_path", "walk_since"]

_MAX_DEPTH = 10_000_000


@dataclass(frozen=True, slots=True)
class PathEntry:
    entry_id: str
    seq: int
    kind: str
    fp: str | None
    session: str
    target: str | None = None  # a context edit's or label's target; a compaction's first kept
    role: str | None = None  # a message's role


def read_leaf(conn: sqlite3.Connection, session: str) -> str | None:
    """The session's leaf entry id as `conn` sees it (None for a session the tree has not seen)."""
    row = conn.execute("SELECT leaf_id FROM session_heads WHERE session = ?", (session,)).fetchone()
    return row[0] if row else None


def read_path(conn: sqlite3.Connection, leaf: str | None) -> list[PathEntry]:
    """The entries from the root down to `leaf`."""
    if leaf is None:
        return []
    rows = conn.execute(
        "WITH RECURSIVE path(entry_id, parent_id, seq, kind, fp, session, target_id, role, depth)"
        " AS (SELECT entry_id, parent_id, seq, kind, fp, session, target_id, role, 0"
        " FROM session_entries WHERE entry_id = ?"
        " UNION ALL"
        " SELECT e.entry_id, e.parent_id, e.seq, e.kind, e.fp, e.session, e.target_id, e.role,"
        " p.depth + 1 FROM session_entries e JOIN path p ON e.entry_id = p.parent_id"
        " WHERE p.depth < ?"
        ") SELECT entry_id, seq, kind, fp, session, target_id, role FROM path"
        " ORDER BY depth DESC",
        (leaf, _MAX_DEPTH),
    ).fetchall()
    return [PathEntry(*row) for row in rows]


def walk_since(
    conn: sqlite3.Connection, leaf: str | None, old_leaf: str | None, limit: int = 64
) -> list[PathEntry] | None:
    """Entries from just after `old_leaf` down to `leaf` (root first) when `old_leaf` is an
    ancestor of `leaf` within `limit` steps; None otherwise."""
    if leaf == old_leaf:
        return []
    if leaf is None:
        return None
    walked: list[PathEntry] = []
    current: str | None = leaf
    while current is not None and len(walked) < limit:
        if current == old_leaf:
            walked.reverse()
            return walked
        row = conn.execute(
            "SELECT entry_id, seq, kind, fp, session, target_id, role, parent_id"
            " FROM session_entries WHERE entry_id = ?",
            (current,),
        ).fetchone()
        if row is None:
            return None
        walked.append(PathEntry(*row[:7]))
        current = row[7]
    if current is None and old_leaf is None:
        walked.reverse()
        return walked
    return None
