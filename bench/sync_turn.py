"""sync_turn latency: a 10-message turn (one 4 KB tool result) into a store of 100k events.

    .venv/bin/python bench/sync_turn.py [--events 100000] [--turns 300] [--db PATH] [--no-prefetch]
        [--postgres] [--inline-jobs]

Drives the memory provider exactly as Hermes' "mem-sync" worker does: `sync_turn(user, assistant,
session_id=, messages=<the live list>)` after each turn, with the live list growing by ten
messages a turn and its dicts kept across turns (as Hermes keeps them). Prints p50/p99 in ms for
the provider call, and the same for a list of fresh dicts (what a restarted process sees). The
scheduler's jobs the turns make due run on its background thread, as a host's do by default;
`--inline-jobs` runs them on sync_turn's own thread (`maintenance.background: false`).

Each turn also runs the provider's per-turn memory as Hermes does: `prefetch(<the new user
message>)` before the turn and `queue_prefetch(<it>)` after it. Prints their p50/p95 (wall and
CPU time of the calling thread), and prefetch's p50 over the first and the last fifty turns: the
conversation (all of it in the window, never compacted here) grows by ten messages a turn.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chronicle_engine.capture.events import MessageCaptured, register_capture_events  # noqa: E402
from chronicle_engine.config import load_hermes_config  # noqa: E402
from chronicle_engine.core import ChronicleCore  # noqa: E402
from chronicle_engine.log.store import PendingEvent  # noqa: E402
from provider import ChronicleMemoryProvider  # noqa: E402

WORDS = [
    "the",
    "deploy",
    "script",
    "failed",
    "on",
    "the",
    "staging",
    "host",
    "because",
    "the",
    "config",
    "file",
    "was",
    "missing",
    "a",
    "key",
    "we",
    "fixed",
    "the",
    "path",
    "and",
    "reran",
    "the",
    "migration",
    "then",
    "checked",
    "the",
    "logs",
    "for",
    "errors",
    "and",
    "warnings",
]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def fill(core: ChronicleCore, events: int, rng: random.Random) -> None:
    """Pre-load the log with `events` captured messages across many other sessions."""
    register_capture_events(core.types)
    batch: list[PendingEvent] = []
    for i in range(events):
        text = sentence(rng, 30)
        event = MessageCaptured(
            role="user" if i % 2 == 0 else "assistant",
            message={"role": "user" if i % 2 == 0 else "assistant", "content": text},
            fingerprint=f"{i:024x}",
            speaker="person" if i % 2 == 0 else "assistant",
            text=text,
        )
        batch.append(core.types.pending(event, session=f"old-{i // 200}"))
        if len(batch) == 5000:
            core.store.append(batch)
            batch = []
    if batch:
        core.store.append(batch)


def turn(rng: random.Random, n: int) -> list[dict]:
    call_ids = [f"call_{n}_{k}" for k in range(4)]
    messages: list[dict] = [{"role": "user", "content": f"turn {n}: " + sentence(rng, 20)}]
    for k, call_id in enumerate(call_ids):
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "terminal",
                            "arguments": json.dumps({"cmd": f"ls {k}"}),
                        },
                    }
                ],
            }
        )
        size = 4096 if k == 0 else 200
        output = (sentence(rng, 800) + "\n")[:size]
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    messages.append({"role": "assistant", "content": sentence(rng, 40)})
    assert len(messages) == 10
    return messages


def timed(
    into: tuple[list[float], list[float]], call: Callable[..., object], query: str, session: str
) -> None:
    """Call `call(query, session_id=session)`; record its wall and calling-thread CPU ms."""
    t0, c0 = time.perf_counter(), time.thread_time()
    call(query, session_id=session)
    into[0].append((time.perf_counter() - t0) * 1000)
    into[1].append((time.thread_time() - c0) * 1000)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--db", default=None)
    parser.add_argument(
        "--no-prefetch", action="store_true", help="time sync_turn alone, without per-turn memory"
    )
    parser.add_argument(
        "--inline-jobs",
        action="store_true",
        help="the scheduler's jobs on sync_turn's own thread (maintenance.background: false)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the store on a throwaway PostgreSQL server on 127.0.0.1 (tests/postgres_support.py), "
        "selected by config.yaml's chronicle.store as a host selects it",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        store = ""
        if args.postgres:
            from pg_setup import cluster, own_schema

            server = stack.enter_context(cluster(""))
            assert server is not None
            store = stack.enter_context(own_schema(server))
        run(args, store)


def run(args: argparse.Namespace, store: str) -> None:
    rng = random.Random(7)
    home = Path(tempfile.mkdtemp(prefix="chronicle-bench-"))
    db = Path(args.db) if args.db else home / "chronicle" / "chronicle.db"
    core = _filled(args, store, rng, home, db)
    _settle(core, store)
    provider = ChronicleMemoryProvider()
    provider.initialize("bench-session", hermes_home=str(home), platform="cli")
    turns = _drive(provider, args, rng)
    fresh = _restarts(provider, turns.live)
    captured = sum(
        1 for e in core.store.read(session="bench-session") if e.envelope.type == "MessageCaptured"
    )
    provider.shutdown()
    print(
        f"turns: {args.turns}, live list at the end: {len(turns.live)} messages, captured: {captured}"
    )
    _report(turns, fresh)
    if not args.db and not store:
        for suffix in ("", "-wal", "-shm"):
            path = Path(str(db) + suffix)
            if path.exists():
                os.remove(path)


def _filled(
    args: argparse.Namespace, store: str, rng: random.Random, home: Path, db: Path
) -> ChronicleCore:
    """The process's core over a store holding at least `--events` events (filled if short)."""
    settings: dict[str, object] = {"db_path": str(db), **({"store": store} if store else {})}
    if args.inline_jobs:
        settings["maintenance"] = {"background": False}
    (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": settings}), encoding="utf-8")
    started = time.perf_counter()
    config = load_hermes_config(home)
    core = ChronicleCore.get(config.location(), config=config)
    if core.store.count() < args.events:
        fill(core, args.events - core.store.count(), rng)
    where = "PostgreSQL" if store else db
    print(
        f"store: {core.store.count()} events in {where} "
        f"(filled in {time.perf_counter() - started:.1f}s)"
    )
    return core


def _settle(core: ChronicleCore, store: str) -> None:
    """A store that already holds 100k events has long since consolidated and indexed them: let
    the background work the fill created settle first (bounded), so the turns measure the steady
    state, with whatever jobs the turns themselves make due."""
    started = time.perf_counter()
    core.recall.catch_up()
    consolidator = core.scheduler.consolidator
    for _ in range(10_000):
        if consolidator is None or consolidator.run(5000).remaining == 0:
            break
    if store:
        # A server store that grew to this size has been analyzed by autovacuum many times;
        # one filled in seconds has no statistics yet, and the planner, taking a third of the
        # log for "seq > position", reads a whole namespace's index for the tree's check of
        # the log's end (3-7 ms a turn) where it would read the few events past it.
        core.store.connection.execute("ANALYZE")
    print(f"background work settled in {time.perf_counter() - started:.1f}s")


class Turns:
    """What the timed turns measured (ms): sync_turn's wall and CPU time, the per-turn memory
    calls' (wall, CPU) by name, and the live list they grew."""

    def __init__(self) -> None:
        self.live: list[dict] = [{"role": "system", "content": "You are Hermes."}]
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.memory: dict[str, tuple[list[float], list[float]]] = {
            "prefetch": ([], []),
            "queue_prefetch": ([], []),
        }


def _drive(
    provider: ChronicleMemoryProvider, args: argparse.Namespace, rng: random.Random
) -> Turns:
    """The timed turns, as Hermes makes them: prefetch, the turn's sync_turn, queue_prefetch."""
    out = Turns()
    for n in range(args.turns):
        new = turn(rng, n)
        if not args.no_prefetch:
            timed(out.memory["prefetch"], provider.prefetch, new[0]["content"], "bench-session")
        out.live.extend(new)
        t0, c0 = time.perf_counter(), time.thread_time()
        provider.sync_turn(
            new[0]["content"], new[-1]["content"], session_id="bench-session", messages=out.live
        )
        out.wall.append((time.perf_counter() - t0) * 1000)
        out.cpu.append((time.thread_time() - c0) * 1000)
        if not args.no_prefetch:
            timed(
                out.memory["queue_prefetch"],
                provider.queue_prefetch,
                new[0]["content"],
                "bench-session",
            )
    return out


def _restarts(provider: ChronicleMemoryProvider, live: list[dict]) -> list[float]:
    """The first call after a restart sees fresh dicts and aligns by position and fingerprint."""
    fresh: list[float] = []
    for _ in range(20):
        copy = json.loads(json.dumps(live))
        provider._core.capture.forget("bench-session")  # type: ignore[union-attr]
        t0 = time.perf_counter()
        provider.sync_turn("again", "again", session_id="bench-session", messages=copy)
        fresh.append((time.perf_counter() - t0) * 1000)
    return fresh


def _report(turns: Turns, fresh: list[float]) -> None:
    # The first call folds the pre-filled log into the session tree once; leave the warm-up out.
    warm, warm_cpu = turns.wall[5:], turns.cpu[5:]
    print(
        f"sync_turn (10-message turn, 4 KB tool result): p50 {statistics.median(warm):.2f} ms, "
        f"p99 {percentile(warm, 99):.2f} ms, max {max(warm):.2f} ms"
    )
    print(
        f"  same, CPU time of the calling thread: p50 {statistics.median(warm_cpu):.2f} ms, "
        f"p99 {percentile(warm_cpu, 99):.2f} ms (less sensitive to a busy machine)"
    )
    print(
        f"sync_turn after a restart ({len(turns.live)} fresh dicts, nothing new): "
        f"p50 {statistics.median(fresh):.2f} ms, p99 {percentile(fresh, 99):.2f} ms"
    )
    for name, (wall, thread) in turns.memory.items():
        if len(wall) <= 5:
            continue
        wall, thread = wall[5:], thread[5:]
        print(
            f"{name}: p50 {statistics.median(wall):.2f} ms, p95 {percentile(wall, 95):.2f} ms; "
            f"CPU p50 {statistics.median(thread):.2f} ms, p95 {percentile(thread, 95):.2f} ms"
        )
    wall = turns.memory["prefetch"][0]
    if len(wall) >= 100:
        print(
            f"prefetch p50 over turns 1-50: {statistics.median(wall[:50]):.2f} ms, over the last "
            f"50 turns: {statistics.median(wall[-50:]):.2f} ms"
        )


if __name__ == "__main__":
    main()
