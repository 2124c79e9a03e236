"""Reading paths of the session tree: from a leaf back to its root.

Invariant: a path is read from the folded tables only, and every walk is bounded, so a cycle
(which the fold never creates, but a hand-edited import could) cannot hang a reader. The SQL is
one dialect for both stores (`log/tables.py`'s `Statements`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from ..log.tables import Statements

__all__ = ["PathEntry", "RecentPath", "read_leaf", "read_path", "read_recent", "walk_since"]

_MAX_DEPTH = 10_000_000

_COLUMNS = "entry_id, seq, kind, fp, session, target_id, role, parent_id"
# A step's rows are of one session, named in the query: its column is not read back per row.
_STEP_COLUMNS = "entry_id, seq, kind, fp, target_id, role, parent_id"

# A session_entries row as `_COLUMNS` reads it: a PathEntry's seven fields, then the parent's id;
# as `_STEP_COLUMNS` reads it, the same without the session.
_Row = tuple[str, int, str, str | None, str, str | None, str | None, str | None]
_StepRow = tuple[str, int, str, str | None, str | None, str | None, str | None]

# A PathEntry is built from a row as `_entry(PathEntry, row[:7])`: a NamedTuple's own __new__ is
# Python code, one call per entry of a path a thousand entries long.
_entry = tuple.__new__


class PathEntry(NamedTuple):
    """An entry of a branch (a tuple: a path of a thousand entries is read in every process's
    first capture of a session, and a frozen dataclass cost three times as much to build)."""

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


def read_path(conn: Statements, leaf: str | None, *, chunk: int = 256) -> list[PathEntry]:
    """The entries from the root down to `leaf` (`chunk`: the rows of the first step)."""
    entries = [entry for entry, _ in _upward(conn, leaf, chunk)]
    entries.reverse()
    return entries


def _upward(
    conn: Statements, leaf: str | None, chunk: int = 256
) -> Iterator[tuple[PathEntry, str | None]]:
    """The entries from `leaf` up to the root, leaf first, each with its parent's id (at most
    `_MAX_DEPTH`). An entry's parent is nearly always an earlier entry of its own session, so
    the rows are read by the session's index, in steps from the entry the walk stands on
    backwards; an entry the last step did not hold (the first entry of a continued or forked
    session, an abandoned branch's turn) is looked up by its id and starts the next step. Only
    parent links decide the path: a row of the session off the branch is read and passed over."""
    current = leaf
    held: dict[str, _StepRow] = {}
    session = ""  # of the rows held
    walked = 0
    while current is not None and walked < _MAX_DEPTH:
        step = held.get(current)
        if step is None:
            row: _Row | None = conn.execute(
                f"SELECT {_COLUMNS} FROM session_entries WHERE entry_id = ?", (current,)
            ).fetchone()
            if row is None:
                return  # a parent the tree does not hold: the path starts at its child
            session = row[4]
            rows: list[_StepRow] = conn.execute(
                f"SELECT {_STEP_COLUMNS} FROM session_entries WHERE session = ? AND seq < ?"
                " ORDER BY seq DESC LIMIT ?",
                (session, row[1], chunk),
            ).fetchall()
            held = {r[0]: r for r in rows}
            chunk = min(chunk * 2, 65_536)
            entry, current = _entry(PathEntry, row[:7]), row[7]
        else:
            entry = _entry(
                PathEntry, (step[0], step[1], step[2], step[3], session, step[4], step[5])
            )
            current = step[6]
        yield entry, current
        walked += 1


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
    walked: list[PathEntry] = []  # leaf first
    heads: list[str] = []
    needed: set[str] | None = None  # the kept entries still to reach, once a compaction is seen
    bounded = True
    margin_left = margin
    for entry, _ in _upward(conn, leaf, chunk):
        walked.append(entry)
        if not bounded:
            continue
        if needed is None:
            if entry.kind == "compaction":
                if entry.target is None:
                    bounded = False  # nothing kept to bound the read by: read it whole
                    continue
                kept, heads = compaction_refs(entry.seq)
                needed = {entry.target, *kept}
        else:
            needed.discard(entry.entry_id)
            if not needed and entry.kind == "message":
                margin_left -= 1
                if margin_left <= 0:
                    walked.reverse()
                    return RecentPath(walked, False, _entries(conn, heads))
    walked.reverse()
    return RecentPath(walked, True)


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
            found[entry_id] = _entry(PathEntry, row)
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
        walked.append(_entry(PathEntry, row[:7]))
        current = row[7]
    if current is None and old_leaf is None:
        walked.reverse()
        return walked
    return None
