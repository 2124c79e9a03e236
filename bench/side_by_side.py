"""Run the benches of docs/benchmarks.md on two checkouts, alternating old and new per bench.

    python bench/side_by_side.py --old ../base --new . [--rounds 2] [--only compress hooks]

Each checkout needs its own virtualenv at `.venv` (the README's first command makes one). For each
bench, in each round, the old checkout's script runs, then the new one's, each in its own
checkout with its own interpreter, so every pair sees the same machine at nearly the same moment.
Every run's output is printed whole under a header naming the checkout, its commit, the command,
its wall time and the load average before and after; `--out` also keeps each output in a file.
The figures are read from those outputs: this script computes nothing of its own, so what it
prints is what each bench printed.
"""

from __future__ import annotations

import argparse
import os
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=Path("."), help="the checkout measured")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHES), default=None)
    parser.add_argument("--out", type=Path, default=None, help="a folder for each run's output")
    args = parser.parse_args()
    for checkout in (args.old, args.new):
        if not (checkout / ".venv" / "bin" / "python").exists():
            print(f"{checkout} has no .venv: run the README's first command there", file=sys.stderr)
            return 2
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    print(f"{os.uname().machine}, {os.cpu_count()} cpus, python {sys.version.split()[0]}")
    for name in args.only or list(BENCHES):
        for round_no in range(1, args.rounds + 1):
            for checkout in (args.old, args.new):
                run(checkout.resolve(), name, args.out, round_no)
    return 0


if __name__ == "__main__":
    sys.exit(main())
