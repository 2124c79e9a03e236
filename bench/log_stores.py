"""The event log alone on SQLite and on PostgreSQL, side by side, under concurrent writers.

    python bench/log_stores.py [--processes 4] [--threads 4] [--seconds 10]
                               [--conninfo "host=... dbname=..."]

Each of P processes (standing in for hosts) runs T threads; each thread calls `append_new` with
one new event per call (as capture stores a message) until the time is up, and every tenth call
repeats an id it stored before (which must store nothing). A follower in the parent reads the log
from its position while they write. Per store it prints events/s, p50/p99 of one `append_new`,
and the checks: events lost, stored twice, and found behind the follower (each must be 0).

This is the log only, not `bench/multihost.py` of issue 17 (sync_turn, search and compress
through the whole core): nothing above the log runs on PostgreSQL yet. Without `--conninfo` the
PostgreSQL side is a throwaway local server (tests/postgres_support.py: initdb, pg_ctl on
127.0.0.1, fsync off), so its figures are loopback figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.log.store import PendingEvent, SQLiteEventStore

ROOT = Path(__file__).resolve().parents[1]
TEXT = "a captured message of ordinary length, about as long as a line someone types " * 3


def _open(kind: str, where: str) -> SQLiteEventStore | PostgresEventStore:
    return SQLiteEventStore(where) if kind == "sqlite" else PostgresEventStore(where)


def _host(kind: str, where: str, name: str, threads: int, seconds: float, start_at: float) -> str:
    """One process: `threads` writers until the time is up. Returns JSON (ids, latencies)."""
    store = _open(kind, where)
    stored: list[str] = []
    latencies: list[float] = []
    repeats_stored = 0
    lock = threading.Lock()

    def writer(t: int) -> None:
        nonlocal repeats_stored
        mine: list[str] = []
        times: list[float] = []
        repeated = 0
        time.sleep(max(0.0, start_at - time.time()))
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            n += 1
            if n % 10 == 0 and mine:
                event_id = mine[n % len(mine)]
            else:
                event_id = f"{name}-{t}-{n}-{uuid.uuid4().hex[:8]}"
            event = PendingEvent(
                "bench", "Said", 1, {"text": TEXT, "n": n}, id=event_id, session=f"{name}-{t}"
            )
            began = time.perf_counter()
            got = store.append_new([event])
            times.append(time.perf_counter() - began)
            if n % 10 == 0 and event_id in mine:
                repeated += len(got)
            else:
                mine += [e.envelope.id for e in got]
        with lock:
            stored.extend(mine)
            latencies.extend(times)
            repeats_stored += repeated

    pool = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=seconds + 120)
    store.close()
    return json.dumps({"ids": stored, "latencies": latencies, "repeats_stored": repeats_stored})


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def run(kind: str, where: str, processes: int, threads: int, seconds: float) -> dict[str, object]:
    store = _open(kind, where)  # migrates before the hosts start
    start_at = time.time() + 2.0  # every host's threads begin together
    followed: list[int] = []
    behind = 0
    done = threading.Event()

    def follow() -> None:
        nonlocal behind
        position = 0
        deadline = time.monotonic() + seconds + 300
        while time.monotonic() < deadline:
            finished = done.is_set()
            for event in store.read(after=position):
                if event.seq <= position:
                    behind += 1
                position = event.seq
                followed.append(event.seq)
            if finished:
                return
            time.sleep(0.01)

    follower = threading.Thread(target=follow)
    follower.start()
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = [
            pool.apply_async(_host, (kind, where, f"h{p}", threads, seconds, start_at))
            for p in range(processes)
        ]
        outputs = [json.loads(r.get(timeout=seconds + 300)) for r in results]
    done.set()
    follower.join(timeout=seconds + 300)
    claimed = [i for out in outputs for i in out["ids"]]
    latencies = [x for out in outputs for x in out["latencies"]]
    log = list(store.read())
    in_log = [e.envelope.id for e in log]
    store.close()
    return {
        "store": kind,
        "hosts": processes,
        "threads_each": threads,
        "seconds": seconds,
        "events": len(in_log),
        "events_per_s": round(len(in_log) / seconds),
        "append_new_p50_ms": round(_percentile(latencies, 0.50) * 1000, 2),
        "append_new_p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
        "lost": len(set(claimed) - set(in_log)),
        "stored_twice": len(in_log)
        - len(set(in_log))
        + sum(out["repeats_stored"] for out in outputs),
        "behind_follower": behind + (followed != [e.seq for e in log]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--conninfo", help="an existing PostgreSQL database (else a throwaway one)")
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
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "log.db")
        print(json.dumps(run("sqlite", db, args.processes, args.threads, args.seconds)))
    if args.conninfo:
        print(
            json.dumps(run("postgres", args.conninfo, args.processes, args.threads, args.seconds))
        )
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from postgres_support import start_cluster

    with start_cluster() as cluster:
        print(
            json.dumps(
                run("postgres", cluster.conninfo(), args.processes, args.threads, args.seconds)
            )
        )


if __name__ == "__main__":
    main()
