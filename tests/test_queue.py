"""The durable job queue: leases, attempts with reasons, dependencies, retention, fair shares."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import Target, own_schema
from test_scheduler_support import (
    FakeClock,
    location,
    open_core,
    places,
    scheduler,
)

from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.postgres import PostgresEventStore, PostgresTables
from chronicle_engine.log.store import SQLiteEventStore
from chronicle_engine.log.tables import SQLiteTables
from chronicle_engine.scheduler.postgres import PG_SCHEDULER_MIGRATIONS, PostgresJobQueue
from chronicle_engine.scheduler.queue import JobQueue, JobSpec, allocate
from chronicle_engine.scheduler.schema import SCHEDULER_MIGRATIONS
from chronicle_engine.scheduler.sweeps import SweepReport


@pytest.fixture(params=["memory", "file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    """A whole core's place: SQLite in memory and in a file, and PostgreSQL (a schema of its
    own on the session's server)."""
    with places(request, tmp_path) as place:
        yield place


def _queue(
    store: SQLiteEventStore | PostgresEventStore, clock: FakeClock, **kwargs
) -> JobQueue | PostgresJobQueue:
    if isinstance(store, PostgresEventStore):
        store.migrate(PG_SCHEDULER_MIGRATIONS)
        return PostgresJobQueue(store, clock=clock, **kwargs)
    store.migrate(SCHEDULER_MIGRATIONS)
    return JobQueue(store, clock=clock, **kwargs)


@pytest.fixture(params=["memory", "file", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    """The queue's store: SQLite in memory and in a file, and PostgreSQL (a schema of its own on
    the session's server): the queue's tests are its contract, run against each."""
    if request.param == "postgres":
        with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
            s = PostgresEventStore(conninfo)
            yield s
            s.close()
        return
    s = SQLiteEventStore(location(request.param, tmp_path))
    yield s
    s.close()


def test_a_job_that_raises_is_retried_up_to_the_limit_then_failed_with_its_reason(
    where, caplog: pytest.LogCaptureFixture
) -> None:
    core = open_core(where, {"queue": {"max_attempts": 3}})
    clock = FakeClock()
    sched = scheduler(core, clock)
    calls: list[float] = []

    def explode(ctx):
        calls.append(ctx.now)
        raise ValueError(f"disk full on call {len(calls)}")

    sched.handle("explode", explode)
    sched.queue.enqueue(JobSpec("explode", "maintenance"))
    caplog.set_level(logging.WARNING, logger="chronicle_engine.scheduler")
    for _ in range(40):  # hooks every 10 s; backoff spaces the attempts out
        sched.tick("sync_turn")
        clock.advance(10)
    job = sched.queue.jobs()[0]
    assert len(calls) == 3
    assert calls[1] - calls[0] >= 5 and calls[2] - calls[1] >= 10  # backed off, not hammered
    assert job.state == "failed" and job.attempts == 3
    assert job.reason == "ValueError: disk full on call 3 (gave up after 3 of 3 attempts)"
    failed = [e for e in core.store.read() if e.envelope.type == "JobFailed"]
    assert len(failed) == 1
    assert failed[0].payload["reason"] == job.reason and failed[0].payload["attempts"] == 3
    retries = [r for r in caplog.records if "will retry" in r.getMessage()]
    assert len(retries) == 2
    status = sched.maintenance_status()
    assert status["queue"]["failed"] == 1
    assert status["queue"]["recent_failures"][0]["reason"] == job.reason
    core.shutdown()


def test_a_lease_expiry_re_arms_an_abandoned_job(target: Target) -> None:
    clock = FakeClock()
    dead_store, live_store = target.open(), target.open()
    dead = _queue(dead_store, clock, lease_seconds=60, owner="dead-process")
    live = _queue(live_store, clock, lease_seconds=60, owner="live-process")
    job_id = dead.enqueue(JobSpec("sweep", "maintenance"))
    claimed = dead.claim()
    assert claimed is not None and claimed.id == job_id and claimed.attempts == 1
    # The claiming process dies here. Within the lease nobody else may take the job.
    clock.advance(59)
    assert live.reclaim() == [] and live.claim() is None
    clock.advance(2)
    rearmed = live.reclaim()
    assert [(j.id, j.state) for j in rearmed] == [(job_id, "pending")]
    assert "lease expired" in (rearmed[0].reason or "") and "dead-process" in (
        rearmed[0].reason or ""
    )
    again = live.claim()
    assert again is not None and again.id == job_id and again.attempts == 2
    assert live.complete(again, {"processed": 1})
    # The dead claim's late answer is refused: the job is no longer its to finish.
    assert not dead.complete(claimed, {"processed": 99})
    assert dead.fail(claimed, "too late") is None
    final = live.get(job_id)
    assert final is not None and final.state == "done" and final.result == {"processed": 1}
    dead_store.close()
    live_store.close()


def test_an_abandoned_job_out_of_attempts_is_failed_with_the_reason(store) -> None:
    clock = FakeClock()
    queue = _queue(store, clock, lease_seconds=30, max_attempts=2)
    job_id = queue.enqueue(JobSpec("crashy", "maintenance"))
    for _ in range(2):
        assert queue.claim() is not None
        clock.advance(31)
        queue.reclaim()
    job = queue.get(job_id)
    assert job is not None and job.state == "failed"
    assert "lease expired" in (job.reason or "") and "2 of 2 attempts" in (job.reason or "")


def test_a_live_key_is_enqueued_once(store) -> None:
    queue = _queue(store, FakeClock())
    first = queue.enqueue(JobSpec("integrity", "maintenance"))
    assert queue.enqueue(JobSpec("integrity", "maintenance")) == first
    job = queue.claim()
    assert job is not None
    assert queue.enqueue(JobSpec("integrity", "maintenance")) == first  # running is live too
    queue.complete(job)
    assert queue.enqueue(JobSpec("integrity", "maintenance")) != first


def test_a_dependent_waits_for_its_dependency_and_fails_with_it(store) -> None:
    clock = FakeClock()
    queue = _queue(store, clock, max_attempts=1)
    base = queue.enqueue(JobSpec("reap", "reaping"))
    child = queue.enqueue(JobSpec("consolidate", "consolidation", depends_on=base))
    grandchild = queue.enqueue(JobSpec("integrity", "maintenance", depends_on=child))
    assert queue.claim("consolidation") is None  # its dependency has not run
    claimed = queue.claim()
    assert claimed is not None and claimed.id == base
    assert queue.claim() is None
    queue.fail(claimed, "RuntimeError: boom")
    assert queue.get(child).state == "failed"  # type: ignore[union-attr]
    assert queue.get(child).reason == f"dependency {base} failed"  # type: ignore[union-attr]
    assert queue.get(grandchild).reason == f"dependency {child} failed"  # type: ignore[union-attr]
    ok_base = queue.enqueue(JobSpec("reap", "reaping", key="reap-2"))
    ok_child = queue.enqueue(JobSpec("consolidate", "consolidation", key="c2", depends_on=ok_base))
    first = queue.claim()
    assert first is not None and first.id == ok_base
    queue.complete(first)
    second = queue.claim()
    assert second is not None and second.id == ok_child


def test_retention_bounds_age_and_count(store) -> None:
    clock = FakeClock()
    queue = _queue(store, clock)
    for i in range(30):
        queue.enqueue(JobSpec("sweep", "maintenance", key=f"k{i}"))
        job = queue.claim()
        assert job is not None
        queue.complete(job)
        clock.advance(3600)
    pending = queue.enqueue(JobSpec("sweep", "maintenance", key="still-waiting"))
    pruned, remaining = queue.prune(max_age_seconds=10 * 3600, max_rows=0, limit=5)
    assert (pruned, remaining) == (5, 15)  # 20 rows are older than ten hours
    pruned, remaining = queue.prune(max_age_seconds=10 * 3600, max_rows=0, limit=100)
    assert (pruned, remaining) == (15, 0)
    pruned, _ = queue.prune(max_age_seconds=0, max_rows=4, limit=100)
    assert pruned == 6
    assert queue.counts()["done"] == 4 and queue.get(pending) is not None


_state = st.sampled_from(["pending", "running", "done", "failed"])


@pytest.mark.parametrize("kind", ["memory", "postgres"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(_state, st.integers(0, 40), st.one_of(st.none(), st.integers(0, 29))),
        min_size=1,
        max_size=30,
    ),
    max_age_hours=st.integers(0, 40),
    max_rows=st.integers(0, 10),
    limit=st.integers(1, 50),
)
def test_retention_never_prunes_a_live_row_or_a_live_jobs_dependency(
    kind, request, rows, max_age_hours, max_rows, limit
) -> None:
    with contextlib.ExitStack() as stack:
        if kind == "postgres":
            cluster = request.getfixturevalue("postgres_cluster")
            store: SQLiteEventStore | PostgresEventStore = PostgresEventStore(
                stack.enter_context(own_schema(cluster))
            )
        else:
            store = SQLiteEventStore(":memory:")
        stack.callback(store.close)
        _retention_law(store, rows, max_age_hours, max_rows, limit)


def _retention_law(
    store: SQLiteEventStore | PostgresEventStore,
    rows: list[tuple[str, int, int | None]],
    max_age_hours: int,
    max_rows: int,
    limit: int,
) -> None:
    clock = FakeClock()
    queue = _queue(store, clock)
    tables = SQLiteTables(store) if isinstance(store, SQLiteEventStore) else PostgresTables(store)
    with tables.writing("writing jobs") as conn:
        for i, (state, age_hours, dep) in enumerate(rows):
            finished = clock() - age_hours * 3600 if state in ("done", "failed") else None
            conn.execute(
                "INSERT INTO scheduler_jobs(id, kind, job_class, key, state, max_attempts,"
                " depends_on, available_at, enqueued_at, finished_at)"
                " VALUES (?, 'k', 'maintenance', ?, ?, 3, ?, 0, 0, ?)",
                (i + 1, f"key{i}", state, None if dep is None else dep + 1, finished),
            )
    with tables.reading("reading jobs") as conn:
        live = {
            r[0]
            for r in conn.execute(
                "SELECT id FROM scheduler_jobs WHERE state IN ('pending','running')"
            )
        }
        needed = {
            r[0]
            for r in conn.execute(
                "SELECT depends_on FROM scheduler_jobs WHERE state IN ('pending','running')"
                " AND depends_on IS NOT NULL"
            )
        }
    pruned, remaining = queue.prune(
        max_age_seconds=max_age_hours * 3600, max_rows=max_rows, limit=limit
    )
    with tables.reading("reading jobs") as conn:
        left = {r[0] for r in conn.execute("SELECT id FROM scheduler_jobs")}
    assert live <= left
    assert {n for n in needed if n <= len(rows)} <= left
    assert len(rows) - len(left) == pruned <= limit
    if pruned < limit and (max_age_hours or max_rows):
        assert remaining == 0


@given(
    total=st.integers(0, 64),
    weights=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.one_of(st.just(0.0), st.floats(0.001, 100.0)),
        min_size=1,
    ),
    scale=st.floats(0.01, 100.0),
)
def test_allocate_is_normalised_proportional_and_starves_no_positive_share(
    total, weights, scale
) -> None:
    out = allocate(total, weights)
    positive = [c for c, w in weights.items() if w > 0]
    assert set(out) == set(weights)
    if total == 0 or not positive:
        assert sum(out.values()) == 0
        return
    assert all(out[c] == 0 for c, w in weights.items() if w == 0)
    assert all(out[c] >= 1 for c in positive)
    assert total <= sum(out.values()) <= total + len(positive)
    whole = sum(weights.values())
    for c in positive:
        exact = total * weights[c] / whole
        assert int(exact) <= out[c] <= int(exact) + 1
    scaled = allocate(total, {c: w * scale for c, w in weights.items()})
    assert sum(scaled.values()) == sum(out.values())


def test_allocate_examples() -> None:
    assert allocate(16, {"write": 0.5, "embed": 0.3, "maint": 0.2}) == {
        "write": 8,
        "embed": 5,
        "maint": 3,
    }
    assert allocate(16, {"write": 2, "embed": 1, "maint": 1}) == allocate(
        16, {"write": 0.5, "embed": 0.25, "maint": 0.25}
    )
    assert allocate(4, {"big": 1000, "tiny": 0.001}) == {"big": 4, "tiny": 1}
    assert allocate(4, {"big": 1, "off": 0}) == {"big": 4, "off": 0}


def test_no_class_starves_behind_a_flood(where) -> None:
    core: ChronicleCore = open_core(where, {"maintenance": {"drain_per_hook": 4}})
    sched = scheduler(core, FakeClock())
    ran: list[str] = []

    def note(name):
        def handler(ctx):
            ran.append(name)
            return SweepReport(name)

        return handler

    for kind in ("flood", "lonely", "reaper"):
        sched.handle(kind, note(kind))
    for i in range(50):
        sched.queue.enqueue(JobSpec("flood", "consolidation", key=f"flood-{i}"))
    sched.queue.enqueue(JobSpec("lonely", "maintenance"))
    sched.queue.enqueue(JobSpec("reaper", "reaping"))
    sched.tick("sync_turn")
    assert sorted(ran) == ["flood", "flood", "lonely", "reaper"]
    core.shutdown()
