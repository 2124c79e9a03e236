"""Recall's maintenance hook, called by the scheduler within a budget (the scheduler merges
recall's full-text indexes itself, as it does every FTS5 index).

Invariants: bounded work per call, resumable from a cursor; nothing is repaired behind anyone's
back: the consistency sweep reports problems, it does not rewrite beliefs (they are never
updated; a fix is an event).
"""

from __future__ import annotations

from ..capture.secrets import has_secret
from ..log.tables import Statements, TableAccess

__all__ = ["sweep_beliefs"]


def _count(conn: Statements, rows: str, value: object) -> int:
    found = conn.execute(f"SELECT count(*) FROM {rows}", (value,)).fetchone()
    return int(found[0]) if found else 0


def sweep_beliefs(tables: TableAccess, cursor: int, budget: int) -> dict[str, object]:
    """Check up to `budget` beliefs after rowid `cursor`: no supersession fork, no belief left
    visible when every message it came from is forgotten, no credential in a belief. Reports
    problems; repairs nothing. Beliefs do not decay: a newer statement supersedes instead."""
    limit = max(1, int(budget))
    problems: list[dict[str, object]] = []
    with tables.reading("sweeping beliefs") as conn:
        rows = conn.execute(
            "SELECT rowid, id, value, text FROM recall_beliefs WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (int(cursor), limit),
        ).fetchall()
        for _, belief, value, text in rows:
            successors = _count(conn, "recall_beliefs WHERE supersedes = ?", belief)
            if successors > 1:
                problems.append({"belief": belief, "problem": f"superseded {successors} times"})
            if has_secret(value) or has_secret(text):
                problems.append({"belief": belief, "problem": "holds a credential"})
            hidden = conn.execute(
                "SELECT 1 FROM recall_hidden WHERE target = ?", (belief,)
            ).fetchone()
            if hidden is None:
                sources = conn.execute(
                    "SELECT s.seq, EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || s.seq)"
                    " FROM recall_belief_sources s JOIN recall_messages m ON m.seq = s.seq"
                    " WHERE s.belief = ?",
                    (belief,),
                ).fetchall()
                if sources and all(gone for _, gone in sources):
                    problems.append({"belief": belief, "problem": "every source is forgotten"})
        last = rows[-1][0] if rows else int(cursor)
        remaining = _count(conn, "recall_beliefs WHERE rowid > ?", last)
    return {
        "processed": len(rows),
        "remaining": int(remaining),
        "cursor": 0 if remaining == 0 else int(last),
        "wrapped": remaining == 0,
        "problems": problems,
        "decay": "none: beliefs are superseded by newer statements, never decayed",
    }
