"""Statements a captured turn sends PostgreSQL: a load-independent measure of a tree write.

    python bench/tree_statements.py [--turns 20]

Starts a throwaway local server (tests/postgres_support.py), captures a chat through the
session tree as `bench/multihost.py`'s hosts do, turns on the server's statement log for the
capturing connection after 20 warm turns, captures `--turns` more, and prints the statements the
server logged per turn (BEGIN, savepoints and COMMIT included) and the last turn's statements.
Every statement is one round trip except the entries' rows, which psycopg pipelines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from multihost import _parts  # noqa: E402  (the store, tree and capture as a host builds them)
from postgres_support import start_cluster  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with start_cluster() as cluster:
        store, _tree, capture = _parts("postgres", cluster.conninfo())
        live: list[dict[str, object]] = []
        log = cluster.root / "server.log"
        start = 0
        for turn in range(20 + args.turns):
            if turn == 20:
                store.connection.execute("SET log_statement = 'all'")
                start = len(log.read_text().splitlines())
            live += [
                {"role": "user", "content": f"question {turn}"},
                {"role": "assistant", "content": f"answer {turn}"},
            ]
            capture.capture_turn("s", live)
        time.sleep(0.5)  # the server's log is written asynchronously
        logged = [
            line.split("LOG:  ", 1)[1]
            for line in log.read_text().splitlines()[start:]
            if "LOG:  statement:" in line or "LOG:  execute" in line
        ]
        store.close()
    last = logged[logged.index("statement: BEGIN", len(logged) - 20) :] if logged else []
    print(
        json.dumps(
            {
                "turns": args.turns,
                "statements": len(logged),
                "per_turn": round(len(logged) / args.turns, 2),
                "last_turn": [s[:100] for s in last],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
