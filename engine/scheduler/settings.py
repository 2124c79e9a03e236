"""The scheduler's configuration, read once from the declared keys.

A value of the wrong type falls back to the key's default with one warning naming the key: a hook
must keep working whatever config.yaml says, and the operator must hear that the value was ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..config import Config
from .cron import Schedule, parse_schedule

__all__ = ["TASKS", "JOB_CLASSES", "Settings", "read_settings"]

log = logging.getLogger("chronicle_engine.scheduler")

T = TypeVar("T")

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


def _read(config: Config, path: str, convert: Callable[[Any], T]) -> T:
    value = config.get(path)
    try:
        if isinstance(value, bool) and convert is not _bool:
            raise TypeError("a boolean is not a number here")
        return convert(value)
    except (TypeError, ValueError) as exc:
        default = config.declared[path].default
        log.warning("chronicle.%s = %r is not usable (%s); using %r", path, value, exc, default)
        return convert(default)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise TypeError(f"expected true or false, got {type(value).__name__}")


def _non_negative(kind: Callable[[Any], T]) -> Callable[[Any], T]:
    def convert(value: Any) -> T:
        out = kind(value)
        if out < 0:  # type: ignore[operator]
            raise ValueError("it must not be negative")
        return out

    return convert


def _hooks(value: Any) -> frozenset[str]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of hook names")
    return frozenset(value)


def read_settings(config: Config) -> Settings:
    number = _non_negative(float)
    count = _non_negative(int)
    schedules = {
        task: parse_schedule(
            task, f"maintenance.schedules.{task}", config.get(f"maintenance.schedules.{task}")
        )
        for task in TASKS
    }
    shares = {c: _read(config, f"queue.shares.{c}", number) for c in JOB_CLASSES}
    return Settings(
        enabled=_read(config, "maintenance.enabled", _bool),
        budget_ms=_read(config, "maintenance.budget_ms", number),
        drain_hooks=_read(config, "maintenance.drain_hooks", _hooks),
        drain_per_hook=_read(config, "maintenance.drain_per_hook", count),
        drain_budget_ms=_read(config, "maintenance.drain_budget_ms", number),
        schedules=schedules,
        lease_seconds=_read(config, "queue.lease_seconds", number),
        max_attempts=max(1, _read(config, "queue.max_attempts", count)),
        shares=shares,
        retention_days=_read(config, "queue.retention.days", number),
        retention_max_rows=_read(config, "queue.retention.max_rows", count),
        row_budget=max(1, _read(config, "sweeps.row_budget", count)),
        consolidate_budget=max(1, _read(config, "sweeps.budgets.consolidate", count)),
        unit_turns=_read(config, "consolidation.unit_turns", count),
        idle_gap_seconds=60.0 * _read(config, "consolidation.idle_gap_minutes", number),
        close_on_session_end=_read(config, "consolidation.close_on_session_end", _bool),
    )
