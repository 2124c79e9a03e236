"""Schedules: 5-field cron strings, read in UTC, each tied to the config key it came from.

A schedule fires once per due time. Its watermark is the latest due time already handled; the next
due time is the first match strictly after the watermark. When several due times passed unseen (the
host was not running), they collapse into one run at the latest of them: maintenance catches up, it
does not replay every missed slot.

An empty string disables a schedule. So does one that does not parse, but loudly: one warning that
names the key, because an operator who wrote a schedule expects it to run.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from croniter import croniter

__all__ = ["Schedule", "parse_schedule", "latest_due", "next_due_after"]

log = logging.getLogger("chronicle_engine.scheduler")


@dataclass(frozen=True, slots=True)
class Schedule:
    """One named task's cadence. `problem` says why an inactive schedule is off."""

    task: str
    key: str
    cron: str
    problem: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.cron) and self.problem is None

    @property
    def state(self) -> str:
        if self.problem is not None:
            return "invalid" if self.cron else "disabled"
        return "active" if self.cron else "disabled"


def parse_schedule(task: str, key: str, value: object) -> Schedule:
    """Validate a configured cron string. Never raises: a bad one is disabled with a warning."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return Schedule(task, key, "", None)
    if not isinstance(value, str):
        wrong = f"expected a 5-field cron string, got {type(value).__name__}"
        log.warning(
            "chronicle.%s is not a cron string (%s); the %s schedule is off", key, wrong, task
        )
        return Schedule(task, key, str(value), wrong)
    expr = " ".join(value.split())
    fields = len(expr.split(" "))
    problem: str | None = None
    if fields != 5:
        problem = f"a cron string has 5 fields (minute hour day month weekday), this has {fields}"
    elif not croniter.is_valid(expr):
        problem = "croniter cannot parse it"
    if problem is not None:
        log.warning(
            "chronicle.%s = %r is not a valid schedule (%s); the %s schedule is off until it is fixed",
            key,
            value,
            problem,
            task,
        )
        return Schedule(task, key, expr, problem)
    return Schedule(task, key, expr, None)


def latest_due(cron: str, now: float) -> float:
    """The latest due time at or before `now` (epoch seconds, UTC)."""
    # croniter's get_prev is strictly before its start; cron is minute-grained, so starting one
    # second past the floor of `now` makes a due time equal to `now` count as reached.
    return float(croniter(cron, float(math.floor(now) + 1)).get_prev(float))


def next_due_after(cron: str, moment: float) -> float:
    """The first due time strictly after `moment`."""
    return float(croniter(cron, moment).get_next(float))
