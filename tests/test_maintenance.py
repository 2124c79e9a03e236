"""Maintenance sweeps: bounded runs, persisted cursors, honest reports, problems found not hidden."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_scheduler_support import (
    START,
    FakeClock,
    message,
    on_postgres,
    open_core,
    places,
    reading,
    scheduler,
    writing,
)

from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.core import ChronicleCore
from chronicle_engine.scheduler.queue import JobSpec


@pytest.fixture(params=["memory", "file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


@pytest.fixture(params=["memory", "file"])
def sqlite_where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


def _results(core: ChronicleCore, kind: str) -> list[dict]:
    with reading(core) as conn:
        rows = conn.execute(
            "SELECT result FROM scheduler_jobs WHERE kind = ? AND state = 'done' ORDER BY id",
            (kind,),
        ).fetchall()
    return [json.loads(r[0]) for r in rows]


def _sections(core: ChronicleCore, count: int, chronicle: str = "conversation/x") -> None:
    core.store.append([message(core, "x", "user", f"m{i}", START + i) for i in range(count * 2)])
    target = core.chronicle(chronicle)
    for i in range(count):
        lo = 2 * i + 1
        target.append(Section(Anchor(f"{lo}-{lo + 1}", lo, lo + 1, unit=lo + 1), f"s{i}"))


def test_integrity_resumes_from_its_cursor_within_its_row_budget(where) -> None:
    core = open_core(
        where,
        {"maintenance": {"schedules": {"integrity": "0 5 * * *"}, "drain_per_hook": 1}},
        {"sweeps": {"row_budget": 4}},
    )
    _sections(core, 10)
    sched = scheduler(core, FakeClock())
    for _ in range(3):
        sched.tick("sync_turn")  # one run per hook: the continuation waits for the next
    runs = _results(core, "integrity")
    assert [(r["processed"], r["remaining"], r["wrapped"]) for r in runs] == [
        (4, 6, False),
        (4, 2, False),
        (2, 0, True),
    ]
    state = sched.sweeps.load("integrity")
    assert state.passes == 1 and state.cursor == 0
    assert "problems" not in runs[-1].get("detail", {})
    sched.tick("sync_turn")
    assert len(_results(core, "integrity")) == 3  # a finished pass does not chase itself
    core.shutdown()


def test_integrity_reports_a_range_the_log_does_not_hold_and_a_fork(
    where, caplog: pytest.LogCaptureFixture
) -> None:
    core = open_core(where, {"maintenance": {"schedules": {"integrity": "0 5 * * *"}}})
    _sections(core, 2)  # 1-2 and 3-4 over a log of four events
    # Damage the kind the store refuses to write: a section past the log's end, and a second
    # current section over a range already covered (as a hand-edited or half-carried file might).
    core.chronicle("conversation/x").append(Section(Anchor("5-9", 5, 9, unit=9), "beyond"))
    with writing(core) as conn:
        conn.execute(
            "INSERT INTO sections(chronicle, section_id, from_seq, to_seq, unit, prose, pins,"
            " created_at) VALUES ('conversation/x', '2-3', 2, 3, 3, 'forked', '[]', '')"
        )
    caplog.set_level(logging.WARNING, logger="chronicle_engine.scheduler")
    sched = scheduler(core, FakeClock())
    sched.tick("sync_turn")
    problems = _results(core, "integrity")[0]["detail"]["problems"]
    assert {(p["section_id"], p["problem"].split(" ")[0]) for p in problems} == {
        ("5-9", "cites"),
        ("2-3", "overlaps"),
    }
    assert any("integrity check: 2 problem(s)" in r.getMessage() for r in caplog.records)
    core.shutdown()


def test_queue_retention_runs_as_a_scheduled_sweep(where) -> None:
    core = open_core(
        where,
        {"maintenance": {"schedules": {"queue_retention": "0 * * * *"}}},
        {"queue": {"retention": {"days": 1, "max_rows": 0}}},
        {"sweeps": {"row_budget": 1000}},
    )
    clock = FakeClock(START + 60)
    sched = scheduler(core, clock)
    for i in range(12):
        sched.queue.enqueue(JobSpec("integrity", "maintenance", key=f"old-{i}"))
    sched.run_pending()
    clock.advance(2 * 86400)
    sched.tick("sync_turn")
    (run,) = _results(core, "queue_retention")
    assert (run["processed"], run["remaining"]) == (12, 0)
    assert sched.queue.counts()["done"] == 1  # only the retention run itself is left
    core.shutdown()


def test_the_wal_checkpoint_is_passive_and_reports_frames(tmp_path: Path) -> None:
    core = open_core(
        tmp_path / "wal.db", {"maintenance": {"schedules": {"wal_checkpoint": "* * * * *"}}}
    )
    core.store.append([message(core, "x", "user", f"m{i}" * 200, START) for i in range(200)])
    sched = scheduler(core, FakeClock())
    sched.tick("sync_turn")
    (run,) = _results(core, "wal_checkpoint")
    assert run["processed"] > 0 and run["remaining"] == 0 and run["wrapped"]
    assert run["detail"]["wal_frames"] >= run["processed"]
    core.shutdown()


def test_an_in_memory_store_skips_the_checkpoint_and_says_why() -> None:
    core = open_core(":memory:", {"maintenance": {"schedules": {"wal_checkpoint": "* * * * *"}}})
    sched = scheduler(core, FakeClock())
    sched.tick("sync_turn")
    (run,) = _results(core, "wal_checkpoint")
    assert run["skipped"] == "an in-memory database has no WAL"
    core.shutdown()


def test_the_belief_sweep_runs_recalls_hook(where) -> None:
    core = open_core(where, {"maintenance": {"schedules": {"belief_sweep": "* * * * *"}}})
    sched = scheduler(core, FakeClock())
    sched.tick("sync_turn")
    (run,) = _results(core, "belief_sweep")
    assert "skipped" not in run and run["wrapped"]
    outcomes = {s["task"]: s["last_outcome"] for s in sched.maintenance_status()["schedules"]}
    assert outcomes["belief_sweep"].startswith("done")
    core.shutdown()


def _forty_segments(where: str | Path) -> ChronicleCore:
    """A core whose full-text index `notes` was written in forty transactions (forty segments,
    several pages each, to merge), fts_optimize due every minute, two pages a run."""
    core = open_core(
        where,
        {"maintenance": {"schedules": {"fts_optimize": "* * * * *"}, "drain_per_hook": 1}},
        {"sweeps": {"row_budget": 2}},
    )
    with core.store.atomic() as conn:
        conn.execute("CREATE VIRTUAL TABLE notes USING fts5(body)")
    for i in range(40):
        words = " ".join(f"w{(i * 7919 + j * 104729) % 100003}" for j in range(400))
        with core.store.atomic() as conn:
            conn.execute("INSERT INTO notes(body) VALUES (?)", (f"{words} lisbon trip",))
    return core


def test_fts_optimize_merges_full_text_segments_in_bounded_runs_until_done(sqlite_where) -> None:
    core = _forty_segments(sqlite_where)
    sched = scheduler(core, FakeClock())
    for _ in range(60):
        sched.tick("sync_turn")
    runs = _results(core, "fts_optimize")
    assert len(runs) > 2  # bounded: it took several runs, each a continuation of the last
    assert all(r["detail"]["indexes"].keys() >= {"notes"} for r in runs)
    assert runs[0]["processed"] > 0 and runs[-1]["processed"] == 0 and runs[-1]["wrapped"]
    with reading(core) as conn:
        hits = conn.execute("SELECT count(*) FROM notes WHERE notes MATCH 'lisbon'").fetchone()[0]
    assert hits == 40
    core.shutdown()


def test_fts_optimize_merges_levels_of_fewer_than_four_segments(sqlite_where) -> None:
    """FTS5's merge command leaves a level of fewer than four segments alone by default, so a
    long-lived index kept up to three on every level, each looked up by every query word."""
    core = _forty_segments(sqlite_where)

    def segments() -> int:
        with reading(core) as conn:
            return int(conn.execute("SELECT count(DISTINCT segid) FROM notes_idx").fetchone()[0])

    with core.store.atomic() as conn:  # what FTS5's default merge leaves: three, one level
        while True:
            before = conn.total_changes
            conn.execute("INSERT INTO notes(notes, rank) VALUES ('merge', 2)")
            if conn.total_changes - before <= 1:
                break
    assert segments() == 3
    sched = scheduler(core, FakeClock())
    for _ in range(60):
        sched.tick("sync_turn")
    runs = _results(core, "fts_optimize")
    assert len(runs) > 2 and runs[-1]["wrapped"] and runs[-1]["processed"] == 0
    assert segments() == 1
    with reading(core) as conn:
        hits = conn.execute("SELECT count(*) FROM notes WHERE notes MATCH 'lisbon'").fetchone()[0]
    assert hits == 40
    core.shutdown()


def test_a_registered_sweep_continues_until_its_pass_is_done(where) -> None:
    from chronicle_engine.scheduler.sweeps import SweepReport

    core = open_core(where, {"sweeps": {"row_budget": 3}})
    sched = scheduler(core, FakeClock())
    rows = list(range(10))

    def sweep(ctx):
        state = ctx.sweeps.load("demo")
        batch = rows[state.cursor : state.cursor + ctx.budget]
        cursor = state.cursor + len(batch)
        report = SweepReport(
            "demo", len(batch), len(rows) - cursor, cursor, wrapped=cursor == len(rows)
        )
        ctx.sweeps.save(report)
        return report

    sched.handle("demo", sweep)
    sched.queue.enqueue(JobSpec("demo", "maintenance"))
    for _ in range(6):
        sched.tick("sync_turn")
    runs = _results(core, "demo")
    assert [r["processed"] for r in runs] == [3, 3, 3, 1]
    assert sched.sweeps.load("demo").passes == 1
    core.shutdown()


def test_the_sqlite_only_sweeps_say_why_they_do_nothing_on_postgresql(where) -> None:
    core = open_core(
        where,
        {
            "maintenance": {
                "schedules": {"fts_optimize": "* * * * *", "wal_checkpoint": "* * * * *"}
            }
        },
    )
    core.capture.capture_messages("s", [{"role": "user", "content": "the boiler is due"}])
    assert core.recall.search("boiler", limit=1)  # (recall's tables, the full-text index too)
    sched = scheduler(core, FakeClock())
    for _ in range(4):
        sched.tick("sync_turn")
    optimized, checkpointed = _results(core, "fts_optimize"), _results(core, "wal_checkpoint")
    if not on_postgres(core):
        # SQLite runs both (an in-memory database has no WAL to checkpoint).
        assert "skipped" not in optimized[0] and "indexes" in optimized[0]["detail"]
        if str(where) == ":memory:":
            assert checkpointed[0]["skipped"] == "an in-memory database has no WAL"
        else:
            assert "skipped" not in checkpointed[0] and "wal_frames" in checkpointed[0]["detail"]
        core.shutdown()
        return
    assert optimized == [
        {
            "task": "fts_optimize",
            "processed": 0,
            "remaining": 0,
            "cursor": 0,
            "wrapped": False,
            "skipped": "PostgreSQL merges its GIN indexes itself (autovacuum)",
        }
    ]
    assert checkpointed[0]["skipped"] == "PostgreSQL checkpoints its WAL itself"
    assert sched.queue.counts()["failed"] == 0
    core.shutdown()


def test_sweeps_stop_between_pieces_when_the_process_stops(sqlite_where) -> None:
    """`integrity` and `fts_optimize` look at the stop between two pieces of work: what they
    did is kept (the cursor, the merged indexes) and the report says what remains."""
    from chronicle_engine.scheduler.maintenance import MAINTENANCE, TaskContext

    core = open_core(sqlite_where, {}, {"sweeps": {"row_budget": 10}})
    _sections(core, 6)
    assert core.recall.search("m1") is not None  # (recall's full-text indexes made)
    sched = core.scheduler
    looks = 0

    def after(n: int):
        def stopping() -> bool:
            nonlocal looks
            looks += 1
            return looks > n

        return stopping

    def ctx(stopping) -> TaskContext:
        return TaskContext(
            core.store, lambda: core.recall, sched.queue, sched.sweeps, sched.settings,
            10, 0.0, stopping,
        )  # fmt: skip

    report = MAINTENANCE["integrity"](ctx(after(2)))
    assert (report.processed, report.remaining, report.wrapped) == (2, 4, False)
    looks = 0
    report = MAINTENANCE["integrity"](ctx(after(100)))
    assert (report.processed, report.remaining, report.wrapped) == (4, 0, True)
    looks = 0
    report = MAINTENANCE["fts_optimize"](ctx(after(0)))
    assert report.skipped is None
    assert (report.detail["indexes"], report.remaining, report.wrapped) == ({}, 1, False)
    core.shutdown()
