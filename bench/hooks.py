"""What a hook call costs the host: with nothing due, and with one job due.

    python bench/hooks.py [--calls 200000] [--due-calls 300]

Every figure is per `Scheduler.tick(hook)` call, on a WAL file in a temporary directory:
- idle: all default schedules have run, nothing is due (target: median under 0.1 ms);
- one job due, enqueue only: a non-draining hook (on_turn_start) finds one schedule due;
- one job due, enqueue + run: a draining hook (sync_turn) enqueues the integrity check and runs it;
- consolidation: a draining hook enqueues consolidation and folds one closed unit of ten messages
  into a section, drawn by the shipped writer (the context engine's extractive summariser).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from chronicle_engine.capture.events import register_capture_events
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore

OFF = {
    name: ""
    for name in (
        "consolidate",
        "reap",
        "fts_optimize",
        "belief_sweep",
        "queue_retention",
        "wal_checkpoint",
        "integrity",
    )
}


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def per_call_ms(
    calls: int, call: Callable[[], None], before: Callable[[], None] | None = None
) -> list[float]:
    out: list[float] = []
    for _ in range(calls):
        if before is not None:
            before()
        start = time.perf_counter_ns()
        call()
        out.append((time.perf_counter_ns() - start) / 1e6)
    return out


def show(label: str, samples: list[float]) -> None:
    samples = sorted(samples)
    p = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]  # noqa: E731
    print(
        f"{label:<44} n={len(samples):>7}  median {statistics.median(samples):8.4f} ms"
        f"  p99 {p(0.99):8.4f} ms  max {samples[-1]:8.3f} ms"
    )


def core_at(path: Path, schedules: dict[str, str]) -> ChronicleCore:
    core = ChronicleCore(path, Config({"maintenance": {"schedules": {**OFF, **schedules}}}))
    register_capture_events(core.types)
    return core


def bench_idle(tmp: Path, calls: int) -> None:
    core = ChronicleCore(tmp / "idle.db", Config({}))
    register_capture_events(core.types)
    sched = core.new_scheduler()
    for _ in range(20):  # every default schedule runs once (it never ran), then nothing is due
        sched.tick("sync_turn")
    for hook in ("on_turn_start", "sync_turn"):
        show(f"idle tick({hook!r})", per_call_ms(calls, lambda h=hook: sched.tick(h)))
    core.shutdown()


def bench_one_due(tmp: Path, calls: int) -> None:
    start = datetime(2025, 1, 6, tzinfo=UTC).timestamp()
    for hook, label in (
        ("on_turn_start", "one due, enqueue only (on_turn_start)"),
        ("sync_turn", "one due, enqueue + run integrity (sync_turn)"),
    ):
        core = core_at(tmp / f"due-{hook}.db", {"integrity": "* * * * *"})
        clock = Clock(start)
        sched = core.new_scheduler(clock=clock)
        sched.tick(hook)

        def next_minute(c: Clock = clock) -> None:
            c.now += 60

        show(label, per_call_ms(calls, lambda s=sched, h=hook: s.tick(h), next_minute))
        core.shutdown()


def bench_consolidation(tmp: Path, calls: int) -> None:
    start = datetime(2025, 1, 6, tzinfo=UTC).timestamp()
    core = ChronicleCore(
        tmp / "consolidate.db",
        Config(
            {
                "maintenance": {"schedules": {**OFF, "consolidate": "* * * * *"}},
                "consolidation": {"unit_turns": 5},
            }
        ),
    )
    register_capture_events(core.types)
    clock = Clock(start)
    sched = core.new_scheduler(clock=clock)
    sched.tick("sync_turn")
    live: list[dict] = []

    def ten_more_messages() -> None:
        # Through capture, as Hermes' sync_turn would (untimed): the session tree is current.
        clock.now += 60
        for _ in range(5):
            n = len(live) // 2 + 1
            live.append({"role": "user", "content": f"please fix item {n} in /srv/app/{n}.py"})
            live.append({"role": "assistant", "content": f"fixed item {n}: renamed f{n} to g{n}"})
        core.capture.capture_messages(
            "bench", live, created_at=datetime.fromtimestamp(clock.now, UTC).isoformat()
        )

    show(
        "one due, consolidate a 10-message unit",
        per_call_ms(calls, lambda: sched.tick("sync_turn"), ten_more_messages),
    )
    sections = len(core.chronicle(core.sessions.chronicle_name("bench")))
    print(f"{'':<44} sections written: {sections}")
    sample = core.chronicle(core.sessions.chronicle_name("bench")).current()[0]
    print(f"{'':<44} writer: {sample.meta.get('writer')}, {len(sample.prose)} chars of prose")
    core.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200_000, help="idle calls per hook")
    parser.add_argument("--due-calls", type=int, default=300, help="calls with one job due")
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, sqlite WAL file, per tick() call")
    with tempfile.TemporaryDirectory() as tmp:
        bench_idle(Path(tmp), args.calls)
        bench_one_due(Path(tmp), args.due_calls)
        bench_consolidation(Path(tmp), args.due_calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
