"""Several hosts capturing into one store at once: SQLite and PostgreSQL side by side.

    python bench/multihost.py [--processes 4] [--threads 4] [--seconds 60] [--pause-ms 0]
                              [--conninfo "host=... dbname=..."]

Each of P processes (standing in for a Hermes host) opens the store once and builds the session
tree and capture over it as the core does; each of its T threads plays one chat after another
(a fresh session every 40 turns), and each turn hands capture the whole live list, as
`sync_turn` does, with a new person's message and a new answer at its end. Every tenth turn
hands the same list again (a repeated hook call), which must store nothing. When the time is up
the parent checks the log and the tree: messages lost, stored twice, exceptions raised into the
host (each must be 0), and every session's projection equal to the list its thread sent.
Per store it prints turns/s, messages/s and p50/p99 of one capture, with the machine's load.
`--pause-ms` makes each thread wait between its turns (a person reading and typing); at 0 every
thread captures back to back, which measures the store saturated, not a turn's own latency.

PARTIAL (issue 17): this is capture through the session tree, the part of `sync_turn` that
writes the store. The scheduler (consolidation exactly once) and compaction do not run on
PostgreSQL yet, and recall's PostgreSQL index (`recall/postgres.py`) is not built by the core
over a PostgreSQL store, so there is no searcher, no compactor and no search or compress
column; those join this bench with the core's wiring. Without `--conninfo` the
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from log_stores import _percentile  # noqa: E402  (the same percentile as the log's bench)

TURNS_PER_SESSION = 40
MAX_TURNS_PER_THREAD = 100_000  # a bound on each loop besides the time


def _parts(kind: str, where: str):  # -> (store, session tree, capture), as the core builds them
    from chronicle_engine.config import Config
    from chronicle_engine.core import vocabulary
    from chronicle_engine.log.events import EventReader, UpcastRegistry
    from chronicle_engine.sessions.capture import Capture
    from chronicle_engine.sessions.tree import SessionTree

    if kind == "sqlite":
        from chronicle_engine.log.store import SQLiteEventStore
        from chronicle_engine.sessions.tables import SQLiteSessionTables

        store = SQLiteEventStore(where)
        tables = SQLiteSessionTables(store)
    else:
        from chronicle_engine.log.postgres import PostgresEventStore
        from chronicle_engine.sessions.postgres import PostgresSessionTables

        store = PostgresEventStore(where)
        tables = PostgresSessionTables(store)
    tree = SessionTree(EventReader(store, UpcastRegistry(), vocabulary()), tables)
    return store, tree, Capture(tree, Config())


def _host(
    kind: str, where: str, name: str, threads: int, seconds: float, start_at: float, pause: float
) -> str:
    """One process: `threads` chats until the time is up. Returns JSON: what each session was
    sent, the capture latencies, the repeated turns that stored something, the exceptions."""
    store, _tree, capture = _parts(kind, where)
    sent: dict[str, list[str]] = {}
    latencies: list[float] = []
    repeats_stored = 0
    errors: list[str] = []
    lock = threading.Lock()

    def chat(t: int) -> None:
        nonlocal repeats_stored
        mine: dict[str, list[str]] = {}
        times: list[float] = []
        repeated = 0
        time.sleep(max(0.0, start_at - time.time()))
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
                answered = f"{session} turn {turn}: the invoice went out on day {turn % 28 + 1}."
                live += [
                    {"role": "user", "content": asked},
                    {"role": "assistant", "content": answered},
                ]
            began = time.perf_counter()
            try:
                stored = capture.capture_turn(session, live)
            except Exception as exc:  # an exception Hermes' loop would have seen
                times.append(time.perf_counter() - began)
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                continue
            times.append(time.perf_counter() - began)
            if pause:
                time.sleep(pause)
            if again:
                repeated += stored
            else:
                mine[session] += [str(m["content"]) for m in live[-2:]]
        with lock:
            sent.update(mine)
            latencies.extend(times)
            repeats_stored += repeated

    pool = [threading.Thread(target=chat, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=seconds + 300)
    store.close()
    return json.dumps(
        {"sent": sent, "latencies": latencies, "repeats_stored": repeats_stored, "errors": errors}
    )


def run(
    kind: str, where: str, processes: int, threads: int, seconds: float, pause_ms: float
) -> dict[str, object]:
    store, tree, _capture = _parts(kind, where)  # migrates before the hosts start
    start_at = time.time() + 3.0  # every host's threads begin together
    cpu_before = os.times()
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = [
            pool.apply_async(
                _host, (kind, where, f"h{p}", threads, seconds, start_at, pause_ms / 1000)
            )
            for p in range(processes)
        ]
        outputs = [json.loads(r.get(timeout=seconds + 600)) for r in results]
    cpu = os.times()
    sent: dict[str, list[str]] = {}
    for out in outputs:
        sent.update(out["sent"])
    latencies = [x for out in outputs for x in out["latencies"]]
    errors = [e for out in outputs for e in out["errors"]]
    said = [
        (e.envelope.session, str(e.payload["message"]["content"]))
        for e in store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    expected = {(session, text) for session, texts in sent.items() for text in texts}
    projections_differ = sum(
        [str(m.get("content")) for m in tree.projection(session)] != texts
        for session, texts in sent.items()
    )
    with tree.tables.reading("counting the tree") as conn:
        row = conn.execute("SELECT COUNT(*) FROM session_entries WHERE kind = 'message'").fetchone()
    entries = int(row[0]) if row else 0
    store.close()
    turns = len(latencies)
    return {
        "store": kind,
        "hosts": processes,
        "threads_each": threads,
        "seconds": seconds,
        "pause_ms": pause_ms,
        "turns": turns,
        "turns_per_s": round(turns / seconds, 1),
        "messages": len(said),
        "messages_per_s": round(len(said) / seconds, 1),
        "capture_p50_ms": round(_percentile(latencies, 0.50) * 1000, 2),
        "capture_p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
        "lost": len(expected - set(said)),
        "stored_twice": len(said) - len(set(said)) + sum(o["repeats_stored"] for o in outputs),
        "exceptions": len(errors),
        "first_exception": errors[0] if errors else None,
        "tree_entries_off": entries - len(said),
        "projections_differ": projections_differ,
        "children_cpu_s": round(
            (cpu.children_user - cpu_before.children_user)
            + (cpu.children_system - cpu_before.children_system),
            1,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--pause-ms", type=float, default=0.0, help="each thread's wait between turns"
    )
    parser.add_argument("--conninfo", help="an existing PostgreSQL database (else a throwaway one)")
    args = parser.parse_args()
    print(
        json.dumps(
            {
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "partial": "capture only: no searcher, compactor or consolidation on PostgreSQL yet",
            }
        )
    )
    shape = (args.processes, args.threads, args.seconds, args.pause_ms)
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run("sqlite", str(Path(tmp) / "chronicle.db"), *shape)))
    if args.conninfo:
        print(json.dumps(run("postgres", args.conninfo, *shape)))
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        from postgres_support import start_cluster

        with start_cluster() as cluster:
            print(json.dumps(run("postgres", cluster.conninfo(), *shape)))
    print(json.dumps({"load_average_after": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
