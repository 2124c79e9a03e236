"""What the server spends on each statement of `bench/multihost.py`'s run, by who sent it.

    python bench/multihost_statements.py [--seconds 30] [--searchers 0] [--compactors 1]
                                         [--top 12] [--explain]

Starts a throwaway local server that logs every statement's duration
(`log_min_duration_statement = 0`), runs `bench/multihost.py`'s PostgreSQL run on it (4 hosts x 4
threads, a turn a second each with Poisson arrivals, the searchers and compactors asked for),
prints the run's figures, then each statement's count, median and total server time, the
compactor's backends apart from everyone else's (a compactor's backend is one that inserted
sections). `--explain` loads auto_explain instead and prints the plans of statements that took
2 ms or more, by their first node: a sequential scan where an index look-up was meant shows
there. The log costs the server time of its own, so the run's figures are not the plain run's.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

import multihost  # noqa: E402
from postgres_support import start_cluster  # noqa: E402

_DURATION = re.compile(
    r"\[(\d+)\] LOG:  duration: ([\d.]+) ms  (?:execute \S+|statement): (.{0,48})"
)
_PLAN = re.compile(r"duration: ([\d.]+) ms  plan:\n\tQuery Text: (.{0,60}).*\n\t(.{0,48})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--searchers", type=int, default=0)
    parser.add_argument("--compactors", type=int, default=1)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    settings: tuple[str, ...] = (
        (
            "session_preload_libraries=auto_explain",
            "auto_explain.log_min_duration=2",
            "auto_explain.log_nested_statements=on",
        )
        if args.explain
        else ("log_min_duration_statement=0",)
    )
    with start_cluster(settings=settings) as cluster:
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
        report = multihost.run(
            "postgres",
            cluster.conninfo(),
            4,
            4,
            args.seconds,
            1000.0,
            10.0,
            0.0,
            postmaster,
            (args.searchers, args.compactors),
            poisson=True,
        )
        text = (cluster.root / "server.log").read_text()
    keys = ("turns", "sync_turn_p50_ms", "sync_turn_p99_ms", "compressions", "searches", "lost")
    print(json.dumps({key: report.get(key) for key in keys}))
    if args.explain:
        plans: Counter[tuple[str, str]] = Counter()
        for _, query, node in _PLAN.findall(text):
            plans[(query.strip(), node.strip())] += 1
        for (query, node), count in plans.most_common(args.top):
            print(json.dumps({"plans": count, "statement": query, "first node": node}))
        return
    compactors = set(
        re.findall(r"\[(\d+)\] LOG:  duration: [\d.]+ ms  execute \S+: INSERT INTO sections", text)
    )
    times: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
    for pid, ms, statement in _DURATION.findall(text):
        who = "compactor" if pid in compactors else "others"
        times[(who, statement.strip())].append(float(ms))
    ranked = sorted(times.items(), key=lambda item: -sum(item[1]))[: args.top]
    for (who, statement), values in ranked:
        row = {
            "who": who,
            "statement": statement,
            "count": len(values),
            "p50_ms": round(statistics.median(values), 3),
            "total_ms": round(sum(values)),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
