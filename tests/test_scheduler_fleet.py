"""Several schedulers over one database (hosts sharing a PostgreSQL server, or processes sharing a
SQLite file): each due consolidation runs once, and each unit becomes one section, once.

Every host here is a core of its own (its own store and connections) over the same database,
ticking from its own thread on one shared clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_scheduler_support import (
    START,
    FakeClock,
    chronicle_of,
    message,
    open_core,
    places,
    scheduler,
    summarise,
)

from chronicle_engine.chronicle.sections import Consolidation
from chronicle_engine.scheduler.consolidation import FOLD_NAME, Consolidator
from chronicle_engine.scheduler.units import UnitRules

EVERY_MINUTE = {
    "maintenance": {"schedules": {"consolidate": "* * * * *"}},
    "consolidation": {"unit_turns": 2},
}


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


def _sections(core, names: list[str]) -> dict[str, list[tuple[str, int, int, str | None]]]:
    out = {}
    for name in names:
        chronicle = core.chronicle(name)
        out[name] = sorted(
            (s.anchor.section_id, s.anchor.from_seq, s.anchor.to_seq, s.anchor.supersedes)
            for s in chronicle.export()
        )
    return out


@pytest.mark.parametrize("background", [False, True], ids=["on-the-hook", "in-the-background"])
def test_two_schedulers_run_each_due_consolidation_once(where, background: bool) -> None:
    """`background`: each host's steps run on its scheduler's own thread, the two racing."""
    hosts = [open_core(where, EVERY_MINUTE) for _ in range(2)]
    clock = FakeClock()
    scheds = [scheduler(core, clock, background=background) for core in hosts]
    sessions = [f"h{h}-s{i}" for h in range(2) for i in range(2)]
    rounds = 6
    barrier = threading.Barrier(3, timeout=60)  # two hosts and the clock
    errors: list[BaseException] = []

    def host(h: int) -> None:
        core, sched = hosts[h], scheds[h]
        try:
            for r in range(rounds):
                barrier.wait()  # the main thread moved the clock: both hosts see the new due time
                at = clock() + h
                for s in sessions[2 * h : 2 * h + 2]:
                    core.store.append(
                        [
                            message(core, s, "user", f"{s} round {r} question", at),
                            message(core, s, "assistant", f"{s} round {r} answer", at + 1),
                        ]
                    )
                for _ in range(4):  # hook calls race for the same due time
                    sched.tick("sync_turn")
                assert sched.wait_background(30)  # (at once when the hook ran the step)
                barrier.wait()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=host, args=(h,)) for h in range(2)]
    for t in threads:
        t.start()
    for _ in range(rounds):
        clock.advance(60)
        barrier.wait()
        barrier.wait()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    clock.advance(60)  # one more due time, after every host's last message
    for sched in scheds:
        sched.tick("sync_turn")
        assert sched.wait_background(30)
        sched.run_pending()

    jobs = [j for j in scheds[0].queue.jobs(limit=1000) if j.kind == "consolidate"]
    assert {j.state for j in jobs} == {"done"}
    fired = sorted(j.payload["due"] for j in jobs)
    # One job per due time across both hosts (a minute's schedule, one due time a round), each
    # run once: none was claimed twice or retried.
    assert fired == sorted(set(fired)) and len(fired) == rounds + 1
    assert all(j.attempts == 1 for j in jobs)
    # No job ran outside the hooks' steps (run_pending found none).
    assert sum(s.jobs_run for s in scheds) == len(jobs)

    # Every closed unit became one section, once: no superseded or doubled sections, no overlap,
    # and the fold read the whole log.
    names = sorted({chronicle_of(hosts[0], s) for s in sessions})
    seen = _sections(hosts[0], names)
    assert seen == _sections(hosts[1], names)
    for name, sections in seen.items():
        assert sections, f"{name} got no section"
        assert all(sup is None for *_, sup in sections)
        ranges = sorted((lo, hi) for _, lo, hi, _ in sections)
        assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    position, last = scheds[0].consolidator.backlog()  # type: ignore[union-attr]
    assert position == last
    for core in hosts:
        core.shutdown()


def test_two_runners_folding_one_batch_at_once_write_it_once(where) -> None:
    """Past the queue (a lease that ran out under a slow summary, or two `run`s by hand): both
    draw the same batch, one writes it, the other gives it up and writes nothing."""
    hosts = [open_core(where) for _ in range(2)]
    hosts[0].store.append(
        [
            message(hosts[0], "a", "user", "plan the trip", START),
            message(hosts[0], "a", "assistant", "Lisbon", START + 1),
            message(hosts[0], "a", "user", "book it", START + 2),
        ]
    )
    both_drew = threading.Barrier(2, timeout=30)
    draws = [0, 0]

    def summariser(h: int):
        def draw(events) -> Consolidation:
            draws[h] += 1
            both_drew.wait()  # neither writes before both have drawn from the same position
            return summarise(events)

        return draw

    runners = [
        Consolidator(
            core.store,
            core.reader,
            core.types,
            conversations=core.sessions,
            summarize=summariser(h),
            rules=UnitRules(unit_turns=1),
        )
        for h, core in enumerate(hosts)
    ]
    reports: list[object] = [None, None]

    def run(h: int) -> None:
        reports[h] = runners[h].run(budget=100)

    threads = [threading.Thread(target=run, args=(h,)) for h in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert draws == [1, 1]
    processed = sorted(r.processed for r in reports)  # type: ignore[attr-defined]
    assert processed == [0, 3]
    gave_up = [r for r in reports if r.processed == 0]  # type: ignore[attr-defined]
    assert gave_up[0].detail == {"folded_elsewhere": True}  # type: ignore[attr-defined]
    name = chronicle_of(hosts[0], "a")
    assert _sections(hosts[0], [name]) == {name: [("1-2", 1, 2, None)]}
    assert hosts[1].store.position(FOLD_NAME) == 3
    assert hosts[1].chronicle(name).current()[0].prose == "plan the trip | Lisbon"
    for core in hosts:
        core.shutdown()
