"""The scheduler's job queue and schedule watermarks on PostgreSQL, shared by every host that
opens the same database.

The same invariants as `queue.py` (tests/test_queue_contract.py runs both), made to hold across
hosts instead of under SQLite's one writer:
- A claim is `FOR UPDATE SKIP LOCKED`: concurrent claimers on any number of hosts each take a
  different job, and none waits for another's claim to commit.
- At most one live job per key is the partial unique index itself: an enqueue is `INSERT ...
  ON CONFLICT DO NOTHING`, so two hosts enqueueing the same key at once store one job.
- A schedule fires once per due time across the fleet: its watermark moves by one conditional
  upsert (`ON CONFLICT ... DO UPDATE ... WHERE last_due < excluded.last_due`), which PostgreSQL
  serialises on the row; only the transaction that moved it enqueues the run.

Sweep cursors (`scheduler_sweeps`) and the consolidation fold's open units
(`consolidation_units`) are here too; `sweeps.SweepCursors` and `consolidation.ConversationUnits`
read and write them with the same SQL on both stores (over `PostgresTables`). A batch of the
consolidation fold is written once across hosts by its position row, held in the fold's
transaction (`Projector`, `held_position`: a batch another host folded meanwhile is given up,
`FoldMoved`); before that row the fold takes a transaction-scoped advisory lock named after it
(`PostgresSchedulerTables.lock`), the lock hosts before 696f0a0 relied on alone, so a fleet
mid-upgrade takes both in one order. The reaper takes such a lock too: one host at a time reaps.
`PostgresSchedulerTables` hands the `Scheduler` these parts (`tables.open_tables`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager

from ..chronicle.postgres import PG_CHRONICLE_MIGRATIONS, PostgresChronicleStore
from ..errors import StoreBusy
from ..log.port import LogStore
from ..log.postgres import (
    Connection,
    PostgresEventStore,
    PostgresMigration,
    PostgresTables,
    postgres_errors,
)
from ..log.projector import FoldedStore
from ..log.tables import Statements
from .queue import JOB_COLUMNS, Job, JobQueueBase, JobSpec, job_from_row
from .tables import SchedulerTables

__all__ = ["PostgresJobQueue", "PG_SCHEDULER_MIGRATIONS", "PostgresSchedulerTables"]

_QUEUE = (
    """
    CREATE TABLE scheduler_jobs (
        id           BIGSERIAL PRIMARY KEY,
        kind         TEXT    NOT NULL,
        job_class    TEXT    NOT NULL,
        key          TEXT    NOT NULL,
        payload      TEXT    NOT NULL DEFAULT '{}',
        state        TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'running', 'done', 'failed')),
        attempts     INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        depends_on   BIGINT,
        available_at DOUBLE PRECISION NOT NULL,
        enqueued_at  DOUBLE PRECISION NOT NULL,
        lease_until  DOUBLE PRECISION,
        lease_owner  TEXT,
        started_at   DOUBLE PRECISION,
        finished_at  DOUBLE PRECISION,
        reason       TEXT,
        result       TEXT
    )
    """,
    "CREATE UNIQUE INDEX scheduler_jobs_live_key ON scheduler_jobs(key)"
    " WHERE state IN ('pending', 'running')",
    "CREATE INDEX scheduler_jobs_runnable ON scheduler_jobs(state, job_class, available_at)",
    "CREATE INDEX scheduler_jobs_by_dependency ON scheduler_jobs(depends_on)"
    " WHERE depends_on IS NOT NULL",
    "CREATE INDEX scheduler_jobs_finished ON scheduler_jobs(finished_at)"
    " WHERE state IN ('done', 'failed')",
    """
    CREATE TABLE scheduler_watermarks (
        schedule    TEXT PRIMARY KEY,
        cron        TEXT NOT NULL,
        last_due    DOUBLE PRECISION NOT NULL,
        enqueued_at DOUBLE PRECISION NOT NULL,
        job_id      BIGINT,
        finished_at DOUBLE PRECISION,
        outcome     TEXT
    )
    """,
)


def _m001_queue(conn: Connection) -> None:
    for statement in _QUEUE:
        conn.execute(statement)


_SWEEPS = """
    CREATE TABLE scheduler_sweeps (
        name       TEXT PRIMARY KEY,
        cursor     BIGINT  NOT NULL DEFAULT 0,
        passes     INTEGER NOT NULL DEFAULT 0,
        report     TEXT    NOT NULL DEFAULT '{}',
        updated_at DOUBLE PRECISION
    )
"""


def _m002_sweeps(conn: Connection) -> None:
    conn.execute(_SWEEPS)  # read and written by `sweeps.SweepCursors`, one SQL for both stores


_UNITS = (
    """
    CREATE TABLE consolidation_units (
        chronicle      TEXT PRIMARY KEY,
        session        TEXT    NOT NULL,
        open_from      BIGINT,
        last_seq       BIGINT  NOT NULL,
        last_at        DOUBLE PRECISION NOT NULL,
        turns          INTEGER NOT NULL DEFAULT 0,
        closed_through BIGINT  NOT NULL DEFAULT 0
    )
    """,
    "CREATE INDEX consolidation_units_open ON consolidation_units(last_at)"
    " WHERE open_from IS NOT NULL",
)


def _m003_units(conn: Connection) -> None:
    for statement in _UNITS:  # read and written by `consolidation.ConversationUnits`
        conn.execute(statement)


PG_SCHEDULER_MIGRATIONS: tuple[PostgresMigration, ...] = (
    PostgresMigration("scheduler.m001_queue", _m001_queue),
    PostgresMigration("scheduler.m002_sweeps", _m002_sweeps),
    PostgresMigration("scheduler.m003_consolidation_units", _m003_units),
)

# The first key of the scheduler's advisory locks (the second is the hash of the lock's name);
# other rooms' locks use other first keys.
_LOCK_CLASS = 0x5C4ED


# The one runnable job to lease: skip rows another claimer holds rather than wait for them.
_RUNNABLE = (
    "SELECT j.id FROM scheduler_jobs j LEFT JOIN scheduler_jobs d ON d.id = j.depends_on"
    " WHERE j.state = 'pending' AND j.available_at <= %s"
    " AND (j.depends_on IS NULL OR d.id IS NULL OR d.state = 'done'){more}"
    " ORDER BY j.available_at, j.id LIMIT 1 FOR UPDATE OF j SKIP LOCKED"
)


class PostgresJobQueue(JobQueueBase[PostgresEventStore, Connection], PostgresTables):
    """`scheduler_jobs` and `scheduler_watermarks` in PostgreSQL, and the only code that changes
    them there (its store migrated with `PG_SCHEDULER_MIGRATIONS`). The same methods as
    `JobQueue`; the rules they share are `JobQueueBase`'s."""

    _LOCK_ROW = " FOR UPDATE"

    def _enqueue(self, conn: Connection, spec: JobSpec) -> int:
        now = self.clock()
        # The live job of a key can finish between a refused insert and the look-up; then the
        # insert is tried again (bounded: each round some live job of the key came and went).
        for _ in range(8):
            row = conn.execute(
                "INSERT INTO scheduler_jobs(kind, job_class, key, payload, max_attempts,"
                " depends_on, available_at, enqueued_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (key) WHERE state IN ('pending', 'running') DO NOTHING RETURNING id",
                self._insert_values(spec, now),
            ).fetchone()
            if row is not None:
                if spec.depends_on is not None:
                    self._cascade(conn, now)
                return int(row[0])
            live = conn.execute(
                "SELECT id FROM scheduler_jobs WHERE key = %s AND state IN ('pending', 'running')",
                (spec.unit,),
            ).fetchone()
            if live is not None:
                return int(live[0])
        raise StoreBusy(f"the queue's key {spec.unit!r} kept changing hands; enqueue it later")

    def claim(self, job_class: str | None = None, *, skip: Collection[int] = ()) -> Job | None:
        now = self.clock()
        more = ""
        params: list[object] = [now]
        if job_class is not None:
            more += " AND j.job_class = %s"
            params.append(job_class)
        if skip:
            more += " AND NOT (j.id = ANY(%s))"
            params.append(list(skip))
        with postgres_errors("claiming a job"), self.store.atomic() as conn:
            row = conn.execute(
                "UPDATE scheduler_jobs SET state = 'running', attempts = attempts + 1,"
                " lease_until = %s, lease_owner = %s, started_at = %s"
                f" WHERE id = ({_RUNNABLE.format(more=more)}) RETURNING {JOB_COLUMNS}",
                (now + self.lease_seconds, self.owner, now, *params),
            ).fetchone()
        return job_from_row(row) if row else None

    def reclaim(self) -> list[Job]:
        now = self.clock()
        with postgres_errors("reclaiming abandoned jobs"), self.store.atomic() as conn:
            rows = conn.execute(
                self._sql(self._REARM)
                + " WHERE id IN (SELECT id FROM scheduler_jobs WHERE state = 'running'"
                " AND lease_until < %s FOR UPDATE SKIP LOCKED) RETURNING id",
                (now, now, now),
            ).fetchall()
            if not rows:
                return []
            self._cascade(conn, now)
            return [j for i in sorted(int(r[0]) for r in rows) if (j := self._get(conn, i))]

    def fire(self, schedule: str, cron: str, due: float, spec: JobSpec) -> int | None:
        now = self.clock()
        with postgres_errors(f"scheduling {schedule}"), self.store.atomic() as conn:
            moved = conn.execute(
                "INSERT INTO scheduler_watermarks(schedule, cron, last_due, enqueued_at)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (schedule) DO UPDATE SET"
                " cron = excluded.cron, last_due = excluded.last_due,"
                " enqueued_at = excluded.enqueued_at"
                " WHERE scheduler_watermarks.last_due < excluded.last_due RETURNING schedule",
                (schedule, cron, due, now),
            ).fetchone()
            if moved is None:
                return None
            job_id = self._enqueue(conn, spec)
            conn.execute(
                "UPDATE scheduler_watermarks SET job_id = %s WHERE schedule = %s",
                (job_id, schedule),
            )
            return job_id


class PostgresSchedulerTables(SchedulerTables[PostgresEventStore, Connection]):
    """The scheduler's parts in a PostgreSQL database, migrated (`tables.open_tables`)."""

    def __init__(self, store: PostgresEventStore) -> None:
        store.migrate((*PG_CHRONICLE_MIGRATIONS, *PG_SCHEDULER_MIGRATIONS))
        super().__init__(store, PostgresTables(store), PostgresChronicleStore(store))

    @property
    def log(self) -> LogStore:
        return self.store

    @property
    def folded(self) -> FoldedStore[Connection]:
        return _FleetFolded(self)

    def queue(
        self, *, clock: Callable[[], float], lease_seconds: float, max_attempts: int
    ) -> PostgresJobQueue:
        return PostgresJobQueue(
            self.store, clock=clock, lease_seconds=lease_seconds, max_attempts=max_attempts
        )

    def lock(self, conn: Statements, name: str) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (_LOCK_CLASS, name))


class _FleetFolded:
    """The store as the scheduler's folds are projected through it, a fold's position row held
    after the fold's fleet-wide lock (`lock`): hosts before 696f0a0 took that lock first and
    wrote the row at commit, so a fleet mid-upgrade keeps one lock order and takes turns rather
    than deadlock."""

    def __init__(self, parts: PostgresSchedulerTables) -> None:
        self._parts = parts
        self._store = parts.store

    def atomic(self) -> AbstractContextManager[Connection]:
        return self._store.atomic()

    def errors(self, what: str) -> AbstractContextManager[None]:
        return self._store.errors(what)

    def position(self, fold: str) -> int:
        return self._store.position(fold)

    def last_seq(self) -> int:
        return self._store.last_seq()

    def held_position(self, conn: Connection, fold: str, /) -> int:
        self._parts.lock(self._parts.tables.statements(conn), fold)
        return self._store.held_position(conn, fold)

    def set_position(self, conn: Connection, fold: str, position: int, /) -> None:
        self._store.set_position(conn, fold, position)
