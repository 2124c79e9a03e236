"""A durable job queue in the database, drained a few jobs per hook call.

Invariants:
- At most one live (pending or running) job per key: enqueueing work that is already queued
  returns the queued job, so a backlog never grows by repetition.
- A claim is a lease. A running job whose lease has passed was abandoned (its process died, or it
  outran the lease) and is re-armed by `reclaim`; the abandoned claim counts as an attempt, so a
  job that kills its process cannot loop forever.
- After `max_attempts` claims a job is failed for good with its last reason, and the pending jobs
  that depend on it fail with it.
- A job its own process stops cleanly (it met the stop signal between two pieces of work and
  raised `JobCut`) gives its claim back at once (`release`): pending again, so the next process
  or host runs it without waiting for the lease; the attempt counts, so a job every process
  stops ends failed after `max_attempts`, as a failing one does.
- Retention prunes only finished rows, and never a row that a live job depends on.

The queue is a work table, not the log: its rows are updated and deleted. Every timestamp comes
from the injected clock (epoch seconds), so tests can move time.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import uuid
from abc import abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from ..errors import ChronicleRuntimeError
from ..jsontypes import JSON, JSONObject
from ..log.store import Row, SQLiteEventStore, sqlite_errors
from ..log.tables import SQLConnection, SQLiteTables, Tables

__all__ = [
    "JobSpec",
    "Job",
    "JobQueue",
    "JobQueueBase",
    "JobReport",
    "QueueCounts",
    "RetryNextTick",
    "JobCut",
    "allocate",
    "JOB_COLUMNS",
    "job_from_row",
    "LIVE",
    "FINISHED",
]

LIVE = ("pending", "running")
FINISHED = ("done", "failed")

# A job as status and the command line show it ("class" is a keyword, hence this form).
JobReport = TypedDict(
    "JobReport",
    {
        "id": int,
        "kind": str,
        "class": str,
        "key": str,
        "state": str,
        "attempts": int,
        "max_attempts": int,
        "depends_on": "int | None",
        "reason": "str | None",
        "result": "JSONObject | None",
        "finished_at": "float | None",
    },
)


class QueueCounts(TypedDict):
    """Jobs per state (the table's CHECK allows these four), and per class for the live ones."""

    pending: int
    running: int
    done: int
    failed: int
    live_by_class: dict[str, dict[str, int]]
    oldest_pending_age_s: float | None


JOB_COLUMNS = (
    "id, kind, job_class, key, payload, state, attempts, max_attempts, depends_on, available_at,"
    " enqueued_at, lease_until, lease_owner, started_at, finished_at, reason, result"
)


class RetryNextTick(ChronicleRuntimeError):
    """Raised by a job that lost a race (e.g. a refused chronicle fork): run it again at the next
    drain, with no backoff. It still counts as an attempt, so a race that never resolves ends."""


class JobCut(ChronicleRuntimeError):
    """Raised by a job that met its process's stop signal between two pieces of work (e.g. two
    model draws), having kept nothing half done: its claim is given back at once, and it runs
    from the start in the next process or on another host."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """Work to enqueue. `key` names the unit of work (one live job per key)."""

    kind: str
    job_class: str
    key: str = ""
    payload: Mapping[str, JSON] = field(default_factory=dict)
    depends_on: int | None = None
    delay: float = 0.0

    @property
    def unit(self) -> str:
        return self.key or self.kind


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    kind: str
    job_class: str
    key: str
    payload: JSONObject
    state: str
    attempts: int
    max_attempts: int
    depends_on: int | None
    available_at: float
    enqueued_at: float
    lease_until: float | None
    lease_owner: str | None
    started_at: float | None
    finished_at: float | None
    reason: str | None
    result: JSONObject | None

    def as_dict(self) -> JobReport:
        return {
            "id": self.id,
            "kind": self.kind,
            "class": self.job_class,
            "key": self.key,
            "state": self.state,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "depends_on": self.depends_on,
            "reason": self.reason,
            "result": self.result,
            "finished_at": self.finished_at,
        }


def job_from_row(row: Row) -> Job:
    (
        id_,
        kind,
        job_class,
        key,
        payload,
        state,
        attempts,
        max_attempts,
        depends_on,
        available_at,
        enqueued_at,
        lease_until,
        lease_owner,
        started_at,
        finished_at,
        reason,
        result,
    ) = row
    return Job(
        id_,
        kind,
        job_class,
        key,
        json.loads(payload),
        state,
        attempts,
        max_attempts,
        depends_on,
        available_at,
        enqueued_at,
        lease_until,
        lease_owner,
        started_at,
        finished_at,
        reason,
        json.loads(result) if result else None,
    )


def _backoff(attempts: int) -> float:
    return float(min(5 * 2 ** max(attempts - 1, 0), 600))


def allocate(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split `total` job slots between classes in proportion to their weights.

    Weights are normalised, so {2, 1, 1} and {0.5, 0.25, 0.25} split alike. Slots go by largest
    remainder; then a class with a positive weight that rounded to nothing is lent one slot, so the
    sum may exceed `total` by at most the number of such classes. That loan is the guarantee that
    no class with a positive share starves behind a busier one.
    """
    out = {name: 0 for name in weights}
    positive = {name: float(w) for name, w in weights.items() if w and w > 0}
    if total <= 0 or not positive:
        return out
    whole = sum(positive.values())
    exact = {name: total * w / whole for name, w in positive.items()}
    for name, x in exact.items():
        out[name] = math.floor(x)
    left = total - sum(out.values())
    by_remainder = sorted(positive, key=lambda n: (-(exact[n] - out[n]), -positive[n], n))
    for name in by_remainder[:left]:
        out[name] += 1
    for name in positive:
        if out[name] == 0:
            out[name] = 1
    return out


Conn = TypeVar("Conn", bound=SQLConnection)
Store = TypeVar("Store")


class JobQueueBase(Tables[Store, Conn]):
    """The queue's rules, written once for every database: SQL here uses `?` placeholders, which
    `_sql` turns into the driver's. A store's queue gives its transaction, its reads and its
    error mapping, and the four steps whose SQL the databases cannot share: enqueue, claim,
    reclaim and firing a schedule (each must hold across hosts on a server database)."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float],
        lease_seconds: float = 600.0,
        max_attempts: int = 5,
        owner: str | None = None,
    ) -> None:
        """`store` holds the queue's tables, already migrated (its migrations: `schema.py` on
        SQLite, `postgres.py` on PostgreSQL)."""
        super().__init__(store)
        self.clock = clock
        self.lease_seconds = float(lease_seconds)
        self.max_attempts = max(1, int(max_attempts))
        self.owner = owner or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    # -- what each database gives ----------------------------------------------------------

    _LOCK_ROW = ""
    """What a read that is about to change its row appends (a row lock on a server database)."""

    @abstractmethod
    def _enqueue(self, conn: Conn, spec: JobSpec) -> int: ...

    @abstractmethod
    def claim(self, job_class: str | None = None, *, skip: Collection[int] = ()) -> Job | None:
        """Lease the oldest runnable job (of `job_class`, if given, and not in `skip`), or None."""

    @abstractmethod
    def reclaim(self) -> list[Job]:
        """Re-arm every running job whose lease has passed (or fail it, if out of attempts)."""

    @abstractmethod
    def fire(self, schedule: str, cron: str, due: float, spec: JobSpec) -> int | None:
        """Enqueue `spec` for `schedule`'s due time `due` unless that time was already handled
        (by this or another process); the job's id when this call fired it, else None. The
        watermark moves in the transaction that enqueues the job."""

    # -- writing -------------------------------------------------------------------------

    def enqueue(self, spec: JobSpec, conn: Conn | None = None) -> int:
        """Queue `spec` unless its key is already live; returns the live job's id either way."""
        if conn is not None:
            return self._enqueue(conn, spec)
        with self._errors("enqueueing a job"), self._atomic() as c:
            return self._enqueue(c, spec)

    def _insert_values(self, spec: JobSpec, now: float) -> tuple[object, ...]:
        return (
            spec.kind,
            spec.job_class,
            spec.unit,
            json.dumps(dict(spec.payload), sort_keys=True),
            self.max_attempts,
            spec.depends_on,
            now + max(spec.delay, 0.0),
            now,
        )

    def complete(
        self,
        job: Job,
        result: Mapping[str, object] | None = None,
        follow_ups: Sequence[JobSpec] = (),
        outcome: tuple[str, str] | None = None,
    ) -> bool:
        """Mark a claimed job done, enqueue its follow-ups and note `outcome` (a schedule and
        how its run ended, see `note_outcome`) in the same transaction. False when the lease was
        lost meanwhile (another claim re-armed it); the follow-ups are then dropped, because the
        job will run again."""
        now = self.clock()
        with self._errors("completing a job"), self._atomic() as conn:
            if not self._update_held(
                conn,
                job,
                "state = 'done', finished_at = ?, result = ?, lease_until = NULL, reason = NULL",
                (now, json.dumps(dict(result or {}), sort_keys=True, default=str)),
            ):
                return False
            for spec in follow_ups:
                self._enqueue(conn, spec)
            if outcome is not None:
                self.note_outcome(*outcome, conn)
            return True

    def fail(self, job: Job, reason: str, *, delay: float | None = None) -> Job | None:
        """Record a failed attempt: back to pending after a backoff, or failed for good once the
        attempts are used up. Returns the job as it now stands (None if the lease was lost)."""
        now = self.clock()
        with self._errors("failing a job"), self._atomic() as conn:
            row = conn.execute(
                self._sql(
                    "SELECT attempts, max_attempts FROM scheduler_jobs"
                    f" WHERE id = ? AND state = 'running' AND lease_owner = ?{self._LOCK_ROW}"
                ),
                (job.id, self.owner),
            ).fetchone()
            if row is None:
                return None
            attempts, max_attempts = int(row[0]), int(row[1])
            if attempts >= max_attempts:
                conn.execute(
                    self._sql(
                        "UPDATE scheduler_jobs SET state = 'failed', finished_at = ?, reason = ?,"
                        " lease_until = NULL WHERE id = ?"
                    ),
                    (
                        now,
                        f"{reason} (gave up after {attempts} of {max_attempts} attempts)",
                        job.id,
                    ),
                )
                self._cascade(conn, now)
            else:
                wait = _backoff(attempts) if delay is None else max(delay, 0.0)
                conn.execute(
                    self._sql(
                        "UPDATE scheduler_jobs SET state = 'pending', available_at = ?,"
                        " reason = ?, lease_until = NULL, lease_owner = NULL WHERE id = ?"
                    ),
                    (now + wait, reason, job.id),
                )
            return self._get(conn, job.id)

    def release(self, job: Job, reason: str) -> bool:
        """Give back the claim on a job its process stopped cleanly (`JobCut`): pending and
        runnable now, its lease cleared. The claim's attempt stays counted: processes that
        always stop mid-job (one-shot runs) would otherwise run it for ever; the scheduler
        fails a job cut at its last attempt as any other (`Scheduler._cut`). False when the
        lease was lost meanwhile (another claim re-armed it)."""
        with self._errors("releasing a job"), self._atomic() as conn:
            return self._update_held(
                conn,
                job,
                "state = 'pending', available_at = ?, reason = ?,"
                " lease_until = NULL, lease_owner = NULL",
                (self.clock(), reason),
            )

    def _update_held(
        self, conn: Conn, job: Job, assignments: str, values: tuple[object, ...]
    ) -> bool:
        """Set `assignments` on `job` if this queue still holds its claim; whether it did."""
        cur = conn.execute(
            self._sql(
                f"UPDATE scheduler_jobs SET {assignments}"
                " WHERE id = ? AND state = 'running' AND lease_owner = ?"
            ),
            (*values, job.id, self.owner),
        )
        return cur.rowcount == 1

    _REARM = (
        "UPDATE scheduler_jobs SET"
        " state = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,"
        " finished_at = CASE WHEN attempts >= max_attempts THEN ? ELSE NULL END,"
        " reason = 'lease expired: the claim by ' || COALESCE(lease_owner, 'an unknown owner')"
        " || ' was abandoned or outran queue.lease_seconds'"
        " || CASE WHEN attempts >= max_attempts"
        "    THEN ' (gave up after ' || attempts || ' of ' || max_attempts || ' attempts)'"
        "    ELSE '' END,"
        " available_at = ?, lease_until = NULL, lease_owner = NULL"
    )
    """Re-arming expired leases (the caller adds which rows)."""

    def prune(self, *, max_age_seconds: float, max_rows: int, limit: int) -> tuple[int, int]:
        """Delete up to `limit` finished rows that are older than `max_age_seconds` or beyond the
        newest `max_rows`, sparing any row a live job depends on. Returns (pruned, remaining).
        A bound that is 0 or less is off."""
        if max_age_seconds <= 0 and max_rows <= 0:
            return 0, 0
        now = self.clock()
        age_cut = now - max_age_seconds if max_age_seconds > 0 else -math.inf
        keep = max_rows if max_rows > 0 else -1
        select = (
            "WITH finished AS (SELECT id, finished_at, ROW_NUMBER() OVER"
            " (ORDER BY finished_at DESC, id DESC) AS rn"
            " FROM scheduler_jobs WHERE state IN ('done', 'failed'))"
            " SELECT id FROM finished WHERE (finished_at < ? OR (? >= 0 AND rn > ?))"
            " AND id NOT IN (SELECT depends_on FROM scheduler_jobs"
            "   WHERE state IN ('pending', 'running') AND depends_on IS NOT NULL)"
        )
        params = (age_cut, keep, keep)
        with self._errors("pruning finished jobs"), self._atomic() as conn:
            ids = [
                int(r[0])
                for r in conn.execute(self._sql(f"{select} ORDER BY id LIMIT ?"), (*params, limit))
            ]
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                conn.execute(
                    self._sql(
                        f"DELETE FROM scheduler_jobs WHERE id IN ({','.join('?' * len(chunk))})"
                    ),
                    chunk,
                )
            row = conn.execute(
                self._sql(f"SELECT COUNT(*) FROM ({select}) AS left_over"), params
            ).fetchone()
        return len(ids), int(row[0]) if row else 0

    def _cascade(self, conn: Conn, now: float) -> None:
        # Loop: failing one dependent may fail the jobs that depend on it in turn.
        while True:
            cur = conn.execute(
                self._sql(
                    "UPDATE scheduler_jobs SET state = 'failed', finished_at = ?,"
                    " reason = 'dependency ' || depends_on || ' failed', lease_until = NULL"
                    " WHERE state = 'pending' AND depends_on IN"
                    " (SELECT id FROM scheduler_jobs WHERE state = 'failed')"
                ),
                (now,),
            )
            if cur.rowcount <= 0:
                return

    # -- schedules -------------------------------------------------------------------------

    def watermarks(self) -> dict[str, float]:
        """The last due time each schedule was fired for."""
        with self._errors("reading schedule watermarks"), self._reading() as conn:
            rows = conn.execute("SELECT schedule, last_due FROM scheduler_watermarks").fetchall()
        return {str(s): float(d) for s, d in rows}

    def note_outcome(self, schedule: str, text: str, conn: Conn | None = None) -> None:
        """Record how a schedule's last run ended (in `conn`'s transaction when given)."""
        if conn is None:
            with self._errors("recording a schedule's outcome"), self._atomic() as c:
                self.note_outcome(schedule, text, c)
            return
        conn.execute(
            self._sql(
                "UPDATE scheduler_watermarks SET finished_at = ?, outcome = ? WHERE schedule = ?"
            ),
            (self.clock(), text, schedule),
        )

    # -- reading -------------------------------------------------------------------------

    def _get(self, conn: Conn, job_id: int) -> Job | None:
        row = conn.execute(
            self._sql(f"SELECT {JOB_COLUMNS} FROM scheduler_jobs WHERE id = ?"), (job_id,)
        ).fetchone()
        return job_from_row(row) if row else None

    def get(self, job_id: int) -> Job | None:
        with self._errors("reading a job"), self._reading() as conn:
            return self._get(conn, job_id)

    def jobs(self, *, state: str | None = None, limit: int = 100) -> list[Job]:
        sql = f"SELECT {JOB_COLUMNS} FROM scheduler_jobs"
        params: list[object] = []
        if state is not None:
            sql += " WHERE state = ?"
            params.append(state)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        with self._errors("reading jobs"), self._reading() as conn:
            return [job_from_row(r) for r in conn.execute(self._sql(sql), params)]

    def next_wake(self) -> float | None:
        """When the queue next needs attention: the earliest runnable job, or the earliest lease
        to expire. A job waiting on a live dependency is woken by that dependency instead."""
        with self._errors("reading the queue"), self._reading() as conn:
            row = conn.execute(
                "SELECT (SELECT MIN(j.available_at) FROM scheduler_jobs j"
                " LEFT JOIN scheduler_jobs d ON d.id = j.depends_on"
                " WHERE j.state = 'pending'"
                " AND (j.depends_on IS NULL OR d.id IS NULL OR d.state IN ('done', 'failed'))),"
                " (SELECT MIN(lease_until) FROM scheduler_jobs WHERE state = 'running')"
            ).fetchone()
        times = [float(t) for t in (row or ()) if t is not None]
        return min(times) if times else None

    def counts(self) -> QueueCounts:
        """Rows per state, and per class for the live ones."""
        by_state = {state: 0 for state in (*LIVE, *FINISHED)}
        by_class: dict[str, dict[str, int]] = {}
        with self._errors("reading the queue"), self._reading() as conn:
            rows = conn.execute(
                "SELECT state, job_class, COUNT(*) FROM scheduler_jobs GROUP BY state, job_class"
            ).fetchall()
            oldest_row = conn.execute(
                "SELECT MIN(enqueued_at) FROM scheduler_jobs WHERE state = 'pending'"
            ).fetchone()
        oldest = oldest_row[0] if oldest_row else None
        for state, job_class, n in rows:
            by_state[state] = by_state.get(state, 0) + int(n)
            if state in LIVE:
                by_class.setdefault(job_class, {})[state] = int(n)
        return QueueCounts(
            pending=by_state["pending"],
            running=by_state["running"],
            done=by_state["done"],
            failed=by_state["failed"],
            live_by_class=by_class,
            oldest_pending_age_s=None if oldest is None else round(self.clock() - oldest, 3),
        )


class JobQueue(JobQueueBase[SQLiteEventStore, sqlite3.Connection], SQLiteTables):
    """The `scheduler_jobs` table in SQLite and the only code that changes it. Every write runs
    under SQLite's one writer, so a look and the write that follows it need no row lock."""

    def _enqueue(self, conn: sqlite3.Connection, spec: JobSpec) -> int:
        now = self.clock()
        live = conn.execute(
            "SELECT id FROM scheduler_jobs WHERE key = ? AND state IN ('pending', 'running')",
            (spec.unit,),
        ).fetchone()
        if live is not None:
            return int(live[0])
        cur = conn.execute(
            "INSERT INTO scheduler_jobs(kind, job_class, key, payload, max_attempts, depends_on,"
            " available_at, enqueued_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            self._insert_values(spec, now),
        )
        job_id = cur.lastrowid
        assert job_id is not None
        if spec.depends_on is not None:
            self._cascade(conn, now)
        return int(job_id)

    def claim(self, job_class: str | None = None, *, skip: Collection[int] = ()) -> Job | None:
        now = self.clock()
        where = (
            "j.state = 'pending' AND j.available_at <= ?"
            " AND (j.depends_on IS NULL OR d.id IS NULL OR d.state = 'done')"
        )
        params: list[float | str | int] = [now]
        if job_class is not None:
            where += " AND j.job_class = ?"
            params.append(job_class)
        if skip:
            where += f" AND j.id NOT IN ({','.join('?' * len(skip))})"
            params.extend(skip)
        select = (
            "SELECT j.id FROM scheduler_jobs j LEFT JOIN scheduler_jobs d ON d.id = j.depends_on"
            f" WHERE {where} ORDER BY j.available_at, j.id LIMIT 1"
        )
        # Look before taking the write lock: most claims in a drain find nothing.
        with sqlite_errors("claiming a job"), self.store.reading() as conn:
            if conn.execute(select, params).fetchone() is None:
                return None
        with sqlite_errors("claiming a job"), self.store.atomic() as conn:
            row = conn.execute(select, params).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE scheduler_jobs SET state = 'running', attempts = attempts + 1,"
                " lease_until = ?, lease_owner = ?, started_at = ? WHERE id = ?",
                (now + self.lease_seconds, self.owner, now, row[0]),
            )
            return self._get(conn, int(row[0]))

    def reclaim(self) -> list[Job]:
        now = self.clock()
        with sqlite_errors("reclaiming abandoned jobs"), self.store.reading() as conn:
            expired = conn.execute(
                "SELECT 1 FROM scheduler_jobs WHERE state = 'running' AND lease_until < ? LIMIT 1",
                (now,),
            ).fetchone()
        if expired is None:
            return []
        with sqlite_errors("reclaiming abandoned jobs"), self.store.atomic() as conn:
            ids = [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM scheduler_jobs WHERE state = 'running' AND lease_until < ?",
                    (now,),
                )
            ]
            if not ids:
                return []
            conn.execute(
                f"{self._REARM} WHERE id IN ({','.join('?' * len(ids))})", (now, now, *ids)
            )
            self._cascade(conn, now)
            return [j for i in ids if (j := self._get(conn, i)) is not None]

    def fire(self, schedule: str, cron: str, due: float, spec: JobSpec) -> int | None:
        now = self.clock()
        with sqlite_errors(f"scheduling {schedule}"), self.store.atomic() as conn:
            row = conn.execute(
                "SELECT last_due FROM scheduler_watermarks WHERE schedule = ?", (schedule,)
            ).fetchone()
            if row is not None and float(row[0]) >= due:
                return None
            job_id = self._enqueue(conn, spec)
            conn.execute(
                "INSERT INTO scheduler_watermarks(schedule, cron, last_due, enqueued_at, job_id)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(schedule) DO UPDATE SET"
                " cron = excluded.cron, last_due = excluded.last_due,"
                " enqueued_at = excluded.enqueued_at, job_id = excluded.job_id",
                (schedule, cron, due, now, job_id),
            )
            return job_id
