"""What the first search after opening reads from disk: page reads by table, counted with strace.

    .venv/bin/python bench/cold_reads.py STORE.db [--queries 3] [--compress]

STORE.db is a lived-in store of bench/scale.py (its cache, `lived-<size>.db`). The store is
copied to a scratch file next to it (the copy is opened once so its migrations run and its
background work settles, as scale.py's measure does), then for each of `--queries` probe queries
(the same as scale.py's, seed 13) the scratch files are dropped from the page cache and scale.py's
`first_search` child runs under `strace -f -y -e trace=pread64,read,write`. Every pread of the
database file is mapped to the b-tree that owns the page (dbstat), split into what opening the
store and building recall read and what the search itself read. Counts of page reads do not
depend on the machine's load; the wall times printed beside them do (and strace slows every
read). It ends with the min / median / max of each over the runs.

With `--compress` the first compress() of a 1,001-message conversation already captured (as
scale.py measures it) is counted the same way. With `--match-budget N` the searches run with
recall's match budget set to N (default: the setting's default), to see what the budget costs
cold; the ranking changes with it.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from compress import conversation  # noqa: E402
from scale import _COMPRESS_MESSAGES, _core, drop_cache, run_child, settle  # noqa: E402
from search_scale import Corpus, queries  # noqa: E402

_PREAD = re.compile(r"^\d+\s+pread64\((\d+)<([^>]*)>, .*?, (\d+), (\d+)\)\s+=\s+(-?\d+)")
_MARK = re.compile(r"^\d+\s+write\(2<[^>]*>, \"(@@[a-z]+@@)")


def owners(db: Path) -> dict[int, str]:
    """page number -> the table, index or FTS shadow table that owns it."""
    conn = sqlite3.connect(db)
    try:
        return {int(page): name for name, page in conn.execute("SELECT name, pageno FROM dbstat")}
    finally:
        conn.close()


def traced(role: str, db: Path, arg: str, log: Path) -> dict[str, float]:
    """Run scale.py's child `role` under strace; its last line of output is its result."""
    strace = ["strace", "-f", "-y", "-e", "trace=pread64,write", "-e", "signal=none", "-o"]
    return run_child(role, str(db), arg, timeout=600, prefix=[*strace, str(log)])


def reads(log: Path, db: Path, page_size: int) -> dict[str, Counter[str]]:
    """Pages read from the database file, by phase (before / after the child's mark)."""
    phases: dict[str, Counter[str]] = {"open": Counter(), "run": Counter()}
    pages: dict[str, list[int]] = {"open": [], "run": []}
    phase = "open"
    target = str(db.resolve())
    for line in log.read_text(errors="replace").splitlines():
        mark = _MARK.match(line)
        if mark:
            phase = "run" if mark.group(1) == "@@run@@" else phase
            continue
        m = _PREAD.match(line)
        if not m or m.group(2) != target:
            continue
        size, offset = int(m.group(3)), int(m.group(4))
        if size < page_size:  # the header read at open
            phases[phase]["(header)"] += 1
            continue
        pages[phase].append(offset // page_size + 1)
    names = owners(db)
    for phase, numbers in pages.items():
        for page in numbers:
            phases[phase][names.get(page, "(free or unknown)")] += 1
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("store", type=Path)
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--compress", action="store_true")
    parser.add_argument("--match-budget", type=int, default=None)
    args = parser.parse_args()
    if shutil.which("strace") is None:
        raise SystemExit("strace is not installed")
    scratch = args.store.with_name(f"reads-{args.store.stem}.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(args.store, scratch)
    core = _core(scratch)
    try:
        probes = queries(core, Corpus(), args.queries, random.Random(13))
        if args.compress:
            for k in range(args.queries):
                core.capture.capture_messages(f"compress-{k}", conversation(_COMPRESS_MESSAGES))
        settle(core)
    finally:
        core.shutdown()
    conn = sqlite3.connect(scratch)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    os.environ["CHRONICLE_BENCH_MARK"] = "1"
    if args.match_budget is not None:
        os.environ["CHRONICLE_BENCH_MATCH_BUDGET"] = str(args.match_budget)
    budget = "default" if args.match_budget is None else args.match_budget
    print(
        f"store {args.store} ({scratch.stat().st_size / 1e6:.0f} MB, pages of {page_size} B);"
        f" match budget {budget}"
    )
    jobs = [("first_search", q) for q in probes]
    if args.compress:
        jobs += [("compress", f"compress-{k}") for k in range(args.queries)]
    runs: dict[str, list[tuple[dict[str, float], dict[str, Counter[str]]]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="chronicle-reads-") as tmp:
            for role, arg in jobs:
                how = drop_cache(scratch)
                got = traced(role, scratch, arg, Path(tmp) / "trace")
                phases = reads(Path(tmp) / "trace", scratch, page_size)
                runs.setdefault(role, []).append((got, phases))
                timing = ", ".join(f"{k} {v:.1f}" for k, v in got.items())
                print(f"\n{role} {arg!r} ({timing}; {how})")
                for phase, counts in phases.items():
                    total = sum(counts.values())
                    top = ", ".join(f"{n} {c}" for n, c in counts.most_common(12))
                    print(f"  {phase:>5}: {total:4d} reads: {top}")
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    for role, done in runs.items():
        summary(role, done)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (wall times under strace)")
    return 0


def summary(role: str, runs: list[tuple[dict[str, float], dict[str, Counter[str]]]]) -> None:
    """min / median / max over the runs of one role: its timings (under strace), the reads of
    each phase, and of each b-tree that any run read 20 pages of or more."""

    def spread(values: list[float]) -> str:
        return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"

    print(f"\n{role}, {len(runs)} cold runs, min / median / max:")
    for key in runs[0][0]:
        print(f"  {key:>28}: {spread([got[key] for got, _ in runs])}")
    for phase in ("open", "run"):
        print(f"  {phase + ' reads':>28}: {spread([sum(p[phase].values()) for _, p in runs])}")
        names = {n for _, p in runs for n, c in p[phase].items() if c >= 20}
        for name in sorted(names, key=lambda n: -sum(p[phase][n] for _, p in runs)):
            print(f"  {name:>28}: {spread([p[phase][name] for _, p in runs])}")


if __name__ == "__main__":
    raise SystemExit(main())
