"""Background work driven by hooks: every hook call is a chance to schedule and to drain.

Chronicle owns no timer or process. The adapters call `tick(hook)` on every host hook; the
scheduler compares each schedule's next due time, kept in memory, with the injected clock. What a
hook finds due is a step: schedule what is due and, on a draining hook, run a bounded batch of
queued jobs. With `maintenance.background` (the default for the scheduler the slots tick) the
step runs on the scheduler's own daemon thread (`worker.py`) and the hook returns at once; otherwise
on the hook's own thread, before it returns. `drain(hook)` runs a step on the calling thread
whichever is set (tests, benchmarks, a host that wants its jobs done before it goes on).

Invariants:
- A call with nothing due does no SQL at all: one clock read and two float comparisons. A call
  with something due does none either in the background: it nudges the thread.
- A schedule fires once per due time, across hook calls, threads and processes: its watermark is
  persisted, and it is advanced in the same transaction that enqueues the job.
- One step enqueues at most one due job, inside `maintenance.budget_ms`.
- Only the hooks in `maintenance.drain_hooks` run jobs, a bounded number per step, shared between
  job classes by weight; a draining step claims nothing new once `maintenance.drain_budget_ms` is
  spent. One step runs at a time in a process (the scheduler's lock); the queue's claims and
  leases keep each job to one runner across processes.
- Nothing escapes into the host: a failure is logged once and the scheduler backs off.
- Once asked to stop (`ask_to_stop`: the core's shutdown, or the exit handler through the
  worker, one signal) no step, drain or `run_due` claims another job, and consolidation draws
  no other summary: the job meets the signal between draws and gives its claim back
  (`JobCut`, `queue.release`), so another core or host runs it at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

from ..chronicle.sections import (
    AsyncSummarizer,
    Consolidation,
    Summarizer,
    is_async_summarizer,
)
from ..config import Config
from ..errors import StoreError, UsageError
from ..log.events import EventReader
from ..log.store import SQLiteEventStore, StoredEvent
from ..recall.events import NAMESPACE as RECALL
from .consolidation import Consolidator, Conversations, OpenUnitRow
from .cron import latest_due, next_due_after
from .events import JobFailed
from .maintenance import MAINTENANCE, TaskContext
from .queue import Job, JobCut, JobReport, JobSpec, QueueCounts, RetryNextTick, allocate
from .settings import JOB_CLASSES, TASKS, read_settings
from .stores import open_tables
from .sweeps import SweepCursors, SweepReport
from .units import UnitRules
from .worker import StopSignal, Worker

if TYPE_CHECKING:
    from ..log.postgres import PostgresEventStore
    from ..recall.recall import Recall


__all__ = ["Scheduler", "NOT_SCHEDULED", "MaintenanceStatus", "ScheduleStatus", "STOP_SECONDS"]

log = logging.getLogger("chronicle_engine.scheduler")


class ScheduleStatus(TypedDict):
    task: str
    key: str
    cron: str
    state: str
    last_due: str | None
    last_enqueued: str | None
    last_finished: str | None
    last_outcome: str | None
    next_due: str | None
    reason: NotRequired[str]


class ConsolidationStatus(TypedDict, total=False):
    """Either why consolidation is unavailable, or how far it has read."""

    unavailable: str | None
    position: int
    log_end: int
    behind: int
    open_units: list[OpenUnitRow]


class QueueStatus(QueueCounts):
    recent_failures: list[JobReport]


class SweepStatus(TypedDict):
    cursor: int
    passes: int
    last: dict[str, object]


class NotScheduled(TypedDict):
    task: str
    why: str


class MaintenanceStatus(TypedDict):
    """Per schedule: state, last run, next due; the queue; sweeps; consolidation's backlog;
    and the tasks deliberately left unscheduled, with why."""

    enabled: bool
    now: str | None
    schedules: list[ScheduleStatus]
    queue: QueueStatus
    sweeps: dict[str, SweepStatus]
    consolidation: ConsolidationStatus
    not_scheduled: list[NotScheduled]


NOT_SCHEDULED: tuple[tuple[str, str], ...] = (
    (
        "chronicle rebuild",
        "generative: it re-runs every summary and replaces prose that runs have already read; "
        "carry a chronicle (export/load) instead of rebuilding it",
    ),
    (
        "re-consolidation",
        "a deliberate decision (a better prompt) that sits outside the replay guarantee; call "
        "reconsolidate() on purpose, never on a timer",
    ),
    (
        "VACUUM",
        "rewrites the whole file while holding the write lock for as long as that takes; run it "
        "by hand with Hermes stopped",
    ),
    (
        "belief extraction",
        "part of capture, done as messages arrive; it mints new memory and is not maintenance",
    ),
)

_BACKOFF_AFTER_ERROR = 30.0
STOP_SECONDS = 5.0
"""How long shutdown waits, from the first ask to stop, for the background thread's current job
(a model summary may be running; the next draw is not made). Past it shutdown returns and the
thread closes the store once the job has returned (`ChronicleCore.shutdown`)."""
# A report with work left is chased by an immediate continuation, except for these: a checkpoint
# that could not finish is blocked by readers, and the reaper waits for consolidation to read its
# decisions, so neither gains from running again at once.
_NO_CONTINUATION = frozenset({"reap", "wal_checkpoint"})


def _iso(moment: float | None) -> str | None:
    if moment is None or not math.isfinite(moment):
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")


class StepLock:
    """The scheduler's lock over a step (one at a time in a process), which also knows who holds
    it and runs what must wait for the step to end (`then`): the core's close of the store,
    when shutdown finds a step running on a caller's thread (a hook with
    `maintenance.background` off, `drain`, `run_due`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._guard = threading.Lock()  # the holder, and the calls waiting for the release
        self._holder: int | None = None
        self._then: list[Callable[[], None]] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._holder = threading.get_ident()
        return True

    def release(self) -> None:
        with self._guard:
            self._holder = None
            self._lock.release()
            then, self._then = self._then, []
        for call in then:  # (after the step: nothing of it uses the store any more)
            try:
                call()
            except Exception:  # what waits for a step must not fail the step's caller
                log.warning("chronicle maintenance: could not finish after a step", exc_info=True)

    def __enter__(self) -> StepLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def held_here(self) -> bool:
        """Whether the calling thread is the one running a step."""
        return self._holder == threading.get_ident()

    def then(self, call: Callable[[], None]) -> bool:
        """Have the step running now run `call` once it ends. False when no step runs: the
        caller runs `call` itself."""
        with self._guard:
            if not self._lock.locked():
                return False
            self._then.append(call)
            return True


class Scheduler:
    """`core.scheduler`: schedules, the job queue, consolidation and maintenance for one database."""

    def __init__(
        self,
        reader: EventReader[SQLiteEventStore] | EventReader[PostgresEventStore],
        config: Config,
        *,
        sessions: Callable[[], Conversations],
        writer: Callable[[], Summarizer | AsyncSummarizer],
        recall: Callable[[], Recall],
        warned: set[str],
        clock: Callable[[], float] | None = None,
        timer: Callable[[], float] | None = None,
        summarize: Summarizer | AsyncSummarizer | None = None,
        background: bool | None = None,
    ) -> None:
        """`sessions`, `writer` and `recall` are asked for when first needed (consolidation, a
        sweep), so a broken one switches off only what uses it; `warned` holds the degraded states this
        database has logged already (shared with the slots). `summarize` stands in for the
        writer's summaries (tests). `clock` is the epoch time schedules are due by; `timer` measures
        a hook call's own time budgets (tests give a clock that moves only when they say, so a
        busy machine cannot change what one call gets done). `background`: whether a hook's step
        runs on the background thread (None: `maintenance.background`)."""
        self._store = reader.store
        self._reader = reader
        self._sessions = sessions
        self._writer = writer
        self._recall = recall
        self._warned_db = warned
        self.settings = read_settings(config.settings)
        self.clock: Callable[[], float] = clock or time.time
        self._timer: Callable[[], float] = timer or time.perf_counter
        # On either store: its queue, sweep cursors and consolidation tables (`tables.py`).
        self._parts = open_tables(self._store)
        self.queue = self._parts.queue(
            clock=self.clock,
            lease_seconds=self.settings.lease_seconds,
            max_attempts=self.settings.max_attempts,
        )
        self.sweeps = SweepCursors(self._parts.tables, clock=self.clock)
        self._summarize = summarize
        self._consolidator: Consolidator | None = None
        self._resolved = False
        self._resolving = threading.RLock()
        self._in_resolve = False
        self._unavailable: dict[str, str] = {}
        self._next_due: dict[str, float] = {}
        self._loaded = False
        start = -math.inf if self.settings.enabled else math.inf
        self._schedule_wake = start
        self._queue_wake = start
        self._drain_hooks = self.settings.drain_hooks
        self._lock = StepLock()
        self._warned: set[str] = set()
        self._handlers: dict[str, Callable[[TaskContext], SweepReport]] = dict(MAINTENANCE)
        self._stop = StopSignal()
        self.jobs_run = 0  # by this scheduler's steps, on any thread (not run_pending's)
        if background is None:
            background = self.settings.background
        self._worker = (
            Worker(self._background_step, after_fork=self._after_fork, stop=self._stop)
            if background
            else None
        )

    @property
    def _stopping(self) -> bool:
        return self._stop.asked

    # -- the hook path ---------------------------------------------------------------------

    @property
    def background(self) -> bool:
        """Whether a hook's step runs on the background thread."""
        return self._worker is not None

    def tick(self, hook: str = "") -> int:
        """Called by the adapters on every hook. Never raises. Returns how many jobs it ran on
        this thread (only a hook in `maintenance.drain_hooks` runs any; in the background, none:
        the hook hands its step to the background thread and returns)."""
        now = self.clock()
        drain = hook in self._drain_hooks
        if now < self._schedule_wake and (now < self._queue_wake or not drain):
            return 0
        if self._stopping:
            return 0
        worker = self._worker
        if worker is not None and worker.nudge(drain):
            return 0
        if not self._lock.acquire(blocking=False):
            return 0  # another thread is already scheduling or draining
        try:
            return self._step(now, drain)
        finally:
            self._lock.release()

    def drain(self, hook: str = "sync_turn") -> int:
        """Run `hook`'s step on the calling thread, in the background or not: schedule what is
        due and, on a draining hook, run one bounded batch of queued jobs. Waits for a step that
        another thread is running. Never raises. Returns how many jobs it ran (none once
        stopping)."""
        with self._lock:
            if self._stopping:
                return 0
            return self._step(self.clock(), hook in self._drain_hooks)

    def _step(self, now: float, drain: bool) -> int:
        """Schedule, then drain on a draining hook (the caller holds the lock). Never raises."""
        try:
            self._schedule(now)
            if drain and now >= self._queue_wake:
                return self._drain()
            return 0
        except Exception as exc:  # a hook must never fail because maintenance did
            if self._stopping:  # (a caller's own thread may meet the closed store)
                log.debug("chronicle maintenance stopped mid-step: %s", exc)
                return 0
            self._back_off(exc, now)
            return 0

    def _background_step(self, drain: bool) -> None:
        with self._lock:
            if not self._stopping:
                self._step(self.clock(), drain)

    def _after_fork(self) -> None:
        # In a forked child: the parent's thread may have held the locks; it does not run here.
        self._lock = StepLock()
        self._resolving = threading.RLock()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the background thread after its current job, waiting at most `timeout` seconds
        (None: STOP_SECONDS; less if an earlier ask's deadline is sooner). Returns whether it
        has ended. Later hooks schedule and run nothing."""
        self.ask_to_stop(timeout)
        return self.wait_stopped()

    def wait_stopped(self) -> bool:
        """Wait for the background thread until the stop's deadline; whether it has ended."""
        return self._worker is None or self._worker.wait_stopped()

    def after_step(self, call: Callable[[], None]) -> bool:
        """Have a step running on any thread run `call` when it ends, waiting for it first
        until the stop's deadline (not on the step's own thread, which would wait for itself).
        False when no step runs (none will: the scheduler is stopping): the caller runs `call`
        itself."""
        step = self._lock
        if not step.held_here and step.acquire(timeout=min(self._stop.left(), 86_400.0)):
            step.release()
            return False
        return step.then(call)

    def after_thread(self, call: Callable[[], None]) -> bool:
        """Have the background thread run `call` once its last job has returned (the core's
        close of the store). False when no thread runs: the caller runs `call` itself."""
        return self._worker is not None and self._worker.after_thread(call)

    def wait_background(self, timeout: float = 30.0) -> bool:
        """Wait until the background thread runs no step and none is asked for (tests and
        benchmarks that then read what it did). True at once without one; False on timeout."""
        return self._worker is None or self._worker.wait_idle(timeout)

    def ask_to_stop(self, within: float | None = None) -> None:
        """`stop` without the wait (a shutdown stopping several schedulers asks each first).
        Waits for the thread to end `within` seconds from now (None: STOP_SECONDS) at the latest,
        or sooner if an earlier ask (the exit handler's) said so."""
        within = STOP_SECONDS if within is None else within
        if self._worker is not None:
            self._worker.ask_to_stop(within)
        else:
            self._stop.ask(within)

    async def tick_async(self, hook: str = "") -> int:
        """`tick` for async hosts: consolidation is awaited (catch_up_async), never run_sync. Its
        step runs on the caller's loop, whatever `background` says."""
        now = self.clock()
        if now < self._schedule_wake and (now < self._queue_wake or hook not in self._drain_hooks):
            return 0
        if self._stopping or not self._lock.acquire(blocking=False):
            return 0
        try:
            self._schedule(now)
            if hook in self._drain_hooks and now >= self._queue_wake:
                return await self._drain_async()
            return 0
        except Exception as exc:
            if self._stopping:  # (the store may have closed under it: not a fault)
                log.debug("chronicle maintenance stopped mid-step: %s", exc)
                return 0
            self._back_off(exc, now)
            return 0
        finally:
            self._lock.release()

    def _back_off(self, exc: Exception, now: float) -> None:
        text = f"{type(exc).__name__}: {exc}"
        # A database that refuses writes is said once per database (the slots share the note).
        key = type(exc).__name__ if isinstance(exc, StoreError) else text
        seen = self._warned_db if isinstance(exc, StoreError) else self._warned
        if key not in seen:
            seen.add(key)
            log.warning("chronicle maintenance paused for %.0fs: %s", _BACKOFF_AFTER_ERROR, text)
        self._schedule_wake = max(self._schedule_wake, now + _BACKOFF_AFTER_ERROR)
        self._queue_wake = max(self._queue_wake, now + _BACKOFF_AFTER_ERROR)

    # -- scheduling ------------------------------------------------------------------------

    def _load(self) -> None:
        # Finding the summariser imports the context engine, which is slow the first time, so
        # it waits for the first consolidation job (on a draining hook, off the user's turn).
        marks = self.queue.watermarks()
        self._next_due = {}
        for task, schedule in self.settings.schedules.items():
            if not schedule.active or task in self._unavailable:
                continue
            mark = marks.get(task)
            # Never run: due at once. Otherwise the first match after the last due time handled.
            self._next_due[task] = (
                -math.inf if mark is None else next_due_after(schedule.cron, mark)
            )
        self._loaded = True

    def _schedule(self, now: float) -> None:
        if now < self._schedule_wake:
            return
        started = self._timer()
        if not self._loaded:
            self._load()
        budget = self.settings.budget_ms / 1000.0
        due = sorted((at, task) for task, at in self._next_due.items() if at <= now)
        for attempt, (_, task) in enumerate(due):
            if attempt and self._timer() - started > budget:
                break  # the rest waits for the next hook call
            if self._fire(task, now):
                break
        self._schedule_wake = min(self._next_due.values(), default=math.inf)

    def _fire(self, task: str, now: float) -> bool:
        """Enqueue `task` for its latest due time unless that time was already handled (by this
        or another process). Returns whether this call enqueued it."""
        schedule = self.settings.schedules[task]
        due = latest_due(schedule.cron, now)
        job_id = self.queue.fire(
            task,
            schedule.cron,
            due,
            JobSpec(task, TASKS[task], key=task, payload={"schedule": task, "due": due}),
        )
        fired = job_id is not None
        # Not fired: handled already (here or by another process), at `due` or later.
        mark = due if fired else max(due, self.queue.watermarks().get(task, due))
        self._next_due[task] = next_due_after(schedule.cron, mark)
        if fired:
            self._queue_wake = min(self._queue_wake, now)
        return fired

    # -- draining --------------------------------------------------------------------------

    def _claims(self) -> Iterator[Job]:
        """Claim up to `drain_per_hook` jobs, shared by class weight, one at a time: the caller
        runs each before the next is claimed, so the drain budget counts the work itself. The
        first job is always claimed: a budget spent before it (the reclaim's round trips to a
        slow server) would otherwise leave every hook with nothing run, the queue never moving
        while maintenance runs on hooks alone."""
        started = self._timer()
        budget = self.settings.drain_budget_ms / 1000.0
        for reclaimed in self.queue.reclaim():
            if reclaimed.state == "failed":
                self._record_failure(reclaimed)
        total = self.settings.drain_per_hook
        quotas = allocate(total, self.settings.shares)
        order = sorted(JOB_CLASSES, key=lambda c: -self.settings.shares.get(c, 0.0))
        # A job runs at most once per call: one that asked to be retried waits for the next hook.
        seen: list[int] = []

        def spent() -> bool:
            return bool(seen) and self._timer() - started > budget

        for job_class in order:
            for _ in range(quotas.get(job_class, 0)):
                if spent() or self._stopping:
                    return
                found = self.queue.claim(job_class, skip=seen)
                if found is None:
                    break
                seen.append(found.id)
                yield found
        # Slots a quiet class left unused go to whoever has work, oldest first.
        while len(seen) < total and not spent() and not self._stopping:
            found = self.queue.claim(skip=seen)
            if found is None:
                return
            seen.append(found.id)
            yield found

    def _drain(self) -> int:
        ran = 0
        for job in self._claims():  # (it claims nothing once stopping: the rest stays queued)
            self._run(job)
            ran += 1
        self.jobs_run += ran
        self._refresh_queue_wake()
        return ran

    async def _drain_async(self) -> int:
        ran = 0
        for job in self._claims():
            await self._run_async(job)
            ran += 1
        self.jobs_run += ran
        self._refresh_queue_wake()
        return ran

    def _refresh_queue_wake(self) -> None:
        wake = self.queue.next_wake()
        self._queue_wake = math.inf if wake is None else wake

    def _context(self, job: Job) -> TaskContext:
        return TaskContext(
            self._store, self._recall, self.queue, self.sweeps, self.settings,
            self.settings.budget_for(job.kind), self.clock(), lambda: self._stopping,
        )  # fmt: skip

    def _run(self, job: Job) -> None:
        try:
            report = self._handle(job)
        except JobCut as cut:
            self._cut(job, cut)
        except Exception as exc:
            self._failed_attempt(job, exc)
        else:
            self._finish(job, report)

    async def _run_async(self, job: Job) -> None:
        try:
            consolidator = self._consolidator_for(job)
            if job.kind == "consolidate" and consolidator is not None:
                report = await consolidator.run_async(self.settings.budget_for(job.kind))
            else:
                report = self._handle(job)
        except JobCut as cut:
            self._cut(job, cut)
        except Exception as exc:
            self._failed_attempt(job, exc)
        else:
            self._finish(job, report)

    def _cut(self, job: Job, cut: JobCut) -> None:
        """A job that stopped for the process's stop gives its claim back, runnable at once,
        the attempt counted. One that raised JobCut with no stop asked, or at its last attempt,
        is a failed attempt (else it could run again at once, for ever)."""
        if not self._stopping or job.attempts >= job.max_attempts:
            self._failed_attempt(job, cut)
            return
        released = self.queue.release(job, f"released: {cut}")
        log.info(
            "chronicle %s job %d stopped with its process; %s", job.kind, job.id,
            "released for the next run" if released else "its claim had lapsed already",
        )  # fmt: skip

    def _consolidator_for(self, job: Job) -> Consolidator | None:
        if job.kind not in ("consolidate", "reap"):
            return None
        self._resolve()
        if self._consolidator is None:
            # Found out now, not at start-up: stop scheduling what cannot run.
            for task in ("consolidate", "reap"):
                self._next_due.pop(task, None)
        return self._consolidator

    def _handle(self, job: Job) -> SweepReport:
        if job.kind in ("consolidate", "reap"):
            consolidator = self._consolidator_for(job)
            budget = self.settings.budget_for(job.kind)
            if consolidator is None:
                return SweepReport(job.kind, skipped=self._unavailable.get(job.kind, "unavailable"))
            if job.kind == "consolidate":
                return consolidator.run(budget)
            return consolidator.reap(self.clock(), budget)
        task = self._handlers.get(job.kind)
        if task is None:
            raise LookupError(f"no handler for job kind {job.kind!r}")
        return task(self._context(job))

    def _finish(self, job: Job, report: SweepReport) -> None:
        follow_ups: list[JobSpec] = []
        if report.more and job.kind not in _NO_CONTINUATION:
            # A continuation names the job it continues: a schedule's own runs are the jobs
            # without one (one per due time across every host; bench/multihost.py counts them).
            more = {**job.payload, "continues": job.payload.get("continues", job.id)}
            follow_ups.append(JobSpec(job.kind, job.job_class, job.key, more))
        if job.kind == "reap" and report.processed:
            # The reaper's decisions are boundaries only once the fold has read them.
            follow_ups.append(
                JobSpec("consolidate", TASKS["consolidate"], "consolidate", depends_on=job.id)
            )
        schedule = job.payload.get("schedule")
        done = self.queue.complete(
            job,
            report.as_dict(),
            follow_ups,
            (schedule, f"done: {_summary(report)}") if isinstance(schedule, str) else None,
        )
        if done and follow_ups:
            self._queue_wake = min(self._queue_wake, self.clock())

    def _failed_attempt(self, job: Job, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        delay = 0.0 if isinstance(exc, RetryNextTick) else None
        after = self.queue.fail(job, reason, delay=delay)
        if after is None:
            return
        if after.state == "failed":
            self._record_failure(after)
        else:
            log.warning(
                "chronicle %s job %d failed (attempt %d of %d), will retry: %s",
                job.kind, job.id, after.attempts, after.max_attempts, reason,
            )  # fmt: skip
            self._queue_wake = min(self._queue_wake, after.available_at)

    def _record_failure(self, job: Job) -> None:
        reason = job.reason or "unknown"
        log.error("chronicle %s job %d failed for good: %s", job.kind, job.id, reason)
        schedule = job.payload.get("schedule")
        if isinstance(schedule, str):
            self.queue.note_outcome(schedule, f"failed: {reason}")
        self._store.append(
            [
                self._reader.types.pending(
                    JobFailed(kind=job.kind, key=job.key, attempts=job.attempts, reason=reason)
                )
            ]
        )

    # -- consolidation ---------------------------------------------------------------------

    def _resolve(self) -> None:
        """Find the summariser and the session tree, once. Missing parts switch the consolidation
        and reaping schedules off, with the reason in `maintenance_status()`."""
        if self._resolved:
            return
        # The background thread's first job and a reader (`consolidator`, a status) may both
        # come here: the second waits for the first to finish rather than see no consolidator.
        with self._resolving:
            if self._resolved or self._in_resolve:
                return
            self._in_resolve = True
            try:
                self._build_consolidator()
            finally:
                self._resolved = True

    def _build_consolidator(self) -> None:
        summarize = self._summarize
        try:
            if summarize is None:
                summarize = self._writer()
            summarize = _until_stopped(summarize, self._stop)
            conversations = self._sessions()
        except Exception as exc:  # a broken subsystem must not stop the other schedules
            why = f"{type(exc).__name__}: {exc}"
            for task in ("consolidate", "reap"):
                self._unavailable[task] = why
            log.warning("chronicle consolidation is off: %s", why)
            return
        self._consolidator = Consolidator(
            self._store,
            self._reader,
            self._reader.types,
            conversations=conversations,
            summarize=summarize,
            forgotten=self._forgotten,
            rules=UnitRules(
                unit_turns=self.settings.unit_turns,
                idle_gap_seconds=self.settings.idle_gap_seconds,
                close_on_session_end=self.settings.close_on_session_end,
            ),
            parts=self._parts,
        )

    def _forgotten(self) -> set[int]:
        """What a unit's section must not summarise (read when a unit closes). Only recall's
        own events hide a message: while the log holds none, nothing is forgotten, and recall
        (its tables, and its index of every section written from then on) is not built just
        to say so."""
        if not self._store.any_after(0, namespaces=(RECALL,)):
            return set()
        return self._recall().forgotten_messages()

    @property
    def consolidator(self) -> Consolidator | None:
        self._resolve()
        return self._consolidator

    # -- direct use (CLI, tests, other subsystems) -----------------------------------------------

    def handle(self, kind: str, handler: Callable[[TaskContext], SweepReport]) -> None:
        """Run jobs of `kind` with `handler` (a subsystem's own background work). The handler
        gets a TaskContext (store, recall, queue, sweep cursors, row budget, now) and returns a
        SweepReport; enqueue with `queue.enqueue(JobSpec(kind, job_class, key))`."""
        if kind in ("consolidate", "reap"):
            raise UsageError(f"{kind!r} is the scheduler's own job kind; pick another name")
        self._handlers[kind] = handler

    def enqueue(self, task: str) -> int:
        """Queue one run of a scheduled task now, outside its schedule (e.g. `chronicle doctor`)."""
        if task not in TASKS:
            raise UsageError(f"no scheduled task {task!r}; the tasks are {sorted(TASKS)}")
        job_id = self.queue.enqueue(JobSpec(task, TASKS[task], key=task))
        self._queue_wake = min(self._queue_wake, self.clock())
        return job_id

    def run_pending(self, max_jobs: int | None = None) -> int:
        """Run queued jobs now, whatever the hook, until none is runnable or `max_jobs` ran."""
        return len(self._run_pending(max_jobs))

    def run_due(self, max_jobs: int | None = None) -> list[JobReport]:
        """For a command line, never a hook: enqueue every schedule that is due now (not one per
        call), then run the queue until nothing is runnable. Returns each job run, as it ended
        (none once stopping)."""
        now = self.clock()
        with self._lock:
            if self._stopping:
                return []
            if not self._loaded:
                self._load()
            for task, at in sorted(self._next_due.items(), key=lambda item: item[1]):
                if at <= now:
                    self._fire(task, now)
            self._schedule_wake = min(self._next_due.values(), default=math.inf)
        return [(self.queue.get(job.id) or job).as_dict() for job in self._run_pending(max_jobs)]

    def _run_pending(self, max_jobs: int | None) -> list[Job]:
        ran: list[Job] = []
        with self._lock:
            for reclaimed in self.queue.reclaim():
                if reclaimed.state == "failed":
                    self._record_failure(reclaimed)
            while (max_jobs is None or len(ran) < max_jobs) and not self._stopping:
                job = self.queue.claim(skip=[j.id for j in ran])
                if job is None:
                    break
                self._run(job)
                ran.append(job)
            self._refresh_queue_wake()
        return ran

    # -- reporting -----------------------------------------------------------------------------

    def maintenance_status(self) -> MaintenanceStatus:
        """Per schedule: state, last run, next due; the queue; sweeps; consolidation's backlog;
        and the tasks deliberately left unscheduled, with why."""
        self._resolve()
        now = self.clock()
        with self._parts.tables.reading("reading maintenance status") as conn:
            marks = {
                r[0]: r[1:]
                for r in conn.execute(
                    "SELECT schedule, last_due, enqueued_at, finished_at, outcome"
                    " FROM scheduler_watermarks"
                )
            }
        schedules = []
        for task, schedule in self.settings.schedules.items():
            mark = marks.get(task)
            entry: ScheduleStatus = {
                "task": task,
                "key": schedule.key,
                "cron": schedule.cron,
                "state": schedule.state,
                "last_due": _iso(mark[0]) if mark else None,
                "last_enqueued": _iso(mark[1]) if mark else None,
                "last_finished": _iso(mark[2]) if mark else None,
                "last_outcome": mark[3] if mark else None,
                "next_due": None,
            }
            if schedule.problem:
                entry["reason"] = schedule.problem
            elif task in self._unavailable and schedule.active:
                entry["state"] = "unavailable"
                entry["reason"] = self._unavailable[task]
            elif not self.settings.enabled and schedule.active:
                entry["state"] = "off"
                entry["reason"] = "maintenance.enabled is false"
            elif schedule.active:
                entry["next_due"] = (
                    _iso(max(next_due_after(schedule.cron, mark[0]), now)) if mark else "now"
                )
            schedules.append(entry)
        consolidation: ConsolidationStatus
        if self._consolidator is None:
            consolidation = {"unavailable": self._unavailable.get("consolidate")}
        else:
            position, last = self._consolidator.backlog()
            consolidation = {
                "position": position,
                "log_end": last,
                "behind": max(0, last - position),
                "open_units": self._consolidator.open_units(),
            }
        failures = [j.as_dict() for j in self.queue.jobs(state="failed", limit=5)]
        return {
            "enabled": self.settings.enabled,
            "now": _iso(now),
            "schedules": schedules,
            "queue": QueueStatus(**self.queue.counts(), recent_failures=failures),
            "sweeps": {
                name: {"cursor": s.cursor, "passes": s.passes, "last": s.report}
                for name, s in self.sweeps.all().items()
            },
            "consolidation": consolidation,
            "not_scheduled": [{"task": t, "why": why} for t, why in NOT_SCHEDULED],
        }


def _until_stopped(
    summarize: Summarizer | AsyncSummarizer, stop: StopSignal
) -> Summarizer | AsyncSummarizer:
    """`summarize`, looking at the stop signal before each draw: a model call in flight is not
    interrupted, but no other is made once the process stops. The batch's draws are not kept
    (its transaction never opened); the job gives its claim back (`JobCut`)."""
    if is_async_summarizer(summarize):
        draw_async = cast("AsyncSummarizer", summarize)

        async def drawn_async(events: Sequence[StoredEvent]) -> Consolidation:
            _not_stopped(stop)
            return await draw_async(events)

        return drawn_async
    draw = cast("Summarizer", summarize)

    def drawn(events: Sequence[StoredEvent]) -> Consolidation:
        _not_stopped(stop)
        return draw(events)

    return drawn


def _not_stopped(stop: StopSignal) -> None:
    if stop.asked:
        raise JobCut("consolidation stopped before its next summary")


def _summary(report: SweepReport) -> str:
    if report.skipped:
        return f"skipped ({report.skipped})"
    return f"processed {report.processed}, remaining {report.remaining}"
