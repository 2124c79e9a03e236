"""Resumable sweeps: bounded work per run, a persisted cursor, and a report that says how much is left.

A sweep never pretends to be finished. Each run visits at most its row budget, saves where it
stopped, and reports `processed` and `remaining`; the next run resumes from the cursor. When a pass
reaches the end, the cursor returns to the start and `passes` counts one more.

The cursors are one table on either store (`Statements`: the same SQL on SQLite and PostgreSQL;
the PostgreSQL table is `postgres.py`'s). A sweep runs as a job, and the queue runs one live job
per key across every host, so two hosts never save the same cursor at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from ..log.tables import Statements, TableAccess

__all__ = ["SweepReport", "SweepState", "SweepCursors"]


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one run did. `skipped` says why a run did nothing at all (e.g. no hook to call)."""

    task: str
    processed: int = 0
    remaining: int = 0
    cursor: int = 0
    wrapped: bool = False
    skipped: str | None = None
    detail: dict[str, object] = field(default_factory=dict)

    @property
    def more(self) -> bool:
        """Worth another run right away: it made progress and work is left."""
        return self.skipped is None and self.processed > 0 and self.remaining > 0

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "task": self.task,
            "processed": self.processed,
            "remaining": self.remaining,
            "cursor": self.cursor,
            "wrapped": self.wrapped,
        }
        if self.skipped is not None:
            out["skipped"] = self.skipped
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True)
class SweepState:
    name: str
    cursor: int = 0
    passes: int = 0
    report: dict[str, object] = field(default_factory=dict)
    updated_at: float | None = None


class SweepCursors:
    """The `scheduler_sweeps` table: one cursor per sweep, in `tables`' database."""

    def __init__(self, tables: TableAccess, *, clock: Callable[[], float]) -> None:
        self.tables = tables
        self.clock = clock

    def load(self, name: str) -> SweepState:
        with self.tables.reading("reading a sweep cursor") as conn:
            return self._load(conn, name)

    def save(self, report: SweepReport, conn: Statements | None = None) -> SweepState:
        """Persist where `report` stopped; a wrapped pass resets the cursor and counts a pass."""
        if conn is not None:
            return self._save(conn, report)
        with self.tables.writing("saving a sweep cursor") as c:
            return self._save(c, report)

    def _save(self, conn: Statements, report: SweepReport) -> SweepState:
        state = self._load(conn, report.task)
        cursor = 0 if report.wrapped else report.cursor
        passes = state.passes + (1 if report.wrapped else 0)
        now = self.clock()
        conn.execute(
            "INSERT INTO scheduler_sweeps(name, cursor, passes, report, updated_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET cursor = excluded.cursor,"
            " passes = excluded.passes, report = excluded.report, updated_at = excluded.updated_at",
            (
                report.task,
                cursor,
                passes,
                json.dumps(report.as_dict(), sort_keys=True, default=str),
                now,
            ),
        )
        return SweepState(report.task, cursor, passes, report.as_dict(), now)

    @staticmethod
    def _load(conn: Statements, name: str) -> SweepState:
        row = conn.execute(
            "SELECT cursor, passes, report, updated_at FROM scheduler_sweeps WHERE name = ?",
            (name,),
        ).fetchone()
        if row is None:
            return SweepState(name)
        return SweepState(name, int(row[0]), int(row[1]), json.loads(row[2]), row[3])

    def all(self) -> dict[str, SweepState]:
        with self.tables.reading("reading sweep cursors") as conn:
            rows = conn.execute(
                "SELECT name, cursor, passes, report, updated_at FROM scheduler_sweeps ORDER BY name"
            ).fetchall()
        return {r[0]: SweepState(r[0], int(r[1]), int(r[2]), json.loads(r[3]), r[4]) for r in rows}
