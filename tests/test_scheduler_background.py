"""The scheduler's background thread: a hook that finds something due hands it over and returns.

The slots' scheduler (`core.scheduler`) runs its steps there by default (`maintenance.background`);
tests elsewhere build theirs with `core.new_scheduler`, whose steps run on the hook's thread
(`test_scheduler_fleet.py` runs two hosts' schedulers both ways).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_scheduler_support import (
    START,
    FakeClock,
    open_core,
    places,
    scheduler,
)

from chronicle_engine.scheduler import scheduler as scheduler_module
from chronicle_engine.scheduler import worker as worker_module
from chronicle_engine.scheduler.queue import JobSpec
from chronicle_engine.scheduler.sweeps import SweepReport
from chronicle_engine.scheduler.worker import Worker


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


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
    assert slow.started.wait(10), "the job never ran"
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
    core = open_core(where, {"queue": {"max_attempts": 1}})
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


def test_shutdown_waits_a_bounded_time_and_a_job_it_cut_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.db"
    core = open_core(path, {"queue": {"lease_seconds": 1}})
    sched = core.scheduler
    slow = Slow()
    sched.handle("slow", slow)
    job = sched.queue.enqueue(JobSpec("slow", "maintenance"))
    sched.tick("sync_turn")
    assert slow.started.wait(10)
    monkeypatch.setattr(scheduler_module, "STOP_SECONDS", 0.2)
    began = time.monotonic()
    core.shutdown()  # the job is still running: shutdown does not wait for it past the bound
    assert time.monotonic() - began < 5.0
    slow.release.set()  # it ends against a closed store: nothing is recorded, nothing raised
    (thread,) = slow.threads
    thread.join(10)
    assert not thread.is_alive()

    _runs_again(path, "slow", job)


def test_a_process_that_exits_without_shutdown_is_not_held_and_its_job_runs_again(
    tmp_path: Path,
) -> None:
    """Hermes may exit without shutting the provider down, mid-job: the thread is a daemon, so
    the exit is not held by a job that never ends (it waits EXIT_WAIT_SECONDS for it), and the
    job it cut short runs again in the next process once its lease lapses."""
    path = tmp_path / "c.db"
    script = f"""
import sys, threading
sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parents[1])]!r}
from test_scheduler_support import open_core
from chronicle_engine.scheduler.queue import JobSpec
core = open_core({str(path)!r}, {{"queue": {{"lease_seconds": 1}}}})
sched = core.scheduler
started = threading.Event()
def forever(ctx):
    started.set()
    threading.Event().wait()
sched.handle("forever", forever)
job = sched.queue.enqueue(JobSpec("forever", "maintenance"))
sched.tick("sync_turn")
assert started.wait(30)
print(job, flush=True)
"""  # and the interpreter ends here, the job still running, with no shutdown
    began = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - began < 60
    _runs_again(path, "forever", int(out.stdout))


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
