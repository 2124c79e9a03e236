"""Run the benches of docs/benchmarks.md on two checkouts, alternating old and new per bench.

    python bench/side_by_side.py --old ../base --new . [--rounds 2] [--only compress hooks]

Each checkout needs its own virtualenv at `.venv` (the README's first command makes one). For each
bench, in each round, one checkout's script runs, then the other's, each in its own checkout with
its own interpreter, so every pair sees the same machine at nearly the same moment. The old
checkout goes first in odd rounds and second in even ones, so whatever a run leaves to the one
after it (a deleted store's blocks discarded, pages written back, caches warmed or cooled) falls
on both sides equally; use an even number of rounds. (Until 1 Dec 2026 the old checkout always
went first.)
Every run's output is printed whole under a header naming the checkout, its commit, the command,
its wall time and the load average before and after; `--out` also keeps each output in a file.

    python bench/side_by_side.py --table OUT_FOLDER

reads the outputs kept in a folder and prints, for each figure of docs/benchmarks.md's
side-by-side table, the median of each commit's rounds and every round's value. The figures are
read from the benches' outputs: this script measures nothing of its own.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The commands of docs/benchmarks.md's side-by-side table, each with the defaults it names.
BENCHES: dict[str, list[str]] = {
    "log_throughput": ["bench/log_throughput.py"],
    "sync_turn": ["bench/sync_turn.py"],
    "hooks": ["bench/hooks.py"],
    "compress": ["bench/compress.py", "--repeat", "7"],
    "vs_builtin": ["bench/vs_builtin.py"],
    "compaction_tokens": ["bench/compaction_tokens.py"],
    "locomo": ["bench/locomo.py"],
    "search_scale": ["bench/search_scale.py", "--messages", "100000"],
}
# The figures `--table` reads from each bench's output: (label, pattern of its first group).
FIGURES: dict[str, list[tuple[str, str]]] = {
    "log_throughput": [
        ("append, one event per transaction (events/s)", r"batch of 1:\s+([\d,]+)"),
        ("append, batches of 100 (events/s)", r"batch of 100:\s+([\d,]+)"),
        (
            "catch-up of a deterministic fold (events/s)",
            r"catch-up \(deterministic fold\):\s+([\d,]+)",
        ),
    ],
    "sync_turn": [
        ("sync_turn p50 (ms)", r"sync_turn \(10-message.*?p50 ([\d.]+)"),
        ("sync_turn p99 (ms)", r"sync_turn \(10-message.*?p99 ([\d.]+)"),
        ("prefetch p50 (ms)", r"^prefetch: p50 ([\d.]+)"),
        ("queue_prefetch p50 (ms)", r"^queue_prefetch: p50 ([\d.]+)"),
    ],
    "hooks": [
        (
            "hook call with nothing due, median (ms)",
            r"idle tick\('on_turn_start'\).*?median\s+([\d.]+)",
        ),
        (
            "consolidate a 10-message unit, median (ms)",
            r"consolidate a 10-message unit.*?median\s+([\d.]+)",
        ),
    ],
    "compress": [
        ("compress() of 1,000 messages (ms)", r"^\s+1000\s.*?(?:yes|no)\s+([\d.]+)"),
        ("compress() of 10,000 messages (ms)", r"^\s+10000\s.*?(?:yes|no)\s+([\d.]+)"),
    ],
    "vs_builtin": [
        (
            "planted facts found by chronicle_search (top 5, of 100)",
            r"Chronicle, extractive.*\|\s*(\d+)/100 \|\s*$",
        ),
        (
            "vs_builtin: extractive compress time (s)",
            r"Chronicle, extractive \(no model\) \| \d+ \| \d+ \| ([\d.]+)",
        ),
    ],
    "compaction_tokens": [
        ("compaction_tokens: peak prompt tokens", r"peak prompt tokens with Chronicle: ([\d,]+)"),
        ("compaction_tokens: compactions in 120 turns", r"compactions: (\d+)"),
    ],
    "locomo": [
        (
            "LoCoMo recall@10, categories 1-4",
            r"chronicle_search \(scope=messages.*?\n(?:.*\n)*?recall@10(?:\s+[\d.]+){4}\s+([\d.]+)",
        ),
        (
            "LoCoMo search p95 (ms)",
            r"chronicle_search \(scope=messages.*?\n(?:.*\n)*?latency\s+p50 [\d.]+ ms, p95 ([\d.]+)",
        ),
    ],
    "search_scale": [
        ("search p50 at 100k, scope messages (ms)", r"scope=messages\s+500 queries: p50 ([\d.]+)"),
        (
            "search p95 at 100k, scope messages (ms)",
            r"scope=messages\s+500 queries: p50 [\d.]+ ms, p95 ([\d.]+)",
        ),
        (
            "search p95 at 100k, scope all (ms)",
            r"scope=all\s+500 queries: p50 [\d.]+ ms, p95 ([\d.]+)",
        ),
    ],
}
TIMEOUT_S = 3600  # one bench in one checkout; the slowest (locomo, search_scale) take minutes


def commit_of(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%h"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(checkout: Path, name: str, out: Path | None, round_no: int) -> None:
    python = checkout / ".venv" / "bin" / "python"
    command = [str(python), *BENCHES[name]]
    before = load()
    started = time.perf_counter()
    # Each run gets a Hermes home of its own: a bench that opens the plugin's store from
    # HERMES_HOME must neither touch the user's ~/.hermes nor find what another run left there.
    with tempfile.TemporaryDirectory(prefix="side-by-side-") as home:
        done = subprocess.run(
            command,
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            env={**os.environ, "PYTHONHASHSEED": "0", "HERMES_HOME": home},
        )
    took = time.perf_counter() - started
    header = (
        f"=== {name} · {checkout} @ {commit_of(checkout)} · round {round_no} · "
        f"{' '.join(BENCHES[name])} · {took:.1f} s · load {before} -> {load()} · "
        f"exit {done.returncode}"
    )
    print(header)
    print(done.stdout.rstrip())
    if done.returncode:
        print(done.stderr.rstrip()[-3000:])
    print(flush=True)
    if out is not None:
        label = f"{name}.{commit_of(checkout)}.{round_no}.txt"
        (out / label).write_text(f"{header}\n{done.stdout}{done.stderr}", encoding="utf-8")


def table(folder: Path) -> None:
    """The medians of each commit's rounds, per figure, from the outputs kept in `folder`."""
    values: dict[str, dict[str, list[float]]] = {}
    commits: list[str] = []
    # Written in the order they ran: the old checkout's first (it opens round 1).
    for path in sorted(folder.glob("*.txt"), key=lambda p: p.stat().st_mtime_ns):
        name, commit, _round, _ = path.name.split(".")
        commits += [commit] if commit not in commits else []
        text = path.read_text(encoding="utf-8")
        for label, pattern in FIGURES.get(name, []):
            found = re.search(pattern, text, re.M)
            if found:
                values.setdefault(label, {}).setdefault(commit, []).append(
                    float(found.group(1).replace(",", ""))
                )
    old, *new = commits  # the old checkout ran first
    for commit in new:
        print(f"| measure | {old} | {commit} | change | rounds: {old} / {commit} |")
        print("| --- | ---: | ---: | ---: | --- |")
        for label, _ in (figure for figures in FIGURES.values() for figure in figures):
            by_commit = values.get(label, {})
            a, b = by_commit.get(old, []), by_commit.get(commit, [])
            if not a or not b:
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            change = f"{(mb - ma) / ma * 100:+.0f}%" if ma else "="
            shown = (lambda x: f"{x:,.0f}") if ma >= 100 else (lambda x: f"{x:.4g}")
            rounds = f"{', '.join(map(shown, a))} / {', '.join(map(shown, b))}"
            print(f"| {label} | {shown(ma)} | {shown(mb)} | {change} | {rounds} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=Path("."), help="the checkout measured")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHES), default=None)
    parser.add_argument("--out", type=Path, default=None, help="a folder for each run's output")
    parser.add_argument("--table", type=Path, default=None, help="print a kept folder's medians")
    args = parser.parse_args()
    if args.table is not None:
        table(args.table)
        return 0
    if args.old is None:
        parser.error("--old is required to run the benches")
    for checkout in (args.old, args.new):
        if not (checkout / ".venv" / "bin" / "python").exists():
            print(f"{checkout} has no .venv: run the README's first command there", file=sys.stderr)
            return 2
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    print(f"{os.uname().machine}, {os.cpu_count()} cpus, python {sys.version.split()[0]}")
    for name in args.only or list(BENCHES):
        for round_no in range(1, args.rounds + 1):
            pair = (args.old, args.new) if round_no % 2 else (args.new, args.old)
            for checkout in pair:
                run(checkout.resolve(), name, args.out, round_no)
    return 0


if __name__ == "__main__":
    sys.exit(main())
