"""The scheduler's background thread: a hook notes that work may be due, this thread does it.

Invariants:
- A nudge is cheap and never blocks: a flag, an event set, and once per process a thread
  started. It never raises; when no thread can be started it says so, and the caller does the
  work itself.
- The thread does only what nudges ask for, one step at a time (no timer: without hooks nothing
  runs, as before); nudges that arrive while a step runs coalesce into one more step. A thread
  left idle ends, so a core nobody shut down is not kept alive by it.
- stop() asks the thread to end after its current job and waits a bounded time. The thread is a
  daemon, so a process that exits without stop() is not held by it; at exit each live thread is
  still asked to stop and waited for briefly. A job cut short stays claimed until its lease
  lapses, then runs again (the queue re-arms it); what capture stored is in the log already.
- In a child made by fork the parent's thread does not run: each worker forgets it, and the
  child starts its own on its first nudge.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["Worker", "EXIT_WAIT_SECONDS"]

log = logging.getLogger("chronicle_engine.scheduler")

EXIT_WAIT_SECONDS = 2.0
"""At interpreter exit, how long every worker still running is waited for, in all."""
IDLE_SECONDS = 120.0
"""A thread nudged by nothing for this long ends (its connection is closed when the store next
opens one); the next nudge starts another. A nudge that meets the thread as it ends is lost, and
made again by the next hook: the work is still due."""

_LIVE: weakref.WeakSet[Worker] = weakref.WeakSet()


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
    ) -> None:
        self._step = step
        self._name = name
        self._after_fork = after_fork
        self.stopping = False
        self._failed: set[str] = set()
        self._forget_thread()
        _LIVE.add(self)

    def _forget_thread(self) -> None:
        self._wake = threading.Event()
        self._drain = False
        self._running = False
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def nudge(self, drain: bool) -> bool:
        """Ask for a step. Returns False when no thread runs or can be started (the caller
        should do the step itself); True otherwise, stopped included (nothing is to be done)."""
        if drain:
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
        while True:
            if not self._wake.wait(IDLE_SECONDS):
                with self._starting:
                    if not self._wake.is_set():
                        self._thread = None  # idle: the next nudge starts another
                        return
            if self.stopping:
                return
            self._running = True  # before the clear: `idle` is never true between the two
            self._wake.clear()
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

    def ask_to_stop(self) -> None:
        """Ask the thread to end after its current job, without waiting. Later nudges start
        nothing."""
        with self._starting:
            self.stopping = True
        self._wake.set()

    def stop(self, timeout: float) -> bool:
        """Ask the thread to end after its current job; wait at most `timeout` seconds. Returns
        whether it has ended (or never ran)."""
        self.ask_to_stop()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(max(0.0, timeout))
        return not thread.is_alive()

    def _in_child(self) -> None:
        self._forget_thread()
        if self._after_fork is not None:
            self._after_fork()


def _stop_all_at_exit() -> None:
    workers = list(_LIVE)
    for worker in workers:
        worker.ask_to_stop()
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    for worker in workers:
        worker.stop(deadline - time.monotonic())


def _after_fork_in_child() -> None:
    for worker in list(_LIVE):
        worker._in_child()


atexit.register(_stop_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
