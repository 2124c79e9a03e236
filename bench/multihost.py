"""Several hosts sharing one store: capture, maintenance, search and compaction at once, on
SQLite and PostgreSQL side by side.

    python bench/multihost.py [--processes 4] [--threads 4] [--seconds 60] [--pause-ms 0]
                              [--clock-scale 10] [--conninfo "host=... dbname=..."]
                              [--inline-jobs] [--stagger | --poisson]

Each of P host processes (a Hermes host) opens the store through `ChronicleCore`, as Hermes
does; each of its T threads plays one chat after another (a fresh session every 40 turns), and
each turn is what the provider's `sync_turn` does: capture the whole live list (a new person's
message and a new answer at its end), then tick the host's scheduler on the `sync_turn` hook,
which hands what is due (consolidation included) to the host's one background thread and
returns, as the provider's scheduler does by default (`maintenance.background`); with
`--inline-jobs` the tick runs the jobs on the turn's own thread (`background: false`, and every
version before it), so the two can be compared. Every tenth turn hands the same list again (a
repeated hook call), which must store nothing. Beside them run one searcher process
(`chronicle_search` through recall, back to back, on words the hosts write) and one compactor
process (the context engine's `compress` on chats of its own, each compressed as it grows, the
compacted list kept as Hermes keeps it); `--searchers` and `--compactors` change how many (0:
none), to see what each costs the hosts. Each turn's own thread CPU is kept beside its wall
time (`sync_turn_cpu_*`): the difference is what the turn waited for (the server, its process's
other threads, a core).

The scheduler runs on a clock `--clock-scale` times faster than the wall's, shared by every
process, so a minute's consolidation schedule falls due about ten times in a 60 s run; its
summariser is a stand-in (the unit's texts joined; no model is called), so what is measured is
the store's share of consolidation, not a model's. Every host schedules every due time; the
queue must run each once.

When the time is up the parent checks the log, the tree, the queue and the sections: messages
lost or stored twice and exceptions (each must be 0; a capture refused with StoreBusy is counted
apart: the provider's fence logs it, no exception reaches Hermes, and its messages wait in the
spill or come again with the next turn's list), every session's projection equal to what its
thread sent, each due time of the consolidation schedule fired by exactly one host (every host
tries; the others find it handled), no consolidation job failed or run twice, no section
superseded and no two current sections of one chronicle overlapping. Per store it prints
turns/s, p50/p99 of `sync_turn` (and of its capture), searches/s and search p50/p95/p99 (the
query; the searcher's folding of what the log gained, which chronicle_search does first, is
timed apart), compressions and compress p50/p99, with the machine's load.
`--pause-ms` makes each thread wait between its turns (a person reading and typing); at 0 every
thread captures back to back, which measures the store saturated, not a turn's own latency.
Every thread starts at the same instant, and paced alike they stay nearly in step: each pause
ends with all the writers' turns arriving at once. `--stagger` spreads their first turns evenly
over one pause instead, as people who do not all press enter together would. Each thread's first
turns open its connection and prepare its statements, all at that same instant: the
`sync_turn_warm_*` figures leave out each thread's first five (as bench/sync_turn.py does).
`--poisson` draws each wait from an exponential distribution of mean `--pause-ms` instead (each
writer's first turn too, with a seed of its own): sixteen independent people, whose turns arrive
as a Poisson process, sometimes together and mostly not.
Without `--conninfo` the PostgreSQL side is a throwaway local server (tests/postgres_support.py:
initdb, pg_ctl on 127.0.0.1, fsync off), so its figures are loopback figures.

On PostgreSQL the parent samples the server's sessions every `--sample-ms` while the hosts run
(pg_stat_activity, pg_blocking_pids): how many sessions wait and on what (`waits`: the
server's wait event, "Lock:advisory" for an advisory lock, "Lock:transactionid" for a row lock
another transaction holds, "Client:ClientRead" for a backend idle in a transaction, waiting for
its client), and what the holders of a lock others wait on were doing (`blockers`: "active" on
the server, or "idle in transaction", i.e. waiting for their own host between statements; with
the start of their last statement, unless they are themselves waiting for a lock). It also
prints the CPU the processes (`children_cpu_s`) and the local server (`server_cpu_s`) used.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from log_stores import _percentile  # noqa: E402  (the same percentile as the log's bench)

TURNS_PER_SESSION = 40
MAX_TURNS_PER_THREAD = 100_000  # a bound on each loop besides the time
MAX_SEARCHES = 1_000_000
MAX_COMPRESSIONS = 100_000
COMPRESS_EVERY_TURNS = 10  # the compactor's chats grow by this many turns between compressions
WARM_UP_TURNS = 5  # each thread's first turns open its connection and prepare its statements
CONSOLIDATE = "* * * * *"


def _config(kind: str, where: str, home: str) -> dict[str, object]:
    """The `chronicle:` settings every process opens the store with."""
    settings: dict[str, object] = {
        "db_path": str(Path(home) / "chronicle.db") if kind == "postgres" else where,
        "maintenance": {"schedules": {"consolidate": CONSOLIDATE}},
    }
    if kind == "postgres":
        settings["store"] = where
    return settings


def _core(kind: str, where: str, home: str):  # -> ChronicleCore
    from chronicle_engine.config import Config
    from chronicle_engine.core import ChronicleCore

    return ChronicleCore(where, Config(_config(kind, where, home)))


def _stand_in(events):  # -> Consolidation: a unit's texts joined (no model is called)
    from chronicle_engine.chronicle.sections import Consolidation

    return Consolidation(" | ".join(str(e.payload.get("text", "")) for e in events)[:2000])


def _scheduler(core, start_at: float, scale: float, inline: bool = True):
    """A Scheduler on the shared fast clock; its jobs run on the hook's thread when `inline`,
    else on its background thread (as the provider's do, `maintenance.background`)."""

    def clock() -> float:
        return start_at + (time.time() - start_at) * scale

    return core.new_scheduler(clock=clock, summarize=_stand_in, background=not inline)


def _host(
    kind: str,
    where: str,
    name: str,
    threads: int,
    seconds: float,
    start_at: float,
    pause: float,
    scale: float,
    inline_jobs: bool = False,
    offsets: list[float] | None = None,
    poisson: bool = False,
) -> str:
    """One host: `threads` chats until the time is up, each turn a `sync_turn` (capture, then
    the scheduler's tick). Returns JSON: what each session was sent, the latencies, the
    repeated turns that stored something, the exceptions. With `poisson`, each thread's waits
    are drawn from an exponential distribution of mean `pause` (its first turn too): the hosts'
    turns then arrive as a Poisson process, as independent people's would."""
    with tempfile.TemporaryDirectory() as home:
        from chronicle_engine.errors import StoreBusy

        core = _core(kind, where, home)
        sched = _scheduler(core, start_at, scale, inline_jobs)
        fires: list[tuple[str, float, bool]] = []  # (schedule, due time, whether this host fired)
        fire = sched.queue.fire

        def recorded(schedule: str, cron: str, due: float, spec: object) -> int | None:
            job = fire(schedule, cron, due, spec)  # type: ignore[arg-type]
            fires.append((schedule, due, job is not None))
            return job

        sched.queue.fire = recorded  # type: ignore[method-assign]
        capture = core.capture
        sent: dict[str, list[str]] = {}
        syncs: list[float] = []
        warm: list[float] = []  # the same, each thread's first WARM_UP_TURNS left out
        captures: list[float] = []
        sync_cpus: list[float] = []  # the turn's own thread CPU (the rest is waiting)
        capture_cpu: list[float] = []  # the same for its capture (the rest is the tick's jobs)
        repeats_stored = 0
        errors: list[str] = []
        busy: list[str] = []
        lock = threading.Lock()

        def chat(t: int) -> None:
            nonlocal repeats_stored
            mine: dict[str, list[str]] = {}
            times: list[float] = []
            captured: list[float] = []
            cpus: list[float] = []
            capture_cpus: list[float] = []
            repeated = 0
            rng = random.Random(f"{name}-{t}")  # (the same draws on every run)

            def wait() -> float:
                return rng.expovariate(1 / pause) if poisson and pause else pause

            first = wait() if poisson else (offsets[t] if offsets else 0.0)
            time.sleep(max(0.0, start_at + first - time.time()))
            deadline = time.monotonic() + seconds
            turn = 0
            live: list[dict[str, object]] = []
            session = ""
            while time.monotonic() < deadline and turn < MAX_TURNS_PER_THREAD:
                if turn % TURNS_PER_SESSION == 0:
                    session = f"{name}-{t}-{turn // TURNS_PER_SESSION}"
                    live = []
                    mine[session] = []
                turn += 1
                again = turn % 10 == 0 and bool(live)
                if not again:
                    asked = f"{session} turn {turn}: what about the invoice for order {turn * 7}?"
                    answered = (
                        f"{session} turn {turn}: the invoice went out on day {turn % 28 + 1}."
                    )
                    live += [
                        {"role": "user", "content": asked},
                        {"role": "assistant", "content": answered},
                    ]
                began, cpu = time.perf_counter(), time.thread_time()
                try:
                    stored = capture.capture_turn(session, live)
                    captured.append(time.perf_counter() - began)
                    capture_cpus.append(time.thread_time() - cpu)
                    sched.tick("sync_turn")  # never raises (it backs off and logs)
                except (
                    StoreBusy
                ) as exc:  # the provider's fence logs it; the turn waits in the spill
                    times.append(time.perf_counter() - began)
                    with lock:
                        busy.append(f"{type(exc).__name__}: {exc}")
                    continue
                except Exception as exc:  # anything else: a fault, whoever would have caught it
                    times.append(time.perf_counter() - began)
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                times.append(time.perf_counter() - began)
                cpus.append(time.thread_time() - cpu)
                if pause:
                    time.sleep(wait())
                if again:
                    repeated += stored
                else:
                    mine[session] += [str(m["content"]) for m in live[-2:]]
            with lock:
                sent.update(mine)
                syncs.extend(times)
                warm.extend(times[WARM_UP_TURNS:])
                captures.extend(captured)
                sync_cpus.extend(cpus)
                capture_cpu.extend(capture_cpus)
                repeats_stored += repeated

        pool = [threading.Thread(target=chat, args=(t,)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join(timeout=seconds + 300)
        core.shutdown()  # stops the scheduler's background thread after its current job
    return json.dumps(
        {
            "sent": sent,
            "sync": syncs,
            "sync_warm": warm,
            "capture": captures,
            "sync_cpu": sync_cpus,
            "capture_cpu": capture_cpu,
            "jobs_run": sched.jobs_run,
            "repeats_stored": repeats_stored,
            "errors": errors,
            "busy": busy,
            "fires": fires,
        }
    )


def _searcher(kind: str, where: str, seconds: float, start_at: float) -> str:
    """Searches back to back on words the hosts write, until the time is up."""
    with tempfile.TemporaryDirectory() as home:
        core = _core(kind, where, home)
        recall = core.recall
        times: list[float] = []
        folds: list[float] = []
        folded = 0
        hits = 0
        errors: list[str] = []
        time.sleep(max(0.0, start_at - time.time()))
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline and n < MAX_SEARCHES:
            n += 1
            query = f"invoice for order {(n * 7919) % 40 * 7 + 7}" if n % 2 else "day 17 invoice"
            began = time.perf_counter()
            try:
                # chronicle_search folds what the log gained first; timed apart, so the
                # query's own latency and the indexing the searcher does are both seen.
                folded += recall.catch_up()
                caught_up = time.perf_counter()
                hits += len(recall.search(query, limit=10))
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                caught_up = began
            folds.append(caught_up - began)
            times.append(time.perf_counter() - caught_up)
        core.shutdown()
    return json.dumps(
        {"search": times, "fold": folds, "folded": folded, "hits": hits, "errors": errors}
    )


def _compactor(kind: str, where: str, seconds: float, start_at: float) -> str:
    """The context engine's compress on chats of its own, each compressed every
    COMPRESS_EVERY_TURNS turns, keeping the compacted list as Hermes does."""
    from chronicle_engine.compaction.policy import policy_from_config

    with tempfile.TemporaryDirectory() as home:
        core = _core(kind, where, home)
        compaction = core.compaction
        policy = policy_from_config(core.config)
        times: list[float] = []
        written = 0
        errors: list[str] = []
        time.sleep(max(0.0, start_at - time.time()))
        deadline = time.monotonic() + seconds
        n = turn = 0
        live: list[dict[str, object]] = []
        session = ""
        while time.monotonic() < deadline and n < MAX_COMPRESSIONS:
            if turn % (4 * TURNS_PER_SESSION) == 0:
                session, live = f"compactor-{turn}", []
            for _ in range(COMPRESS_EVERY_TURNS):
                turn += 1
                live += [
                    {"role": "user", "content": f"{session} step {turn}: check shipment {turn}?"},
                    {"role": "assistant", "content": f"shipment {turn} left dock {turn % 9}."},
                ]
            n += 1
            began = time.perf_counter()
            try:
                out = compaction.compress(session, live, policy=policy, force=True)
                if out.messages is not None:
                    live = list(out.messages)
                    written += len(out.written)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            times.append(time.perf_counter() - began)
        core.shutdown()
    return json.dumps({"compress": times, "sections": written, "errors": errors})


_WAITS_SQL = r"""
    SELECT a.pid, a.state, coalesce(a.wait_event_type || ':' || a.wait_event, ''),
           pg_blocking_pids(a.pid), left(regexp_replace(a.query, '\s+', ' ', 'g'), 48)
    FROM pg_stat_activity a
    WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
      AND a.backend_type = 'client backend'
"""


def _sample_waits(conninfo: str, stop: threading.Event, every: float) -> dict[str, object]:
    """Tally what the server's sessions wait on, and what the ones they wait for are doing,
    every `every` seconds until `stop` (see the module docstring)."""
    import psycopg

    waits: dict[str, int] = {}
    blockers: dict[str, int] = {}
    samples = 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while not stop.wait(every):
            rows = conn.execute(_WAITS_SQL).fetchall()
            samples += 1
            state = {int(pid): (str(st or ""), str(ev), str(q)) for pid, st, ev, _, q in rows}
            held: set[int] = set()
            for _pid, st, event, blocking, _query in rows:
                if st == "active" or event.startswith("Lock:"):
                    key = f"{st}:{event}" if event else str(st)
                    waits[key] = waits.get(key, 0) + 1
                held.update(int(b) for b in blocking or ())
            for pid in held:
                st, event, query = state.get(pid, ("gone", "", ""))
                key = f"{st}:{event}" if event else st
                key += f" ({query})" if st != "active" or not event.startswith("Lock:") else ""
                blockers[key] = blockers.get(key, 0) + 1
    return {
        "samples": samples,
        "waits_per_sample": {k: round(v / max(samples, 1), 2) for k, v in sorted(waits.items())},
        "blockers_per_sample": {
            k: round(v / max(samples, 1), 2) for k, v in sorted(blockers.items())
        },
    }


def _server_cpu(postmaster: int | None) -> float:
    """CPU seconds a local PostgreSQL server has used: the postmaster, its live backends and
    the backends it has reaped (0.0 when the server is not local)."""
    if postmaster is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid: int) -> list[str]:
        # after the command's closing parenthesis: state is field 3, utime 14 ... cstime 17
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    try:
        own = fields(postmaster)
        total = sum(int(x) for x in own[11:15])  # utime, stime, cutime, cstime
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    except OSError:
        return 0.0
    for child in children:
        try:
            total += sum(int(x) for x in fields(int(child))[11:13])
        except OSError:
            continue  # gone between the listing and the read (its time is in cutime now)
    return total / tick


def _ms(values: list[float], q: float) -> float:
    return round(_percentile(values, q) * 1000, 2) if values else 0.0


def _consolidation(core, fires: list[list[object]]) -> dict[str, object]:
    """One run per due time across every host: each due time of the consolidation schedule
    fired by exactly one host (the others found it handled); the queue's consolidation jobs
    each run once and none failed; the chronicles' sections none superseded or overlapping.
    (A due time that comes while a consolidation is still running is handled by that live job:
    the queue keeps one live job per key.)"""
    jobs = [j for j in core.scheduler.queue.jobs(limit=1_000_000) if j.kind == "consolidate"]
    fired = [j for j in jobs if "continues" not in j.payload]
    by_due: dict[float, int] = {}
    for schedule, due, won in fires:
        if schedule == "consolidate":
            by_due[float(due)] = by_due.get(float(due), 0) + int(bool(won))
    overlapping = superseded = sections = 0
    names = core.chronicle().chronicles()
    for name in names:
        every = core.chronicle(name).export()
        sections += len(every)
        superseded += sum(1 for s in every if s.anchor.supersedes)
        current = sorted(
            (s.anchor.from_seq, s.anchor.to_seq) for s in core.chronicle(name).current()
        )
        overlapping += sum(1 for a, b in zip(current, current[1:], strict=False) if b[0] <= a[1])
    return {
        "consolidation_due_times": len(by_due),
        "consolidation_fired_per_due_max": max(by_due.values(), default=0),
        "consolidation_due_times_fired_by_none": sum(1 for n in by_due.values() if n == 0),
        "consolidation_fires_found_handled": sum(
            1 for schedule, _, won in fires if schedule == "consolidate" and not won
        ),
        "consolidation_jobs": len(fired),
        "consolidation_continuations": len(jobs) - len(fired),
        # A retried attempt wrote nothing (a refused fork rolls its batch back); failed for good
        # must be 0; a job still pending or running when the hosts stopped is not a second run.
        "consolidation_attempts_retried": sum(max(0, j.attempts - 1) for j in jobs),
        "consolidation_jobs_failed": sum(1 for j in jobs if j.state == "failed"),
        "consolidation_jobs_unfinished": sum(1 for j in jobs if j.state in ("pending", "running")),
        "chronicles": len(names),
        "sections": sections,
        "sections_superseded": superseded,
        "sections_overlapping": overlapping,
    }


def run(
    kind: str,
    where: str,
    processes: int,
    threads: int,
    seconds: float,
    pause_ms: float,
    scale: float,
    sample_ms: float = 0.0,
    postmaster: int | None = None,
    beside: tuple[int, int] = (1, 1),
    inline_jobs: bool = False,
    stagger: bool = False,
    poisson: bool = False,
) -> dict[str, object]:
    """One run on one store: migrate it, drive the hosts, the searcher and the compactor at
    once, then check what they left and summarise."""
    _migrate(kind, where)
    start_at = time.time() + 5.0  # every process's threads begin together
    cpu_before = os.times()
    server_before = _server_cpu(postmaster)
    with _sampling(kind, where, start_at, sample_ms) as sampled:
        outputs, searched, compressed = _drive(
            kind, where, processes, threads, (seconds, start_at), pause_ms, scale, beside,
            inline_jobs, stagger, poisson,
        )  # fmt: skip
    cpu = os.times()
    server_cpu = _server_cpu(postmaster) - server_before  # the hosts' run, not the check below
    said, checked = _check(kind, where, outputs)
    searches = searched["search"]
    compressions = compressed["compress"]
    errors = [e for out in outputs for e in out["errors"]] + searched["errors"]
    errors += compressed["errors"]
    busy = [e for out in outputs for e in out["busy"]]
    return {
        "store": kind,
        "hosts": processes,
        "threads_each": threads,
        "searchers": beside[0],
        "compactors": beside[1],
        "seconds": seconds,
        "pause_ms": pause_ms,
        "staggered": stagger,
        "arrivals": "poisson" if poisson else "staggered" if stagger else "in step",
        "clock_scale": scale,
        "jobs": "inline" if inline_jobs else "background",
        **_turn_figures(outputs, said, seconds),
        "searches": len(searches),
        "searches_per_s": round(len(searches) / seconds, 1),
        "search_p50_ms": _ms(searches, 0.50),
        "search_p95_ms": _ms(searches, 0.95),
        "search_p99_ms": _ms(searches, 0.99),
        "search_hits": searched["hits"],
        "searcher_fold_p50_ms": _ms(searched["fold"], 0.50),
        "searcher_fold_p99_ms": _ms(searched["fold"], 0.99),
        "searcher_folded_events": searched["folded"],
        "compressions": len(compressions),
        "compress_p50_ms": _ms(compressions, 0.50),
        "compress_p99_ms": _ms(compressions, 0.99),
        "compress_sections": compressed["sections"],
        "capture_refused_busy": len(busy),  # StoreBusy: logged by the provider's fence, spilled
        "first_busy": busy[0] if busy else None,
        "exceptions": len(errors),
        "first_exception": errors[0] if errors else None,
        **checked,  # lost, stored twice, the tree, the consolidation
        "children_cpu_s": round(
            (cpu.children_user - cpu_before.children_user)
            + (cpu.children_system - cpu_before.children_system),
            1,
        ),
        # the local server's CPU over the same span (0.0 with --conninfo)
        "server_cpu_s": round(server_cpu, 1),
        **({"server_waits": sampled} if sampled else {}),
    }


def _turn_figures(outputs: list[dict], said: int, seconds: float) -> dict[str, object]:
    """The hosts' turns: how many, and sync_turn's and its capture's wall and own CPU."""
    syncs = [x for out in outputs for x in out["sync"]]
    warm = [x for out in outputs for x in out["sync_warm"]]
    captures = [x for out in outputs for x in out["capture"]]
    sync_cpus = [x for out in outputs for x in out["sync_cpu"]]
    capture_cpus = [x for out in outputs for x in out["capture_cpu"]]
    return {
        "turns": len(syncs),
        "turns_per_s": round(len(syncs) / seconds, 1),
        "messages": said,
        "messages_per_s": round(said / seconds, 1),
        "sync_turn_p50_ms": _ms(syncs, 0.50),
        "sync_turn_p99_ms": _ms(syncs, 0.99),
        # each thread's first turns left out, as bench/sync_turn.py leaves out its first five
        "sync_turn_warm_p50_ms": _ms(warm, 0.50),
        "sync_turn_warm_p99_ms": _ms(warm, 0.99),
        "capture_p50_ms": _ms(captures, 0.50),
        "capture_p99_ms": _ms(captures, 0.99),
        # the calling thread's own CPU a turn: the rest of its wall time it waited (for the
        # server, for its process's other threads (the GIL), for a core)
        "sync_turn_cpu_p50_ms": _ms(sync_cpus, 0.50),
        "sync_turn_cpu_p99_ms": _ms(sync_cpus, 0.99),
        "capture_cpu_p50_ms": _ms(capture_cpus, 0.50),
        "capture_cpu_p99_ms": _ms(capture_cpus, 0.99),
        "jobs_run_by_hosts": sum(out["jobs_run"] for out in outputs),
    }


def _migrate(kind: str, where: str) -> None:
    """Open the store once before the hosts start: every room migrates its tables."""
    with tempfile.TemporaryDirectory() as home:
        core = _core(kind, where, home)
        core.recall.catch_up()
        _scheduler(core, time.time(), 1.0)
        core.shutdown()


@contextlib.contextmanager
def _sampling(
    kind: str, where: str, start_at: float, sample_ms: float
) -> Iterator[dict[str, object]]:
    """On PostgreSQL (and `sample_ms` > 0), `_sample_waits` on a thread from `start_at` until
    the block ends; the dict yielded holds its tally then (empty otherwise)."""
    sampled: dict[str, object] = {}
    if kind != "postgres" or sample_ms <= 0:
        yield sampled
        return
    stop = threading.Event()

    def sample() -> None:
        time.sleep(max(0.0, start_at - time.time()))
        sampled.update(_sample_waits(where, stop, sample_ms / 1000))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield sampled
    finally:
        stop.set()
        sampler.join(timeout=30)


def _drive(
    kind: str,
    where: str,
    processes: int,
    threads: int,
    shape: tuple[float, float],
    pause_ms: float,
    scale: float,
    beside: tuple[int, int] = (1, 1),
    inline_jobs: bool = False,
    stagger: bool = False,
    poisson: bool = False,
) -> tuple[list[dict], dict, dict]:
    """The host processes, the searchers and the compactors (`beside`: how many of each), all
    at once; their reports (the searchers' and the compactors' each merged into one). With
    `stagger`, the writers' first turns are spread evenly over one pause."""
    seconds = shape[0]
    writers = processes * threads
    spread = pause_ms / 1000 / writers if stagger else 0.0
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes + sum(beside)) as pool:
        host = (threads, *shape, pause_ms / 1000, scale, inline_jobs)
        hosts = [
            pool.apply_async(
                _host,
                (
                    kind,
                    where,
                    f"h{p}",
                    *host,
                    [spread * (p * threads + t) for t in range(threads)],
                    poisson,
                ),
            )
            for p in range(processes)
        ]
        searchers = [pool.apply_async(_searcher, (kind, where, *shape)) for _ in range(beside[0])]
        compactors = [pool.apply_async(_compactor, (kind, where, *shape)) for _ in range(beside[1])]
        outputs = [json.loads(r.get(timeout=seconds + 600)) for r in hosts]
        searched = _merged(
            [json.loads(r.get(timeout=seconds + 600)) for r in searchers],
            {"search": [], "fold": [], "folded": 0, "hits": 0, "errors": []},
        )
        compressed = _merged(
            [json.loads(r.get(timeout=seconds + 600)) for r in compactors],
            {"compress": [], "sections": 0, "errors": []},
        )
    return outputs, searched, compressed


def _merged(reports: list[dict], empty: dict) -> dict:
    """Several processes' reports as one: lists joined, counts added."""
    for report in reports:
        for key, value in report.items():
            empty[key] = empty[key] + value
    return empty


def _check(kind: str, where: str, outputs: list[dict]) -> tuple[int, dict[str, object]]:
    """What the hosts left in the store against what they sent: the messages stored, and the
    checks (messages lost or stored twice, tree entries and projections, the consolidation's
    one run per due time)."""
    sent: dict[str, list[str]] = {}
    for out in outputs:
        sent.update(out["sent"])
    fires = [f for out in outputs for f in out["fires"]]
    with tempfile.TemporaryDirectory() as home:
        core = _core(kind, where, home)
        tree = core.sessions
        said = [
            (e.envelope.session, str(e.payload["message"]["content"]))
            for e in core.store.read(namespaces=["chronicle.chat"])
            if e.envelope.type == "MessageCaptured" and str(e.envelope.session).startswith("h")
        ]
        expected = {(session, text) for session, texts in sent.items() for text in texts}
        projections_differ = sum(
            [str(m.get("content")) for m in tree.projection(session)] != texts
            for session, texts in sent.items()
        )
        with tree.tables.reading("counting the tree") as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM session_entries WHERE kind = 'message' AND session LIKE ?",
                ("h%",),  # the hosts' sessions (not the compactor's)
            ).fetchone()
        entries = int(row[0]) if row else 0
        consolidation = _consolidation(core, fires)
        core.shutdown()
    return len(said), {
        "lost": len(expected - set(said)),
        "stored_twice": len(said) - len(set(said)) + sum(o["repeats_stored"] for o in outputs),
        "tree_entries_off": entries - len(said),
        "projections_differ": projections_differ,
        **consolidation,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--pause-ms", type=float, default=0.0, help="each thread's wait between turns"
    )
    parser.add_argument(
        "--clock-scale",
        type=float,
        default=10.0,
        help="the scheduler's clock runs this much faster",
    )
    parser.add_argument("--conninfo", help="an existing PostgreSQL database (else a throwaway one)")
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="run one store only")
    parser.add_argument(
        "--searchers", type=int, default=1, help="searcher processes beside the hosts (0: none)"
    )
    parser.add_argument(
        "--compactors", type=int, default=1, help="compactor processes beside the hosts (0: none)"
    )
    parser.add_argument(
        "--stagger",
        action="store_true",
        help="spread the writers' first turns evenly over one pause (else all start at once)",
    )
    parser.add_argument(
        "--poisson",
        action="store_true",
        help="draw each wait (and each writer's first turn) from an exponential distribution of"
        " mean --pause-ms: the turns arrive as a Poisson process",
    )
    parser.add_argument(
        "--inline-jobs",
        action="store_true",
        help="run the scheduler's jobs on the turn's thread (maintenance.background: false)",
    )
    parser.add_argument(
        "--sample-ms",
        type=float,
        default=20.0,
        help="on PostgreSQL, sample the server's waits this often (0: not at all)",
    )
    args = parser.parse_args()
    print(
        json.dumps(
            {
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )
    shape = (
        args.processes,
        args.threads,
        args.seconds,
        args.pause_ms,
        args.clock_scale,
        args.sample_ms,
    )
    beside = (args.searchers, args.compactors)
    jobs = {"inline_jobs": args.inline_jobs, "stagger": args.stagger, "poisson": args.poisson}
    if args.only != "postgres":
        with tempfile.TemporaryDirectory() as tmp:
            where = str(Path(tmp) / "chronicle.db")
            print(
                json.dumps(run("sqlite", where, *shape, beside=beside, **jobs)),
                flush=True,
            )
    if args.only == "sqlite":
        pass
    elif args.conninfo:
        print(json.dumps(run("postgres", args.conninfo, *shape, beside=beside, **jobs)))
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        from postgres_support import start_cluster

        with start_cluster() as cluster:
            postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
            conninfo = cluster.conninfo()
            print(json.dumps(run("postgres", conninfo, *shape, postmaster, beside, **jobs)))
    print(json.dumps({"load_average_after": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
