"""The scheduler's background thread: a hook notes that work may be due, this thread does it.

Invariants:
- A nudge is cheap and never blocks: a flag, an event set, and once per worker (one per
  scheduler) a thread started. It never raises; when no thread can be started it says so, and the caller does the
  work itself.
- The thread does only what nudges ask for, one step at a time (no timer: without hooks nothing
  runs, as before); nudges that arrive while a step runs coalesce into one more step. A thread
  left idle ends, so a core nobody shut down is not kept alive by it.
- One stop signal (`StopSignal`), shared with the owner: the owner's own stop, the core's
  shutdown and the exit handler all set it, so whoever asks first, the owner claims no job
  after it. The first ask fixes a deadline, which a later ask may bring forward and never puts
  back: every wait for the thread (shutdown's, then the exit's) ends by it, so a process that
  shuts down and then exits waits `STOP_SECONDS` at most in all, not one wait after the other.
- A thread still running at its deadline is not stopped (Python cannot): it finishes its job,
  and `after_thread` hands it what must wait for it (the core's close of the store). The thread
  is a daemon, so a process that exits is not held by it; a job the exit cuts off stays claimed
  until its lease lapses, as after a crash. A job that meets the stop signal between its draws
  gives its claim back at once instead (`queue.release`).
- In a child made by fork the parent's thread does not run: each worker forgets it, and the
  child starts its own on its first nudge.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["Worker", "StopSignal", "EXIT_WAIT_SECONDS"]

log = logging.getLogger("chronicle_engine.scheduler")

EXIT_WAIT_SECONDS = 2.0
"""At interpreter exit, how long every worker still running is waited for, in all."""
IDLE_SECONDS = 120.0
"""A thread nudged by nothing for this long ends (its connection is closed when the store next
opens one); the next nudge starts another. A nudge that meets the thread as it ends is lost, and
made again by the next hook: the work is still due."""

_LIVE: weakref.WeakSet[Worker] = weakref.WeakSet()
_MAX_WAIT_SECONDS = 86_400.0  # (a finite bound for any wait: Thread.join refuses inf)


class StopSignal:
    """A stop request and the deadline of every wait for it, shared by a scheduler and its
    worker (the scheduler's drain reads it between jobs, the jobs between their draws)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked = False
        self.deadline = math.inf
        """`time.monotonic()` by which every wait for the stop ends (inf: never asked)."""

    def ask(self, within: float) -> None:
        """Ask to stop; waits end `within` seconds from now (at most a day), or sooner if an
        earlier ask said so. The deadline is set before the ask is seen: a wait that sees the
        ask never reads an infinite deadline."""
        within = min(max(0.0, within), _MAX_WAIT_SECONDS)
        with self._lock:
            self.deadline = min(self.deadline, time.monotonic() + within)
            self.asked = True

    def left(self) -> float:
        """Seconds until the deadline (0 once it has passed; inf before any ask)."""
        return max(0.0, self.deadline - time.monotonic())

    def after_fork(self) -> None:
        """In a forked child: a parent's thread may have held the lock as it forked."""
        self._lock = threading.Lock()


class Worker:
    """One daemon thread that runs `step(drain)` when nudged. `drain` is True when a nudge since
    the last step asked for queued jobs to be run, not only for scheduling. `after_fork` runs in
    a forked child (the owner's locks may have been held by the parent's thread)."""

    def __init__(
        self,
        step: Callable[[bool], None],
        *,
        name: str = "chronicle-jobs",
        after_fork: Callable[[], None] | None = None,
        stop: StopSignal | None = None,
    ) -> None:
        """`stop`: the owner's signal, when it has one (else the worker's own)."""
        self._step = step
        self._name = name
        self._after_fork = after_fork
        self.stop_signal = stop if stop is not None else StopSignal()
        self._failed: set[str] = set()
        self._forget_thread()
        _LIVE.add(self)

    def _forget_thread(self) -> None:
        self._wake = threading.Event()
        self._drain = False
        self._asking = threading.Lock()  # a nudge's drain and the thread's taking of it
        self._running = False
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        self._then: list[Callable[[], None]] = []

    @property
    def stopping(self) -> bool:
        return self.stop_signal.asked

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def nudge(self, drain: bool) -> bool:
        """Ask for a step. Returns False when no thread runs or can be started (the caller
        should do the step itself); True otherwise, stopped included (nothing is to be done)."""
        if drain:
            with self._asking:  # not lost to the thread's taking of a step that did not drain
                self._drain = True
        self._wake.set()
        # Under the start lock: a thread idling out clears `_thread` under it after its last
        # look at `_wake`, so this nudge either is seen by it or starts another.
        if not self._start():
            return self.stopping
        return True

    def _start(self) -> bool:
        with self._starting:
            if self.stopping:
                return False
            if self._thread is not None and self._thread.is_alive():
                return True
            thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # no more threads, or the interpreter is exiting
                self._note("could not start its thread", exc)
                return False
            self._thread = thread
            return True

    def _run(self) -> None:
        then: list[Callable[[], None]] | None = None
        try:
            then = self._steps()
        finally:
            if then is None:  # stopped (or a fault): forget this thread now
                with self._starting:
                    then = self._ended()
            for call in then:  # after the last step: nothing on this thread uses the store now
                try:
                    call()
                except Exception as exc:
                    self._note("could not finish after its last job", exc)

    def _ended(self) -> list[Callable[[], None]]:
        """(Under the start lock.) This thread is done: forget it, and take what waits for it."""
        if self._thread is not threading.current_thread():
            return []
        self._thread = None
        then, self._then = self._then, []
        return then

    def _steps(self) -> list[Callable[[], None]] | None:
        """Run steps as nudged. Returns what waits for the thread's end if it ended idle (under
        the lock that a nudge takes to decide to start another), None if it was stopped."""
        while True:
            if not self._wake.wait(IDLE_SECONDS):
                with self._starting:
                    if not self._wake.is_set():
                        return self._ended()  # idle: the next nudge starts another
            if self.stopping:
                return None
            self._running = True  # before the clear: `idle` is never true between the two
            self._wake.clear()
            if self.stopping:  # (asked between the look above and the clear: its wake is gone)
                self._running = False
                return None
            with self._asking:
                drain, self._drain = self._drain, False
            try:
                self._step(drain)
            except Exception as exc:  # the step logs its own failures; this is a fault in it
                self._note("step failed", exc)
            finally:
                self._running = False

    @property
    def idle(self) -> bool:
        """No step running and none asked for."""
        return not self._running and not self._wake.is_set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until `idle` (tests, benchmarks); False if `timeout` seconds passed first."""
        deadline = time.monotonic() + timeout
        while not self.idle:
            if self.stopping and (self._thread is None or not self._thread.is_alive()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def _note(self, what: str, exc: Exception) -> None:
        key = f"{what}: {type(exc).__name__}"
        if key in self._failed:
            log.debug("chronicle background jobs: %s again: %s", what, exc)
            return
        self._failed.add(key)
        log.warning("chronicle background jobs: %s (%s: %s)", what, type(exc).__name__, exc)

    def ask_to_stop(self, within: float) -> None:
        """Ask the thread to end after its current job, without waiting; waits for it to end
        `within` seconds from now at the latest (see `StopSignal`). Later nudges start nothing."""
        with self._starting:
            self.stop_signal.ask(within)
        self._wake.set()

    def stop(self, timeout: float) -> bool:
        """Ask the thread to end after its current job; wait at most `timeout` seconds (less if
        an earlier ask's deadline comes sooner). Returns whether it has ended (or never ran)."""
        self.ask_to_stop(timeout)
        return self.wait_stopped()

    def wait_stopped(self) -> bool:
        """Wait for the thread to end until the stop signal's deadline. Returns whether it has
        ended (or never ran); on the thread itself, False at once (it ends after its step)."""
        thread = self._thread
        if thread is None:
            return True
        if thread is threading.current_thread():
            return False
        if self.stopping:  # (never asked, the deadline is infinite: nothing to wait for)
            thread.join(min(self.stop_signal.left(), _MAX_WAIT_SECONDS))
        return not thread.is_alive()

    def after_thread(self, call: Callable[[], None]) -> bool:
        """Have the thread run `call` as it ends, after its last step (the caller may be that
        step). False when no thread runs: the caller runs `call` itself."""
        with self._starting:
            if self._thread is None:
                return False
            self._then.append(call)
            return True

    def _in_child(self) -> None:
        self._forget_thread()
        self.stop_signal.after_fork()
        if self._after_fork is not None:
            self._after_fork()


def _stop_all_at_exit() -> None:
    """Stop every worker through its owner's signal (its drain claims nothing more), and wait
    until each one's deadline: EXIT_WAIT_SECONDS from now, or sooner for one a shutdown had
    already asked (that wait has been had: it is not made again)."""
    workers = list(_LIVE)
    for worker in workers:
        worker.ask_to_stop(EXIT_WAIT_SECONDS)
    for worker in workers:
        worker.wait_stopped()


def _after_fork_in_child() -> None:
    for worker in list(_LIVE):
        worker._in_child()


atexit.register(_stop_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
