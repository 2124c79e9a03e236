"""Maintenance sweeps: each bounded per run, resumable from a persisted cursor, honest about what is left.

- `fts_optimize` runs FTS5's own incremental merge on each full-text index, `budget` pages a
  run, until a merge finds nothing to do (layout only: no row is added, changed or removed);
  any two segments of one level are merged (`_LEVEL_MERGES_AT`).
- `belief_sweep` belongs to recall, which owns the beliefs: the scheduler calls its
  `sweep_beliefs(cursor=, budget=)`.
- `queue_retention` prunes finished job rows within the age and count bounds.
- `wal_checkpoint` is PASSIVE: it copies what it can and never waits for a reader or a writer.
- `integrity` walks every chronicle's current sections: each range must lie inside the log (both
  ends are events), and no two current sections of one chronicle may overlap. A problem is logged
  and reported; nothing is repaired behind anyone's back.

On PostgreSQL `fts_optimize` and `wal_checkpoint` report themselves skipped (the server merges a
GIN index's pending entries and checkpoints its WAL by itself); the others run the same SQL on
both stores, through the sweep cursors' `Statements`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..log.store import SQLiteEventStore, sqlite_errors
from .queue import JobQueue
from .settings import Settings
from .sweeps import SweepCursors, SweepReport

if TYPE_CHECKING:
    from ..log.postgres import PostgresEventStore
    from ..recall.recall import Recall
    from .postgres import PostgresJobQueue


__all__ = ["TaskContext", "MAINTENANCE"]

log = logging.getLogger("chronicle_engine.scheduler")

_CURRENT = (
    "NOT EXISTS (SELECT 1 FROM sections nx WHERE nx.chronicle = {t}.chronicle"
    " AND nx.supersedes = {t}.section_id)"
)


def _never() -> bool:
    return False


@dataclass(frozen=True, slots=True)
class TaskContext:
    store: SQLiteEventStore | PostgresEventStore
    recall: Callable[[], Recall]  # built when a task first needs it
    queue: JobQueue | PostgresJobQueue
    sweeps: SweepCursors
    settings: Settings
    budget: int
    now: float
    stopping: Callable[[], bool] = _never
    """Whether the process is stopping: a long task looks between two pieces of work and,
    having kept nothing half done, raises `JobCut` (its claim is given back at once); a sweep
    whose pieces each commit (`fts_optimize`'s indexes, `integrity`'s sections under its
    cursor) stops there and reports what remains, which the next run picks up."""


def _from_hook(task: str, answer: object, cursor: int = 0) -> SweepReport:
    if not isinstance(answer, Mapping):
        return SweepReport(task, processed=1, cursor=cursor, wrapped=True)
    return SweepReport(
        task,
        processed=int(answer.get("processed", 0)),
        remaining=int(answer.get("remaining", 0)),
        cursor=int(answer.get("cursor", cursor)),
        wrapped=bool(answer.get("wrapped", int(answer.get("remaining", 0)) == 0)),
        detail={k: v for k, v in answer.items() if k not in {"processed", "remaining", "cursor"}},
    )


_LEVEL_MERGES_AT = 2
"""Segments one level of an FTS5 index must hold before the merge command merges them
(`usermerge`; FTS5's default is 4). At 4, a long-lived index keeps up to three segments on
every level (11 and 9 segments on the 1M lived store, each looked up by every query word); at
2 one segment a level is left, about log4 of the index's size, and a segment is still only
rewritten when one of its own size joins its level (no whole-index rewrite a run, as
`optimize` or a negative merge would do). On a copy of the 1M lived store (40 conversations of
1,001 messages added), instructions a default-scope search: 18.24M as lived (11 and 9
segments), 17.57M merged at 4 (4 and 9), 16.92M at 2 (4 and 3); one segment each (a whole
rewrite) 16.41M."""


def fts_optimize(ctx: TaskContext) -> SweepReport:
    """FTS5's own incremental merge on every full-text index in the database, `budget` pages
    each, merging any level that holds `_LEVEL_MERGES_AT` segments. FTS5 keeps where a merge
    stopped, so that is the cursor; a merge that changes nothing means the index is as merged
    as it gets. Only segment layout changes, never content."""
    store = ctx.store
    if not isinstance(store, SQLiteEventStore):
        return SweepReport(
            "fts_optimize", skipped="PostgreSQL merges its GIN indexes itself (autovacuum)"
        )
    with sqlite_errors("listing full-text indexes"), store.reading() as conn:
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND lower(sql) LIKE 'create virtual table%using fts5%' ORDER BY name"
            )
        ]
    if not tables:
        return SweepReport("fts_optimize", skipped="the database has no full-text index")
    changed: dict[str, int] = {}
    for table in tables:
        if ctx.stopping():
            break  # each index's merge committed on its own; the next run goes on
        quoted = '"' + table.replace('"', '""') + '"'
        config = '"' + (table + "_config").replace('"', '""') + '"'  # FTS5's own shadow table
        with sqlite_errors(f"merging full-text index {table}"), store.atomic() as conn:
            # (kept in the index's own config: a setting, not content; the merge reads it;
            # written once, not a row rewritten every run)
            held = conn.execute(f"SELECT v FROM {config} WHERE k = 'usermerge'").fetchone()
            if held is None or held[0] != _LEVEL_MERGES_AT:
                conn.execute(
                    f"INSERT INTO {quoted}({quoted}, rank) VALUES ('usermerge', ?)",
                    (_LEVEL_MERGES_AT,),
                )
            before = conn.total_changes
            conn.execute(f"INSERT INTO {quoted}({quoted}, rank) VALUES ('merge', ?)", (ctx.budget,))
            # The merge command counts as one change itself; more means it moved pages.
            changed[table] = max(0, conn.total_changes - before - 1)
    worked = sum(changed.values())
    cut = len(changed) < len(tables)  # stopped before every index was merged
    return SweepReport(
        "fts_optimize",
        processed=worked,
        remaining=1 if worked or cut else 0,  # unknown until a merge finds nothing left to do
        wrapped=not worked and not cut,
        detail={"indexes": changed},
    )


def belief_sweep(ctx: TaskContext) -> SweepReport:
    cursor = ctx.sweeps.load("belief_sweep").cursor
    answer = ctx.recall().sweep_beliefs(cursor=cursor, budget=ctx.budget)
    report = _from_hook("belief_sweep", answer, cursor)
    ctx.sweeps.save(report)
    return report


def queue_retention(ctx: TaskContext) -> SweepReport:
    s = ctx.settings
    if s.retention_days <= 0 and s.retention_max_rows <= 0:
        return SweepReport(
            "queue_retention",
            skipped="queue.retention.days and queue.retention.max_rows are both 0",
        )
    pruned, remaining = ctx.queue.prune(
        max_age_seconds=s.retention_days * 86400.0,
        max_rows=s.retention_max_rows,
        limit=ctx.budget,
    )
    return SweepReport("queue_retention", pruned, remaining, wrapped=remaining == 0)


def wal_checkpoint(ctx: TaskContext) -> SweepReport:
    store = ctx.store
    if not isinstance(store, SQLiteEventStore):
        return SweepReport("wal_checkpoint", skipped="PostgreSQL checkpoints its WAL itself")
    if store.in_memory:
        return SweepReport("wal_checkpoint", skipped="an in-memory database has no WAL")
    with sqlite_errors("checkpointing the WAL"), store.reading() as conn:
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    frames, copied = max(int(frames), 0), max(int(copied), 0)
    return SweepReport(
        "wal_checkpoint",
        processed=copied,
        remaining=max(frames - copied, 0),
        wrapped=frames == copied,
        detail={"busy": bool(busy), "wal_frames": frames},
    )


def integrity(ctx: TaskContext) -> SweepReport:
    start = ctx.sweeps.load("integrity").cursor
    problems: list[dict[str, str]] = []
    last_seq = ctx.store.last_seq()
    with ctx.sweeps.tables.reading("checking chronicle integrity") as conn:
        rows = conn.execute(
            "SELECT s.written, s.chronicle, s.section_id, s.from_seq, s.to_seq FROM sections s"
            f" WHERE s.written > ? AND {_CURRENT.format(t='s')} ORDER BY s.written LIMIT ?",
            (start, ctx.budget),
        ).fetchall()
        cursor = start
        checked = 0
        for written, chronicle, section_id, lo, hi in rows:
            if ctx.stopping():
                break  # the cursor keeps the sections checked; the next run goes on
            cursor = written
            checked += 1
            ends = {lo, hi}
            present = len(ctx.store.holds(ends))
            if lo < 1 or hi > last_seq or present != len(ends):
                problems.append(
                    {
                        "chronicle": chronicle,
                        "section_id": section_id,
                        "problem": f"cites {lo}..{hi}, which the log (1..{last_seq}) does not hold",
                    }
                )
            overlap = conn.execute(
                "SELECT o.section_id, o.from_seq, o.to_seq FROM sections o"
                " WHERE o.chronicle = ? AND o.written < ? AND o.from_seq <= ? AND o.to_seq >= ?"
                f" AND {_CURRENT.format(t='o')} LIMIT 1",
                (chronicle, written, hi, lo),
            ).fetchone()
            if overlap is not None:
                problems.append(
                    {
                        "chronicle": chronicle,
                        "section_id": section_id,
                        "problem": f"overlaps current section {overlap[0]!r} "
                        f"({overlap[1]}..{overlap[2]}): the chronicle has forked",
                    }
                )
        counted = conn.execute(
            f"SELECT COUNT(*) FROM sections s WHERE s.written > ? AND {_CURRENT.format(t='s')}",
            (cursor,),
        ).fetchone()
        remaining = int(counted[0]) if counted else 0
    if problems:
        log.warning(
            "integrity check: %d problem(s) in chronicle sections, e.g. %s in %s: %s",
            len(problems),
            problems[0]["section_id"],
            problems[0]["chronicle"],
            problems[0]["problem"],
        )
    report = SweepReport(
        "integrity",
        processed=checked,
        remaining=remaining,
        cursor=cursor,
        wrapped=remaining == 0,
        detail={"problems": problems} if problems else {},
    )
    ctx.sweeps.save(report)
    return report


MAINTENANCE: dict[str, Callable[[TaskContext], SweepReport]] = {
    "fts_optimize": fts_optimize,
    "belief_sweep": belief_sweep,
    "queue_retention": queue_retention,
    "wal_checkpoint": wal_checkpoint,
    "integrity": integrity,
}
