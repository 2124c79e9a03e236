"""The scheduler's tables: work tables beside the log, never part of it.

The log stays append-only. Jobs, schedule watermarks, sweep cursors and the consolidation fold's
open units are projections and bookkeeping: rows here are updated and pruned freely, and an
outcome worth keeping (a reaped session, a job that failed for good) is appended to the log as an
event instead.
"""

from __future__ import annotations

import sqlite3

from ..log.store import Migration, run_script

__all__ = ["SCHEDULER_MIGRATIONS"]

_QUEUE = """
CREATE TABLE IF NOT EXISTS scheduler_jobs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT    NOT NULL,
    job_class    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    payload      TEXT    NOT NULL DEFAULT '{}',
    state        TEXT    NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'done', 'failed')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    depends_on   INTEGER,
    available_at REAL    NOT NULL,
    enqueued_at  REAL    NOT NULL,
    lease_until  REAL,
    lease_owner  TEXT,
    started_at   REAL,
    finished_at  REAL,
    reason       TEXT,
    result       TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS scheduler_jobs_live_key
    ON scheduler_jobs(key) WHERE state IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS scheduler_jobs_runnable
    ON scheduler_jobs(state, job_class, available_at);
CREATE INDEX IF NOT EXISTS scheduler_jobs_by_dependency
    ON scheduler_jobs(depends_on) WHERE depends_on IS NOT NULL;
CREATE INDEX IF NOT EXISTS scheduler_jobs_finished
    ON scheduler_jobs(finished_at) WHERE state IN ('done', 'failed');
CREATE TABLE IF NOT EXISTS scheduler_watermarks (
    schedule    TEXT PRIMARY KEY,
    cron        TEXT NOT NULL,
    last_due    REAL NOT NULL,
    enqueued_at REAL NOT NULL,
    job_id      INTEGER,
    finished_at REAL,
    outcome     TEXT
);
CREATE TABLE IF NOT EXISTS scheduler_sweeps (
    name       TEXT PRIMARY KEY,
    cursor     INTEGER NOT NULL DEFAULT 0,
    passes     INTEGER NOT NULL DEFAULT 0,
    report     TEXT    NOT NULL DEFAULT '{}',
    updated_at REAL
);
"""

_UNITS = """
CREATE TABLE IF NOT EXISTS consolidation_units (
    chronicle  TEXT PRIMARY KEY,
    session    TEXT    NOT NULL,
    open_from  INTEGER,
    last_seq   INTEGER NOT NULL,
    last_at    REAL    NOT NULL,
    turns      INTEGER NOT NULL DEFAULT 0,
    closed_through INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS consolidation_units_open
    ON consolidation_units(last_at) WHERE open_from IS NOT NULL;
"""


def _m001_queue(conn: sqlite3.Connection) -> None:
    run_script(conn, _QUEUE)


def _m002_units(conn: sqlite3.Connection) -> None:
    run_script(conn, _UNITS)


SCHEDULER_MIGRATIONS: tuple[Migration, ...] = (
    Migration("scheduler.m001_queue", _m001_queue),
    Migration("scheduler.m002_consolidation_units", _m002_units),
)
