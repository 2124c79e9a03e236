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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from multihost import _core  # noqa: E402  (a core as each host opens it)
from pg_setup import logged_statements  # noqa: E402
from postgres_support import start_cluster  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with start_cluster() as cluster, tempfile.TemporaryDirectory() as home:
        core = _core("postgres", cluster.conninfo(), home)
        store, capture = core.store, core.capture
        live: list[dict[str, object]] = []
        start = last_start = 0
        for turn in range(20 + args.turns):
            if turn == 20:
                store.connection.execute("SET log_statement = 'all'")
                _, start = logged_statements(cluster)
            if turn == 19 + args.turns:
                _, last_start = logged_statements(cluster)
            live += [
                {"role": "user", "content": f"question {turn}"},
                {"role": "assistant", "content": f"answer {turn}"},
            ]
            capture.capture_turn("s", live)
        every, _ = logged_statements(cluster, start)
        last, _ = logged_statements(cluster, last_start)
        core.shutdown()
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
