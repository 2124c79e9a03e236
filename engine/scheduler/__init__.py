"""Hook-driven scheduling: consolidation and maintenance with no daemon, thread or timer.

`core.scheduler` is a `Scheduler`. The slot adapters call `tick(hook)` on every host hook (cheap
when nothing is due); `maintenance_status()` reports what ran, what is due and what is left.
"""

from __future__ import annotations

from .queue import Job, JobQueue, JobSpec, RetryNextTick, allocate
from .scheduler import NOT_SCHEDULED, Scheduler
from .sweeps import SweepReport

__all__ = [
    "Scheduler",
    "NOT_SCHEDULED",
    "Job",
    "JobQueue",
    "JobSpec",
    "RetryNextTick",
    "SweepReport",
    "allocate",
]
