"""Statements a search sends PostgreSQL: a load-independent measure of a search's round trips.

    python bench/search_statements.py [--sessions 20] [--turns 20] [--dated]

Starts a throwaway local server (tests/postgres_support.py), opens a core on it as
`bench/multihost.py`'s hosts do, captures `--sessions` chats of `--turns` turns, folds them,
searches three warm-up queries, then turns on the server's statement log for the searching
connection and runs each of QUERIES once (scope `all`, 10 results). Prints the statements the
server logged per search and the last search's statements. Every statement is one round trip.
`--dated` adds the day the chats were captured to each query ("... on 3 December, 2026"), so
each search also scores that time as a word of the query (`search._add_time`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from multihost import _core  # noqa: E402  (a core as each host opens it)
from pg_setup import logged_statements  # noqa: E402
from postgres_support import start_cluster  # noqa: E402

WARM = ("invoice shipment", "order 21 invoice", "Paris day 17")
QUERIES = ("invoice for order 35", "shipment Paris", "day 3 order", "what went out to Paris")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--dated", action="store_true", help="name the capture's day in each query")
    args = parser.parse_args()
    day = f" on {datetime.now(UTC):%d %B, %Y}" if args.dated else ""
    queries = [query + day for query in QUERIES]
    with start_cluster() as cluster, tempfile.TemporaryDirectory() as home:
        core = _core("postgres", cluster.conninfo(), home)
        for s in range(args.sessions):
            live: list[dict[str, object]] = []
            for t in range(args.turns):
                live += [
                    {
                        "role": "user",
                        "content": f"session {s} turn {t}: what about the invoice for order"
                        f" {t * 7} and the shipment to Paris?",
                    },
                    {
                        "role": "assistant",
                        "content": f"the invoice for order {t * 7} went out on day {t % 28 + 1}",
                    },
                ]
                core.capture.capture_turn(f"c{s}", live)
        recall = core.recall
        recall.catch_up()
        for query in WARM:
            recall.search(query, limit=10)
        _, start = logged_statements(cluster)
        core.store.connection.execute("SET log_statement = 'all'")
        for i, query in enumerate(queries):
            if i == len(queries) - 1:
                _, last_start = logged_statements(cluster)
            recall.search(query, limit=10)
        core.store.connection.execute("SET log_statement = 'none'")
        every, _ = logged_statements(cluster, start)
        last, _ = logged_statements(cluster, last_start)
        core.shutdown()
    print(
        json.dumps(
            {
                "searches": len(queries),
                "statements": len(every),
                "per_search": round(len(every) / len(queries), 2),
                "last_search": [s[:100] for s in last],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
