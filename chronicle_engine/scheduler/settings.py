"""The scheduler's view of the typed settings (chronicle_engine/config.py): what it needs, derived once.

Validation is the settings' own (a value of the wrong type has already fallen back to its default
with a warning naming the key); this module only parses cron strings and converts units.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ChronicleSettings
from .cron import Schedule, parse_schedule

__all__ = ["TASKS", "JOB_CLASSES", "Settings", "read_settings"]

TASKS: dict[str, str] = {
    # task -> the job class whose share it draws from
    "consolidate": "consolidation",
    "reap": "reaping",
    "fts_optimize": "maintenance",
    "belief_sweep": "maintenance",
    "queue_retention": "maintenance",
    "wal_checkpoint": "maintenance",
    "integrity": "maintenance",
}
JOB_CLASSES = ("consolidation", "reaping", "maintenance")


@dataclass(frozen=True, slots=True)
class Settings:
    enabled: bool
    background: bool
    budget_ms: float
    drain_hooks: frozenset[str]
    drain_per_hook: int
    drain_budget_ms: float
    schedules: dict[str, Schedule]
    lease_seconds: float
    max_attempts: int
    shares: dict[str, float]
    retention_days: float
    retention_max_rows: int
    row_budget: int
    consolidate_budget: int
    unit_turns: int
    idle_gap_seconds: float
    close_on_session_end: bool

    def budget_for(self, task: str) -> int:
        return self.consolidate_budget if task == "consolidate" else self.row_budget


def read_settings(settings: ChronicleSettings) -> Settings:
    """The scheduler's view of the typed settings: cron strings parsed, minutes in seconds,
    counts that must be positive raised to 1."""
    maintenance, queue, sweeps = settings.maintenance, settings.queue, settings.sweeps
    consolidation = settings.consolidation
    schedules = maintenance.schedules
    crons = {
        "consolidate": schedules.consolidate,
        "reap": schedules.reap,
        "fts_optimize": schedules.fts_optimize,
        "belief_sweep": schedules.belief_sweep,
        "queue_retention": schedules.queue_retention,
        "wal_checkpoint": schedules.wal_checkpoint,
        "integrity": schedules.integrity,
    }
    shares = queue.shares
    return Settings(
        enabled=maintenance.enabled,
        background=maintenance.background,
        budget_ms=maintenance.budget_ms,
        drain_hooks=frozenset(maintenance.drain_hooks),
        drain_per_hook=maintenance.drain_per_hook,
        drain_budget_ms=maintenance.drain_budget_ms,
        schedules={
            task: parse_schedule(task, f"maintenance.schedules.{task}", crons[task])
            for task in TASKS
        },
        lease_seconds=queue.lease_seconds,
        max_attempts=max(1, queue.max_attempts),
        shares={
            "consolidation": shares.consolidation,
            "reaping": shares.reaping,
            "maintenance": shares.maintenance,
        },
        retention_days=queue.retention.days,
        retention_max_rows=queue.retention.max_rows,
        row_budget=max(1, sweeps.row_budget),
        consolidate_budget=max(1, sweeps.budgets.consolidate),
        unit_turns=consolidation.unit_turns,
        idle_gap_seconds=60.0 * consolidation.idle_gap_minutes,
        close_on_session_end=consolidation.close_on_session_end,
    )
