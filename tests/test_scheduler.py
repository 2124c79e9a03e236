"""The hook path: schedules fire once per due time, cost nothing when nothing is due, never raise."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from croniter import croniter
from test_scheduler_support import (
    START,
    FakeClock,
    on_postgres,
    open_core,
    places,
    reading,
    scheduler,
    writing,
)

from chronicle_engine.core import ChronicleCore
from chronicle_engine.scheduler.scheduler import NOT_SCHEDULED


@pytest.fixture(params=["memory", "file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


def _on(**crons: str) -> dict:
    return {"maintenance": {"schedules": crons}}


def _jobs(core: ChronicleCore, kind: str) -> list[dict]:
    with reading(core) as conn:
        rows = conn.execute(
            "SELECT payload, state FROM scheduler_jobs WHERE kind = ? ORDER BY id", (kind,)
        ).fetchall()
    return [{**json.loads(p), "state": s} for p, s in rows]


def _expected_dues(cron: str, start: float, end: float) -> list[float]:
    """The due times a schedule that never ran should handle when hooks arrive from start to end:
    the latest slot at or before `start` (it never ran, so it is due at once), then each slot."""
    first = croniter(cron, start + 1).get_prev(float)
    dues = [first]
    it = croniter(cron, first)
    while (nxt := it.get_next(float)) <= end:
        dues.append(nxt)
    return dues


def test_schedules_fire_once_per_due_time_across_many_hook_calls(where) -> None:
    core = open_core(where, _on(integrity="*/5 * * * *", queue_retention="*/15 * * * *"))
    clock = FakeClock(START + 17)
    sched = scheduler(core, clock=clock)
    start = clock()
    for _ in range(1000):  # a hook every 7 s for almost two hours, draining on half of them
        sched.tick("on_turn_start")
        sched.tick("sync_turn")
        clock.advance(7)
    end = clock() - 7
    for kind, cron in (("integrity", "*/5 * * * *"), ("queue_retention", "*/15 * * * *")):
        jobs = _jobs(core, kind)
        dues = [j["due"] for j in jobs if "due" in j]
        assert dues == _expected_dues(cron, start, end)
        assert len(set(dues)) == len(dues)
        assert all(j["state"] == "done" for j in jobs)
    core.shutdown()


def test_a_due_time_fires_once_across_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    one, two = (
        open_core(path, _on(integrity="* * * * *")),
        open_core(path, _on(integrity="* * * * *")),
    )
    clock = FakeClock(START)
    first, second = scheduler(one, clock), scheduler(two, clock)
    for _ in range(120):
        first.tick("sync_turn")
        second.tick("sync_turn")
        clock.advance(30)
    dues = [j["due"] for j in _jobs(one, "integrity")]
    assert len(dues) == len(set(dues))
    assert dues == _expected_dues("* * * * *", START, clock() - 30)
    one.shutdown()
    two.shutdown()


def test_one_call_enqueues_at_most_one_due_job(where) -> None:
    crons = {
        "integrity": "* * * * *",
        "queue_retention": "* * * * *",
        "wal_checkpoint": "* * * * *",
        "fts_optimize": "* * * * *",
    }
    core = open_core(where, _on(**crons))
    sched = scheduler(core, FakeClock())
    counts = []
    for _ in range(5):
        sched.tick("on_turn_start")  # not a draining hook: jobs stay queued
        counts.append(sched.queue.counts()["pending"])
    assert counts == [1, 2, 3, 4, 4]
    core.shutdown()


def test_a_call_with_nothing_due_executes_no_sql(where) -> None:
    core = open_core(where, _on(integrity="0 4 * * *", consolidate="* * * * *"))
    clock = FakeClock(START + 5)
    sched = scheduler(core, clock)
    sched.tick("sync_turn")  # the first call learns the watermarks and runs what was due
    sched.tick("sync_turn")
    statements: list[str] = []
    with _tracing(core, statements):
        for _ in range(2000):
            sched.tick("sync_turn")
            sched.tick("on_turn_start")
            clock.advance(0.01)  # twenty seconds in all: the next minute is not reached
    assert statements == []
    clock.advance(60)
    with _tracing(core, statements):
        sched.tick("sync_turn")
    assert statements, "a due schedule must reach the database"
    core.shutdown()


@contextlib.contextmanager
def _tracing(core, statements: list[str]) -> Iterator[None]:
    """Every statement SQLite runs; on PostgreSQL, every transaction or read the store opens
    (each statement runs in one)."""
    if on_postgres(core):
        store = core.store
        atomic, read = store.atomic, store.reading

        def opened(what, open_):
            def wrapper():
                statements.append(what)
                return open_()

            return wrapper

        store.atomic, store.reading = opened("atomic", atomic), opened("reading", read)
        try:
            yield
        finally:
            del store.atomic, store.reading
        return
    conn = core.store.connection
    conn.set_trace_callback(statements.append)
    try:
        yield
    finally:
        conn.set_trace_callback(None)


def test_an_empty_schedule_is_off_and_a_bad_one_is_off_loudly(
    where, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chronicle_engine")
    core = open_core(
        where, _on(integrity="every five minutes past noon", wal_checkpoint="0 0 * * * *")
    )
    sched = scheduler(core, FakeClock())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "maintenance.schedules.integrity" in w]) == 1
    assert len([w for w in warnings if "maintenance.schedules.wal_checkpoint" in w]) == 1
    for _ in range(10):
        sched.tick("sync_turn")
    assert _jobs(core, "integrity") == [] and _jobs(core, "wal_checkpoint") == []
    states = {s["task"]: s for s in sched.maintenance_status()["schedules"]}
    assert states["integrity"]["state"] == "invalid"
    assert "croniter" in states["integrity"]["reason"]
    assert states["wal_checkpoint"]["state"] == "invalid"
    assert "6" in states["wal_checkpoint"]["reason"]
    assert states["reap"]["state"] == "disabled" and states["reap"]["cron"] == ""
    core.shutdown()


def test_maintenance_disabled_means_no_work_at_all(where) -> None:
    core = open_core(where, _on(integrity="* * * * *"), {"maintenance": {"enabled": False}})
    sched = scheduler(core, FakeClock())
    for _ in range(50):
        sched.tick("sync_turn")
    assert _jobs(core, "integrity") == []
    status = sched.maintenance_status()
    assert status["enabled"] is False
    integrity = next(s for s in status["schedules"] if s["task"] == "integrity")
    assert integrity["state"] == "off" and integrity["reason"] == "maintenance.enabled is false"
    core.shutdown()


def test_only_draining_hooks_run_jobs(where) -> None:
    core = open_core(where, _on(integrity="* * * * *"))
    sched = scheduler(core, FakeClock())
    assert sched.tick("on_turn_start") == 0
    assert sched.tick("prefetch") == 0
    # Hermes calls these on the agent's own thread (during compaction too): they never run a job.
    for hook in ("on_session_end", "on_session_switch", "on_delegation", "on_pre_compress"):
        assert sched.tick(hook) == 0, hook
    assert [j["state"] for j in _jobs(core, "integrity")] == ["pending"]
    assert sched.tick("sync_turn") == 1
    assert [j["state"] for j in _jobs(core, "integrity")] == ["done"]
    core.shutdown()


def test_a_hook_never_raises_and_maintenance_backs_off(
    where, caplog: pytest.LogCaptureFixture
) -> None:
    core = open_core(where, _on(integrity="* * * * *"))
    clock = FakeClock()
    sched = scheduler(core, clock)
    with writing(core) as conn:
        conn.execute("DROP TABLE scheduler_watermarks")
    caplog.set_level(logging.WARNING, logger="chronicle_engine.scheduler")
    for _ in range(20):
        sched.tick("sync_turn")  # must not raise
    paused = [r for r in caplog.records if "paused" in r.getMessage()]
    assert len(paused) == 1
    assert "scheduler_watermarks" in paused[0].getMessage()
    core.shutdown()


def test_status_reports_runs_due_times_queue_and_what_is_not_scheduled(where) -> None:
    core = open_core(where, _on(integrity="*/10 * * * *", consolidate="* * * * *"))
    clock = FakeClock(START + 60 * 3)
    sched = scheduler(core, clock)
    status = sched.maintenance_status()
    integrity = next(s for s in status["schedules"] if s["task"] == "integrity")
    assert integrity["last_due"] is None and integrity["next_due"] == "now"
    for _ in range(4):
        sched.tick("sync_turn")
    status = sched.maintenance_status()
    integrity = next(s for s in status["schedules"] if s["task"] == "integrity")
    assert integrity["last_due"] == "2025-01-06T00:00:00+00:00"
    assert integrity["next_due"] == "2025-01-06T00:10:00+00:00"
    assert integrity["last_outcome"].startswith("done: processed 0")
    assert status["queue"]["done"] == 2 and status["queue"]["pending"] == 0
    assert [n["task"] for n in status["not_scheduled"]] == [t for t, _ in NOT_SCHEDULED]
    assert all(n["why"] for n in status["not_scheduled"])
    assert status["consolidation"]["behind"] == 0
    core.shutdown()


def test_by_default_consolidation_uses_the_context_engines_section_writer(where) -> None:
    core = open_core(where, _on(consolidate="* * * * *"))
    # Nothing injected but the clocks: the shipped wiring. Its time budgets run on the test's
    # clock, so how busy the machine is cannot decide whether one tick gets the unit done.
    clock = FakeClock()
    sched = core.new_scheduler(clock=clock, timer=clock)
    messages = [
        {"role": "user", "content": "Rename the build target to chronicle-ci in Makefile"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "shell",
                        "arguments": '{"cmd": "sed -i s/ci/chronicle-ci/ Makefile"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {"role": "assistant", "content": "Done: the target is now chronicle-ci."},
    ]
    core.capture.capture_messages("s1", messages)
    core.capture.record_session_end("s1", len(messages), len(messages))
    sched.tick("sync_turn")
    (section,) = core.chronicle(core.sessions.chronicle_name("s1")).current()
    assert (section.anchor.from_seq, section.anchor.to_seq) == (1, 4)
    assert "Rename the build target to chronicle-ci in Makefile" in section.prose
    assert section.meta["writer"] == "extractive" and section.meta["source"] == "consolidation"
    status = {s["task"]: s for s in sched.maintenance_status()["schedules"]}
    assert status["consolidate"]["state"] == "active"
    core.shutdown()


def test_the_core_builds_one_scheduler_per_database(tmp_path: Path) -> None:
    core = ChronicleCore.get(tmp_path / "one.db")
    assert core.scheduler is core.scheduler
    core.scheduler.tick("on_turn_start")
    core.shutdown()


def test_run_due_runs_every_due_schedule_at_once_for_a_command_line(where) -> None:
    core = open_core(where, _on(integrity="* * * * *", queue_retention="* * * * *"))
    sched = scheduler(core, FakeClock())
    ran = sched.run_due()
    assert sorted(j["kind"] for j in ran) == ["integrity", "queue_retention"]
    assert all(j["state"] == "done" for j in ran)
    assert sched.run_due() == []  # the same due times are not run twice
    core.shutdown()


def test_direct_use_refuses_what_cannot_work(where) -> None:
    from chronicle_engine.errors import UsageError

    core = open_core(where)
    sched = scheduler(core, FakeClock())
    with pytest.raises(UsageError, match="tasks are"):
        sched.enqueue("defragment")
    with pytest.raises(UsageError, match="own job kind"):
        sched.handle("consolidate", lambda ctx: None)  # type: ignore[arg-type,return-value]
    job_id = sched.enqueue("integrity")
    assert sched.run_pending() == 1
    done = sched.queue.get(job_id)
    assert done is not None and done.state == "done"
    core.shutdown()
