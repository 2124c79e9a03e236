"""Recall's maintenance hooks, called by the scheduler within a budget.

Invariants: each call does bounded work in short transactions and never raises for a busy store
(it reports what it could not do); nothing is repaired behind anyone's back: the consistency
sweep reports problems, it does not rewrite beliefs (they are never updated; a fix is an event).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ..errors import StoreBusy
from ..log.store import SQLiteEventStore, sqlite_errors
from .redact import has_secret
from .schema import message_index

__all__ = ["optimize_fts", "sweep_beliefs"]

_MAX_PAGES = 500


def _indexes(conn: sqlite3.Connection) -> list[str]:
    scoped = [message_index(n) for (n,) in conn.execute("SELECT n FROM recall_scopes ORDER BY n")]
    return [*scoped, "recall_beliefs_fts", "recall_sections_fts"]


def optimize_fts(store: SQLiteEventStore, budget: int) -> dict[str, Any]:
    """Merge index segments, at most `budget` pages of work per index (FTS5's incremental
    'merge'), one short transaction per index."""
    pages = max(16, min(int(budget), _MAX_PAGES))
    with sqlite_errors("listing recall's indexes"), store.reading() as conn:
        tables = _indexes(conn)
    merged = 0
    busy: list[str] = []
    unfinished = 0
    for table in tables:
        try:
            with sqlite_errors(f"merging {table}"), store.atomic() as conn:
                before = conn.total_changes
                conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (pages,))
                if conn.total_changes - before > 2:
                    unfinished += 1  # it did work, so there may be more left
        except StoreBusy:
            busy.append(table)
            continue
        merged += 1
    return {
        "processed": merged,
        "remaining": len(busy) + unfinished,
        "wrapped": True,
        "indexes": len(tables),
        "busy": busy,
    }


def sweep_beliefs(store: SQLiteEventStore, cursor: int, budget: int) -> dict[str, Any]:
    """Check up to `budget` beliefs after rowid `cursor`: no supersession fork, no belief left
    visible when every message it came from is forgotten, no credential in a belief. Reports
    problems; repairs nothing. Beliefs do not decay: a newer statement supersedes instead."""
    limit = max(1, int(budget))
    problems: list[dict[str, Any]] = []
    with sqlite_errors("sweeping beliefs"), store.reading() as conn:
        rows = conn.execute(
            "SELECT rowid, id, value, text FROM recall_beliefs WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (int(cursor), limit),
        ).fetchall()
        for _, belief, value, text in rows:
            successors = conn.execute(
                "SELECT count(*) FROM recall_beliefs WHERE supersedes = ?", (belief,)
            ).fetchone()[0]
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
        remaining = conn.execute(
            "SELECT count(*) FROM recall_beliefs WHERE rowid > ?", (last,)
        ).fetchone()[0]
    return {
        "processed": len(rows),
        "remaining": int(remaining),
        "cursor": 0 if remaining == 0 else int(last),
        "wrapped": remaining == 0,
        "problems": problems,
        "decay": "none: beliefs are superseded by newer statements, never decayed",
    }
