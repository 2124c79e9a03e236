"""Sweep cursors on each store (SQLite, and PostgreSQL through `PostgresTables`): the same SQL
keeps where a sweep stopped, counts a pass when it wraps, and reads back what it saved."""

from __future__ import annotations

import pytest
from postgres_support import Target

from chronicle_engine.log.tables import SQLiteTables
from chronicle_engine.scheduler.sweeps import SweepCursors, SweepReport, SweepState


@pytest.fixture
def cursors(target: Target):
    clock = iter(float(t) for t in range(1000, 2000))
    store, _queue = target.open_queue(lambda: 0.0)  # migrates the scheduler's tables
    if target.kind == "sqlite":
        tables = SQLiteTables(store)
    else:
        from chronicle_engine.log.postgres import PostgresTables

        tables = PostgresTables(store)
    yield SweepCursors(tables, clock=lambda: next(clock)), tables
    store.close()


def test_a_sweep_resumes_wraps_and_counts_its_passes(cursors) -> None:
    sweeps, tables = cursors
    assert sweeps.load("integrity") == SweepState("integrity")
    first = sweeps.save(SweepReport("integrity", processed=50, remaining=70, cursor=50))
    assert (first.cursor, first.passes, first.updated_at) == (50, 0, 1000.0)
    assert sweeps.load("integrity") == first
    wrapped = sweeps.save(
        SweepReport("integrity", processed=70, remaining=0, cursor=120, wrapped=True),
    )
    assert (wrapped.cursor, wrapped.passes) == (0, 1)
    with tables.writing("a caller's own transaction") as conn:
        sweeps.save(SweepReport("belief_sweep", processed=3, cursor=2**40, detail={"é": [1]}), conn)
    everything = sweeps.all()
    assert sorted(everything) == ["belief_sweep", "integrity"]
    assert everything["belief_sweep"].cursor == 2**40
    assert everything["belief_sweep"].report["detail"] == {"é": [1]}
    assert everything["integrity"] == sweeps.load("integrity") == wrapped


def test_a_failed_transaction_keeps_the_cursor_it_had(cursors) -> None:
    sweeps, tables = cursors
    sweeps.save(SweepReport("integrity", processed=5, cursor=5))
    with pytest.raises(RuntimeError), tables.writing("a transaction that fails") as conn:
        sweeps.save(SweepReport("integrity", processed=5, cursor=10), conn)
        raise RuntimeError("after the save, before the commit")
    assert sweeps.load("integrity").cursor == 5
