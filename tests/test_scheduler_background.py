"""The scheduler's background thread: a hook that finds something due hands it over and returns.

The slots' scheduler (`core.scheduler`) runs its steps there by default (`maintenance.background`);
tests elsewhere build theirs with `core.new_scheduler`, whose steps run on the hook's thread
(`test_scheduler_fleet.py` runs two hosts' schedulers both ways).
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from test_scheduler_support import (
    QUIET,
    START,
    FakeClock,
    chronicle_of,
    merged,
    message,
    open_core,
    places,
    scheduler,
    session_end,
    summarise,
)

from chronicle_engine.chronicle.sections import Consolidation
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.store import StoredEvent
from chronicle_engine.scheduler import scheduler as scheduler_module
from chronicle_engine.scheduler import worker as worker_module
from chronicle_engine.scheduler.maintenance import TaskContext
from chronicle_engine.scheduler.queue import JobCut, JobSpec
from chronicle_engine.scheduler.sweeps import SweepReport
from chronicle_engine.scheduler.worker import Worker


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


def hooks_until(sched, started: threading.Event, seconds: float = 10.0) -> bool:
    """Tick the hook until `started` is set (bounded by `seconds`); whether it was. A first
    step may spend its budget on work a fresh store has queued before it claims the test's job,
    and only another hook runs the next step."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sched.tick("sync_turn")
        if started.wait(0.05):
            return True
    return started.is_set()


class Slow:
    """A job handler that waits until the test releases it, noting the thread it ran on."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.threads: list[threading.Thread] = []

    def __call__(self, ctx: object) -> SweepReport:
        self.threads.append(threading.current_thread())
        self.started.set()
        self.release.wait(10)
        return SweepReport("slow", processed=1)


def test_a_slow_job_does_not_hold_the_hook_that_found_it(where) -> None:
    core = open_core(where)
    sched = core.scheduler  # the one the slots tick, with the shipped default
    assert sched.background
    slow = Slow()
    sched.handle("slow", slow)
    job = sched.queue.enqueue(JobSpec("slow", "maintenance"))
    began = time.perf_counter()
    ran = sched.tick("sync_turn")
    returned = time.perf_counter() - began
    assert hooks_until(sched, slow.started), "the job never ran"
    # The job is still waiting for its release: a tick that ran it would not have returned yet.
    assert ran == 0 and returned < 2.0
    assert sched.queue.get(job).state == "running"  # type: ignore[union-attr]
    (ran_on,) = slow.threads
    assert ran_on is not threading.current_thread() and ran_on.daemon
    slow.release.set()
    assert sched.wait_background(10)
    assert sched.queue.get(job).state == "done"  # type: ignore[union-attr]
    assert sched.jobs_run == 1
    core.shutdown()


def test_the_setting_keeps_the_jobs_on_the_hooks_thread(tmp_path: Path) -> None:
    core = open_core(tmp_path / "c.db", {"maintenance": {"background": False}})
    sched = core.scheduler
    assert not sched.background
    threads: list[threading.Thread] = []

    def here(ctx: object) -> SweepReport:
        threads.append(threading.current_thread())
        return SweepReport("here", processed=1)

    sched.handle("here", here)
    job = sched.queue.enqueue(JobSpec("here", "maintenance"))
    assert sched.tick("sync_turn") == 1
    assert threads == [threading.current_thread()]
    assert sched.queue.get(job).state == "done"  # type: ignore[union-attr]
    core.shutdown()


def test_drain_runs_a_step_on_the_calling_thread_in_the_background_too(tmp_path: Path) -> None:
    core = open_core(tmp_path / "c.db")
    sched = core.scheduler
    assert sched.background
    threads: list[threading.Thread] = []

    def here(ctx: object) -> SweepReport:
        threads.append(threading.current_thread())
        return SweepReport("here", processed=1)

    sched.handle("here", here)
    sched.queue.enqueue(JobSpec("here", "maintenance"))
    assert sched.drain("on_turn_start") == 0  # not a draining hook: it only schedules
    assert sched.drain("sync_turn") == 1
    assert threads == [threading.current_thread()]
    core.shutdown()


def test_a_failing_job_never_reaches_the_hook_and_the_thread_goes_on(
    where, caplog: pytest.LogCaptureFixture
) -> None:
    # A budget that one failure's bookkeeping cannot spend on a busy machine: the five ticks
    # may all come before the thread's first step, which must then run both jobs.
    core = open_core(
        where, {"queue": {"max_attempts": 1}, "maintenance": {"drain_budget_ms": 60_000}}
    )
    sched = core.scheduler
    ran: list[str] = []

    def broken(ctx: object) -> SweepReport:
        ran.append("broken")
        raise RuntimeError("the disk is on fire")

    def fine(ctx: object) -> SweepReport:
        ran.append("fine")
        return SweepReport("fine", processed=1)

    sched.handle("broken", broken)
    sched.handle("fine", fine)
    bad = sched.queue.enqueue(JobSpec("broken", "maintenance", key="b"))
    good = sched.queue.enqueue(JobSpec("fine", "maintenance", key="f"))
    caplog.set_level(logging.WARNING, logger="chronicle_engine.scheduler")
    for _ in range(5):
        assert sched.tick("sync_turn") == 0  # never raises
    assert sched.wait_background(10)
    assert ran == ["broken", "fine"]
    assert sched.queue.get(bad).state == "failed"  # type: ignore[union-attr]
    assert sched.queue.get(good).state == "done"  # type: ignore[union-attr]
    failed = [r for r in caplog.records if "failed for good" in r.getMessage()]
    assert len(failed) == 1 and "the disk is on fire" in failed[0].getMessage()
    core.shutdown()


def test_a_step_that_fails_backs_off_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = open_core(tmp_path / "c.db", {"maintenance": {"schedules": {"integrity": "* * * * *"}}})
    clock = FakeClock()
    sched = scheduler(core, clock, background=True)

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(sched.queue, "fire", refused)
    caplog.set_level(logging.WARNING, logger="chronicle_engine.scheduler")
    for _ in range(10):
        assert sched.tick("sync_turn") == 0
        assert sched.wait_background(10)
        clock.advance(1)
    paused = [r for r in caplog.records if "paused" in r.getMessage()]
    assert len(paused) == 1 and "no space left on device" in paused[0].getMessage()
    core.shutdown()


def test_shutdown_returns_in_its_bound_and_the_thread_closes_the_store_after_its_job(
    where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that outlasts shutdown's wait finishes on an open store (on PostgreSQL a closed
    connection under it would break it; on SQLite its own connection), and its thread closes
    the store after it. A core opened on the same database meanwhile is a new one, and does
    not run the job a second time."""
    config = {"queue": {"lease_seconds": 1}}
    core = ChronicleCore.get(where, config=Config(merged(QUIET, config)))
    sched = core.scheduler
    slow = Slow()
    wrote: list[int] = []

    def slow_then_write(ctx: TaskContext) -> SweepReport:
        slow(ctx)  # waits for the test, paying no heed to the stop
        wrote.append(ctx.sweeps.save(SweepReport("slow", processed=1, cursor=7)).cursor)
        return SweepReport("slow", processed=1)

    sched.handle("slow", slow_then_write)
    job = sched.queue.enqueue(JobSpec("slow", "maintenance"))
    assert hooks_until(sched, slow.started)
    monkeypatch.setattr(scheduler_module, "STOP_SECONDS", 0.2)
    began = time.monotonic()
    core.shutdown()  # the job is still running: shutdown does not wait for it past the bound
    assert time.monotonic() - began < 5.0
    (thread,) = slow.threads
    assert thread.is_alive() and not core.store._closed  # the thread holds the store open

    again = ChronicleCore.get(where, config=Config(merged(QUIET, config)))
    assert again is not core  # the registry forgot the closing core before its wait
    beside = scheduler(again, FakeClock(time.time()))
    beside.handle("slow", lambda ctx: SweepReport("slow", processed=1))
    assert beside.drain("sync_turn") == 0  # claimed by the running job: one run
    assert beside.queue.get(job).state == "running"  # type: ignore[union-attr]

    slow.release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert wrote == [7]  # the job wrote through the store after shutdown returned
    assert core.store._closed  # and its thread closed the store once the job was done
    done = beside.queue.get(job)
    assert done is not None and done.state == "done" and done.attempts == 1
    assert beside.sweeps.load("slow").cursor == 7
    again.shutdown()


@pytest.mark.parametrize("way", ["drain", "inline hook"])
def test_shutdown_closes_the_store_after_a_step_on_a_callers_own_thread(
    where, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """A step on the caller's thread (a hook with maintenance.background off, `drain`) is
    waited for until the stop's deadline like the background thread's, and past it the store
    closes after the step, not under it."""
    core = open_core(where, {"maintenance": {"background": False}})
    sched = core.scheduler
    assert not sched.background
    slow = Slow()
    wrote: list[int] = []

    def slow_then_write(ctx: TaskContext) -> SweepReport:
        slow(ctx)
        wrote.append(ctx.sweeps.save(SweepReport("slow", processed=1, cursor=3)).cursor)
        return SweepReport("slow", processed=1)

    sched.handle("slow", slow_then_write)
    job = sched.queue.enqueue(JobSpec("slow", "maintenance"))

    def step() -> None:
        if way == "drain":
            sched.drain("sync_turn")
        else:
            while not slow.started.is_set():  # (bounded by the test's own waits below)
                sched.tick("sync_turn")
                time.sleep(0.01)

    caller = threading.Thread(target=step, daemon=True)
    caller.start()
    assert slow.started.wait(10)
    monkeypatch.setattr(scheduler_module, "STOP_SECONDS", 0.2)
    began = time.monotonic()
    core.shutdown()
    assert time.monotonic() - began < 5.0
    assert not core.store._closed  # the step still runs on its caller's thread
    slow.release.set()
    caller.join(10)
    assert not caller.is_alive()
    assert wrote == [3]  # it wrote through the store after shutdown returned
    assert core.store._closed  # and the store closed once the step had ended
    again = open_core(where)
    done = again.new_scheduler().queue.get(job)
    assert done is not None and done.state == "done"
    again.shutdown()


def test_a_job_cut_without_a_stop_is_a_failed_attempt_not_a_loop(tmp_path: Path) -> None:
    """JobCut is for a process that stops: raised with no stop asked, the claim is not given
    back for nothing, and the job ends failed after its attempts."""
    core = open_core(tmp_path / "c.db", {"queue": {"max_attempts": 2}})
    clock = FakeClock(time.time())
    sched = scheduler(core, clock)
    runs: list[int] = []

    def cuts(ctx: TaskContext) -> SweepReport:
        runs.append(1)
        raise JobCut("no stop was asked")

    sched.handle("cuts", cuts)
    job = sched.queue.enqueue(JobSpec("cuts", "maintenance"))
    for _ in range(10):
        sched.run_pending()
        clock.advance(3600)  # (past any backoff)
    assert len(runs) == 2
    failed = sched.queue.get(job)
    assert failed is not None and failed.state == "failed" and failed.attempts == 2
    core.shutdown()


def test_a_job_that_meets_the_stop_gives_its_claim_back_and_runs_at_once_elsewhere(
    where,
) -> None:
    """Cut cleanly (it looked at `ctx.stopping` between two pieces of work), a job does not
    keep its key claimed for the lease (600 s here): the next core runs it at once."""
    core = open_core(where)
    sched = core.scheduler
    started = threading.Event()

    def polite(ctx: TaskContext) -> SweepReport:
        started.set()
        deadline = time.monotonic() + 10
        while not ctx.stopping() and time.monotonic() < deadline:
            time.sleep(0.005)  # a piece of work
        raise JobCut("stopped between two pieces of work")

    sched.handle("polite", polite)
    job = sched.queue.enqueue(JobSpec("polite", "maintenance"))
    assert hooks_until(sched, started)
    began = time.monotonic()
    core.shutdown()
    assert time.monotonic() - began < 4.0  # the job ended at the stop, not at the bound (5 s)
    again = open_core(where)
    cut = again.new_scheduler().queue.get(job)
    assert cut is not None and cut.state == "pending" and cut.attempts == 1  # (it counts)
    assert cut.lease_owner is None and (cut.reason or "").startswith("released")
    rerun = scheduler(again, FakeClock(time.time()))  # now: no lease has lapsed
    rerun.handle("polite", lambda ctx: SweepReport("polite", processed=1))
    assert rerun.drain("sync_turn") == 1
    done = rerun.queue.get(job)
    assert done is not None and done.state == "done" and done.attempts == 2
    again.shutdown()


def test_consolidation_draws_no_summary_after_the_stop_and_gives_its_claim_back(
    where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model call in flight is not interrupted, but no other is made once the process stops:
    the batch writes nothing and the next core consolidates it all."""
    core = open_core(where, {"maintenance": {"schedules": {"consolidate": "* * * * *"}}})
    core.store.append(
        [
            message(core, "a", "user", "plan the trip", START),
            session_end(core, "a", START + 10),
            message(core, "b", "user", "fix the bike", START + 20),
            session_end(core, "b", START + 30),
        ]
    )
    drawing, release = threading.Event(), threading.Event()
    draws: list[int] = []

    def waits(events: Sequence[StoredEvent]) -> Consolidation:
        draws.append(len(events))
        drawing.set()
        release.wait(10)
        return summarise(events)

    sched = scheduler(core, FakeClock(time.time()), summarize=waits, background=True)
    sched.tick("sync_turn")  # schedules consolidation and runs it
    assert drawing.wait(10)
    (job,) = sched.queue.jobs(state="running")
    monkeypatch.setattr(scheduler_module, "STOP_SECONDS", 0.2)
    core.shutdown()
    release.set()  # the first draw returns; the second is never made
    assert sched._worker is not None and sched._worker.thread is not None
    sched._worker.thread.join(10)
    assert draws == [1]
    again = open_core(where, {"maintenance": {"schedules": {"consolidate": "* * * * *"}}})
    cut = again.new_scheduler().queue.get(job.id)
    assert cut is not None and cut.state == "pending" and cut.attempts == 1
    assert again.chronicle(chronicle_of(again, "a")).current() == []  # nothing half written
    rerun = scheduler(again, FakeClock(time.time()))
    assert rerun.drain("sync_turn") == 1
    assert [s.prose for s in again.chronicle(chronicle_of(again, "b")).current()] == [
        "fix the bike"
    ]
    again.shutdown()


def test_after_a_stop_no_way_in_runs_a_job(tmp_path: Path) -> None:
    core = open_core(tmp_path / "c.db")
    sched = scheduler(core, FakeClock(time.time()))
    ran: list[str] = []
    sched.handle("any", lambda ctx: (ran.append("ran"), SweepReport("any", processed=1))[1])
    sched.queue.enqueue(JobSpec("any", "maintenance"))
    assert sched.stop(1)
    assert sched.tick("sync_turn") == 0
    assert sched.drain("sync_turn") == 0
    assert sched.run_due() == []
    assert sched.run_pending() == 0
    assert asyncio.run(sched.tick_async("sync_turn")) == 0
    assert ran == []
    core.shutdown()


def test_every_ask_to_stop_shares_the_first_asks_deadline() -> None:
    """The exit handler's wait after a shutdown's is not a second wait: a later ask may bring
    the deadline forward, never put it back."""
    gate = threading.Event()
    worker = Worker(lambda drain: gate.wait(10))
    worker.nudge(True)
    deadline = time.monotonic() + 10
    while worker.idle and time.monotonic() < deadline:
        time.sleep(0.001)
    worker.ask_to_stop(0.3)
    began = time.monotonic()
    assert not worker.stop(30)  # asked for 30 s, waits what is left of the first 0.3 s
    assert time.monotonic() - began < 2.0
    assert not worker.wait_stopped()  # the deadline has passed: no wait at all
    thread = worker.thread
    gate.set()
    assert thread is not None
    thread.join(10)
    assert worker.wait_stopped()


def test_a_process_that_exits_without_shutdown_is_not_held_and_its_job_runs_again(
    tmp_path: Path,
) -> None:
    """Hermes may exit without shutting the provider down, mid-job: the thread is a daemon, so
    the exit is not held by a job that never ends (it waits EXIT_WAIT_SECONDS for it), and the
    job it cut short runs again in the next process once its lease lapses."""
    path = tmp_path / "c.db"
    began = time.monotonic()
    (job,) = _in_a_process(
        path,
        """
started = threading.Event()
def forever(ctx):
    started.set()
    threading.Event().wait()
sched.handle("forever", forever)
job = sched.queue.enqueue(JobSpec("forever", "maintenance"))
sched.tick("sync_turn")
assert started.wait(30)
print(job, flush=True)
""",  # and the interpreter ends here, the job still running, with no shutdown
    )
    assert time.monotonic() - began < 60
    _runs_again(path, "forever", int(job))


def test_at_exit_the_drain_claims_no_other_job(tmp_path: Path) -> None:
    """The exit handler stops the scheduler through its own signal: the job running finishes,
    and the drain it was part of claims no other (its time budget would allow it)."""
    path = tmp_path / "c.db"
    first, second = _in_a_process(
        path,
        """
started = threading.Event()
def first(ctx):
    started.set()
    time.sleep(0.5)  # ends well inside the exit's wait
    return SweepReport("first", processed=1)
sched.handle("first", first)
sched.handle("second", lambda ctx: SweepReport("second", processed=1))
print(sched.queue.enqueue(JobSpec("first", "maintenance", key="1")), flush=True)
print(sched.queue.enqueue(JobSpec("second", "maintenance", key="2")), flush=True)
sched.tick("sync_turn")
assert started.wait(30)
""",
        {"maintenance": {"drain_budget_ms": 60_000}},
    )
    core = open_core(path)
    queue = core.new_scheduler().queue
    assert queue.get(int(first)).state == "done"  # type: ignore[union-attr]
    assert queue.get(int(second)).state == "pending"  # type: ignore[union-attr]
    core.shutdown()


def test_a_shutdown_then_the_exit_wait_once_in_all(tmp_path: Path) -> None:
    """Hermes shuts the provider down at exit, then the interpreter's exit handler runs: the
    two waits for a job that will not end share one deadline (STOP_SECONDS from the shutdown),
    not one after the other."""
    (job, waited) = _in_a_process(
        tmp_path / "c.db",
        """
from chronicle_engine.scheduler import scheduler as scheduler_module, worker as worker_module
scheduler_module.STOP_SECONDS = 1.5
worker_module.EXIT_WAIT_SECONDS = 1.5
started = threading.Event()
def forever(ctx):
    started.set()
    threading.Event().wait()
sched.handle("forever", forever)
print(sched.queue.enqueue(JobSpec("forever", "maintenance")), flush=True)
sched.tick("sync_turn")
assert started.wait(30)
began.append(time.monotonic())
core.shutdown()
""",
    )
    assert 1.4 <= float(waited) < 2.6  # 1.5 s in all (3 s would be each wait in turn)


def test_a_job_that_meets_the_exit_gives_its_claim_back(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    (job,) = _in_a_process(
        path,
        """
started = threading.Event()
def polite(ctx):
    started.set()
    deadline = time.monotonic() + 30
    while not ctx.stopping() and time.monotonic() < deadline:
        time.sleep(0.005)
    raise JobCut("stopped between two pieces of work")
sched.handle("polite", polite)
print(sched.queue.enqueue(JobSpec("polite", "maintenance")), flush=True)
sched.tick("sync_turn")
assert started.wait(30)
""",
    )
    again = open_core(path)  # the default lease, 600 s: none has lapsed
    rerun = scheduler(again, FakeClock(time.time()))
    rerun.handle("polite", lambda ctx: SweepReport("polite", processed=1))
    assert rerun.drain("sync_turn") == 1
    done = rerun.queue.get(int(job))
    assert done is not None and done.state == "done" and done.attempts == 2
    again.shutdown()


def _in_a_process(path: Path, body: str, config: dict[str, object] | None = None) -> list[str]:
    """Run `body` in a new interpreter with `core` and its `sched` open on `path` (a lease of
    1 s, and `config`), and let it exit with no shutdown unless `body` calls one. Returns the
    lines it printed, then, if `body` filled `began`, the seconds from then to after the exit
    handler."""
    config = merged({"queue": {"lease_seconds": 1}}, config or {})
    script = f"""
import atexit, sys, threading, time
sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parents[1])]!r}
began = []
# Registered before chronicle's own exit handler, so it runs after it.
atexit.register(lambda: began and print(f"{{time.monotonic() - began[0]:.3f}}", flush=True))
from test_scheduler_support import open_core
from chronicle_engine.scheduler.queue import JobCut, JobSpec
from chronicle_engine.scheduler.sweeps import SweepReport
core = open_core({str(path)!r}, {config!r})
sched = core.scheduler
{body}
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _runs_again(path: Path, kind: str, job: int) -> None:
    """The job left running at `path` is re-armed once its lease lapses, and runs to its end."""
    again = open_core(path, {"queue": {"lease_seconds": 1}})
    rerun = scheduler(again, FakeClock(time.time() + 5))  # its lease has lapsed
    rerun.handle(kind, lambda ctx: SweepReport(kind, processed=1))
    assert rerun.drain("sync_turn") == 1
    done = rerun.queue.get(job)
    assert done is not None and done.state == "done" and done.attempts == 2
    again.shutdown()


def test_nudges_that_arrive_during_a_step_make_one_more_step() -> None:
    steps: list[bool] = []
    gate = threading.Event()

    def step(drain: bool) -> None:
        steps.append(drain)
        gate.wait(10)

    worker = Worker(step)
    assert worker.nudge(False)
    deadline = time.monotonic() + 10
    while not steps and time.monotonic() < deadline:
        time.sleep(0.001)
    for _ in range(50):
        assert worker.nudge(True)
    gate.set()
    assert worker.wait_idle(10)
    assert steps == [False, True]
    assert worker.stop(10)
    assert worker.nudge(True)  # stopped: nothing to do, and nothing for the caller to do
    assert steps == [False, True]


def test_a_step_that_raises_is_logged_once_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def step(drain: bool) -> None:
        calls.append(1)
        raise ValueError("a bug in a step")

    worker = Worker(step)
    caplog.set_level(logging.WARNING, logger="chronicle_engine.scheduler")
    for _ in range(3):
        worker.nudge(True)
        assert worker.wait_idle(10)
    assert len(calls) == 3
    warned = [r for r in caplog.records if "a bug in a step" in r.getMessage()]
    assert len(warned) == 1
    assert worker.stop(10)


def test_an_idle_thread_ends_and_the_next_nudge_starts_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "IDLE_SECONDS", 0.05)
    ran: list[threading.Thread] = []
    worker = Worker(lambda drain: ran.append(threading.current_thread()))
    worker.nudge(True)
    assert worker.wait_idle(10)
    first = ran[0]
    first.join(10)
    assert not first.is_alive() and worker.thread is None
    worker.nudge(True)
    assert worker.wait_idle(10)
    assert len(ran) == 2 and ran[1] is not first
    assert worker.stop(10)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_starts_its_own_thread_and_is_not_held_by_the_parents_lock(
    tmp_path: Path,
) -> None:
    ran: list[int] = []
    worker = Worker(lambda drain: ran.append(os.getpid()))
    worker.nudge(True)
    assert worker.wait_idle(10)
    core = open_core(tmp_path / "c.db")
    sched = scheduler(core, FakeClock(START), background=True)
    read, write = os.pipe()
    with sched._lock:  # as if the parent's thread were mid-step when the host forked
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running the parent's teardown
            ok = False
            try:
                ok = bool(
                    worker.nudge(True)
                    and worker.wait_idle(10)
                    and ran[-1] == os.getpid()
                    and sched._lock.acquire(timeout=5)
                )
            finally:
                os.write(write, b"1" if ok else b"0")
                os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
    assert status == 0
    assert ran == [os.getpid()]  # the parent's thread ran once, for the parent's nudge
    assert worker.stop(10)
    core.shutdown()


def test_a_drain_whose_budget_is_spent_before_its_first_job_still_runs_one(where) -> None:
    """The budget bounds the work after the first job: spent before it (the reclaim's round
    trips to a slow server), a drain that claimed nothing would leave every hook with nothing
    run. With no budget at all, each drain runs exactly one job."""
    core = open_core(where, {"maintenance": {"background": False, "drain_budget_ms": 0}})
    try:
        sched = core.scheduler
        ran: list[str] = []
        sched.handle("one", lambda ctx: ran.append("one") or SweepReport("one", processed=1))
        for key in "abc":
            sched.queue.enqueue(JobSpec("one", "maintenance", key=key))
        assert [sched.drain("sync_turn") for _ in range(4)] == [1, 1, 1, 0]
        assert ran == ["one"] * 3
    finally:
        core.shutdown()
