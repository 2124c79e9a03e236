"""Catch-up memory: the session tree folding a backlog of N captured messages at once.

    .venv/bin/python bench/catchup.py [--events 20000] [--db PATH]

Builds a store whose log holds `--events` captured messages (200 to a session) that the session
tree has never folded, as a bulk build or an import leaves it, then opens it in a fresh process
and times the first write, which folds the whole backlog (`SessionTree.refresh`). Prints that
process's peak RSS before and after the catch-up (resource.getrusage, so the build's memory is
not counted) and the catch-up's wall time. With `--db` an existing file is reused as it is.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from sync_turn import fill  # noqa: E402  (the same captured messages, 200 to a session)

from chronicle_engine.core import ChronicleCore  # noqa: E402


def build(db: Path, events: int) -> None:
    """`events` captured messages appended straight to the log (the tree folds none of them)."""
    core = ChronicleCore(db)
    try:
        fill(core, events, random.Random(7))
    finally:
        core.shutdown()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def catch_up(db: Path) -> dict[str, float]:
    """Run in a fresh process: open the store and fold the backlog into the session tree."""
    core = ChronicleCore(db)
    try:
        before = peak_rss_mb()
        t0 = time.perf_counter()
        core.sessions.refresh()
        seconds = time.perf_counter() - t0
        with core.store.reading() as conn:
            entries = conn.execute("SELECT COUNT(*) FROM session_entries").fetchone()[0]
        return {
            "entries": int(entries),
            "seconds": round(seconds, 2),
            "peak_rss_mb_before": round(before, 1),
            "peak_rss_mb_after": round(peak_rss_mb(), 1),
        }
    finally:
        core.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--db", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(catch_up(Path(args.child))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "catchup.db"
        if not db.exists():
            t0 = time.perf_counter()
            build(db, args.events)
            print(f"built {args.events} events in {time.perf_counter() - t0:.1f} s: {db}")
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(db)],
            check=True,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"catch-up of {result['entries']} entries: {result['seconds']} s, peak RSS "
            f"{result['peak_rss_mb_before']} MB opened -> {result['peak_rss_mb_after']} MB folded"
        )


if __name__ == "__main__":
    main()
