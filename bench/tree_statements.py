"""Statements a captured turn sends PostgreSQL: a load-independent measure of a tree write.

    python bench/tree_statements.py [--turns 20]

Starts a throwaway local server (tests/postgres_support.py), opens a core on it as
`bench/multihost.py`'s hosts do, captures a chat through its capture, turns on the server's
statement log for the capturing connection after 20 warm turns, captures `--turns` more, and
prints the statements the server logged per turn (BEGIN, savepoints and COMMIT included) and the
last turn's statements. Every statement is one round trip.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from multihost import _core  # noqa: E402  (a core as each host opens it)
from postgres_support import start_cluster  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with start_cluster() as cluster, tempfile.TemporaryDirectory() as home:
        core = _core("postgres", cluster.conninfo(), home)
        store, capture = core.store, core.capture
        live: list[dict[str, object]] = []
        log = cluster.root / "server.log"
        start = last_start = 0
        for turn in range(20 + args.turns):
            if turn == 20:
                store.connection.execute("SET log_statement = 'all'")
                start = len(log.read_text().splitlines())
            if turn == 19 + args.turns:
                time.sleep(0.5)
                last_start = len(log.read_text().splitlines())
            live += [
                {"role": "user", "content": f"question {turn}"},
                {"role": "assistant", "content": f"answer {turn}"},
            ]
            capture.capture_turn("s", live)
        time.sleep(0.5)  # the server's log is written asynchronously
        lines = log.read_text().splitlines()
        core.shutdown()

    def logged(since: int) -> list[str]:
        return [
            line.split("LOG:  ", 1)[1]
            for line in lines[since:]
            if "LOG:  statement:" in line or "LOG:  execute" in line
        ]

    every, last = logged(start), logged(last_start)
    print(
        json.dumps(
            {
                "turns": args.turns,
                "statements": len(every),
                "per_turn": round(len(every) / args.turns, 2),
                "last_turn": [s[:100] for s in last],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
