"""Reading paths of the session tree: from a leaf back to its root.

Invariant: a path is read from the folded tables only, and every walk is bounded, so a cycle
(which the fold never creates, but a hand-edited import could) cannot hang a reader. The SQL is
one dialect for both stores (`log/tables.py`'s `Statements`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..log.tables import Statements

__all__ = ["PathEntry", "RecentPath", "read_leaf", "read_path", "read_recent", "walk_since"]

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


def read_leaf(conn: Statements, session: str) -> str | None:
    """The session's leaf entry id as `conn` sees it (None for a session the tree has not seen)."""
    row = conn.execute("SELECT leaf_id FROM session_heads WHERE session = ?", (session,)).fetchone()
    return row[0] if row else None


def read_path(conn: Statements, leaf: str | None) -> list[PathEntry]:
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


@dataclass(frozen=True, slots=True)
class RecentPath:
    """The end of a branch: `entries` from some entry down to the leaf (root first), and the
    latest compaction's protected head, which sits near the root, outside them. `complete`:
    `entries` start at the root (the whole branch; `heads` is then empty)."""

    entries: list[PathEntry]
    complete: bool
    heads: list[PathEntry] = field(default_factory=list)


def read_recent(
    conn: Statements,
    leaf: str | None,
    compaction_refs: Callable[[int], tuple[list[str], list[str]]],
    *,
    margin: int = 32,
    chunk: int = 256,
) -> RecentPath:
    """The part of the branch at `leaf` that the latest compaction left in the context: from
    `margin` messages before the earliest message it kept down to the leaf, and its head
    entries. Read from the leaf upwards in growing steps, so the rows read grow with what the
    compaction kept and what followed it, not with the history before it. A branch with no
    compaction, or whose compaction refers to entries that are not its ancestors, is read
    whole (`complete`). `compaction_refs(seq)`: the compaction entry's (kept entry ids, head
    entry ids) from its payload."""
    if leaf is None:
        return RecentPath([], True)
    walked: list[PathEntry] = []  # leaf first
    heads: list[str] = []
    needed: set[str] | None = None  # the kept entries still to reach, once a compaction is seen
    margin_left = margin
    current: str | None = leaf
    while current is not None and len(walked) < _MAX_DEPTH:
        rows = conn.execute(
            "WITH RECURSIVE up(entry_id, parent_id, seq, kind, fp, session, target_id, role,"
            " depth) AS (SELECT entry_id, parent_id, seq, kind, fp, session, target_id, role, 0"
            " FROM session_entries WHERE entry_id = ?"
            " UNION ALL"
            " SELECT e.entry_id, e.parent_id, e.seq, e.kind, e.fp, e.session, e.target_id,"
            " e.role, u.depth + 1 FROM session_entries e JOIN up u ON e.entry_id = u.parent_id"
            " WHERE u.depth + 1 < ?"
            ") SELECT entry_id, seq, kind, fp, session, target_id, role, parent_id FROM up"
            " ORDER BY depth",
            (current, chunk),
        ).fetchall()
        if not rows:
            break
        for row in rows:
            entry = PathEntry(*row[:7])
            walked.append(entry)
            if needed is None:
                if entry.kind == "compaction":
                    if entry.target is None:
                        break  # nothing kept to bound the read by: read it whole below
                    kept, heads = compaction_refs(entry.seq)
                    needed = {entry.target, *kept}
            else:
                needed.discard(entry.entry_id)
                if not needed and entry.kind == "message":
                    margin_left -= 1
                    if margin_left <= 0:
                        walked.reverse()
                        return RecentPath(walked, False, _entries(conn, heads))
        else:
            current = rows[-1][7]
            chunk = min(chunk * 2, 65_536)
            continue
        break
    if current is None:  # reached the root: the whole branch was read
        walked.reverse()
        return RecentPath(walked, True)
    return RecentPath(read_path(conn, leaf), True)


def _entries(conn: Statements, ids: list[str]) -> list[PathEntry]:
    """The entries with these ids, in the order given (ids the tree does not hold left out)."""
    found: dict[str, PathEntry] = {}
    for entry_id in dict.fromkeys(ids):
        row = conn.execute(
            "SELECT entry_id, seq, kind, fp, session, target_id, role FROM session_entries"
            " WHERE entry_id = ?",
            (entry_id,),
        ).fetchone()
        if row is not None:
            found[entry_id] = PathEntry(*row)
    return [found[i] for i in ids if i in found]


def walk_since(
    conn: Statements, leaf: str | None, old_leaf: str | None, limit: int = 64
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
