"""Search latency at scale: a generated corpus of 1M captured messages, then chronicle_search.

The corpus is deterministic (seeded): sessions of user/assistant turns whose words follow one
Zipf law: English function words at the head, then 30,000 invented content words, so the
commonest content words are in several percent of all messages (the case that makes full-text
ranking slow) and rare words are rare. Messages are
appended as MessageCaptured events and folded by recall's own fold, exactly as captured chat is.

Queries imitate someone recalling something: 2-5 content words of a random earlier message,
sometimes with a very common word added, sometimes with a word that occurs nowhere.

    python bench/search_scale.py [--messages 1000000] [--users 1] [--queries 500]
                                 [--db PATH] [--reuse]

Prints build time, then search latency p50/p95/max and the process CPU time a query takes, per
scope and for `by_session` (one result per session, pooled from the full-text candidates), then
the first search after a capture of 10,000 more messages, then queries that name a time (a day
of 1,000 messages captured for it, and the month of the whole store). Target: p95 < 20 ms at
1M, the first search included.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chronicle_engine.capture.events import (
    MessageCaptured,
    SessionEnded,
    register_capture_events,
)
from chronicle_engine.core import ChronicleCore
from chronicle_engine.recall.text import STOPWORDS, content_words

_SYLLABLES = [a + b for a in "bcdfghjklmnprstvwz" for b in ("a", "e", "i", "o", "u", "ai", "ou")]
_FUNCTION = sorted(STOPWORDS - {"d", "m", "s", "t", "ll", "re", "ve"})


def vocabulary(size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Corpus:
    """Words drawn from one Zipf law: English function words take the head ranks (as they do
    in real text), invented content words the long tail after them."""

    def __init__(self, seed: int = 7, vocab: int = 30_000, exponent: float = 1.0) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(vocab, self.rng)
        self.rng.shuffle(self.words)
        ranked = list(_FUNCTION) + self.words
        weights = [1 / (rank + 1) ** exponent for rank in range(len(ranked))]
        self.ranked = ranked
        self.cumulative = list(itertools.accumulate(weights))

    def word(self) -> str:
        x = self.rng.random() * self.cumulative[-1]
        return self.ranked[bisect.bisect(self.cumulative, x)]

    def message(self) -> str:
        return " ".join(self.word() for _ in range(self.rng.randint(6, 40))).capitalize() + "."


def build(
    core: ChronicleCore,
    messages: int,
    users: int,
    corpus: Corpus,
    *,
    end_sessions: bool = False,
    index: bool = True,
    progress: int = 100_000,
) -> float:
    """Append `messages` captured messages, 40 to a session, and index them (unless `index` is
    false: the folds are then as far behind as after an import). With `end_sessions`, each
    session is closed as the host's on_session_end records it."""
    register_capture_events(core.types)
    started = time.perf_counter()
    batch = []
    session_len = 40
    for i in range(messages):
        session = i // session_len
        user = f"user{session % users}" if users > 1 else None
        role = "user" if i % 2 == 0 else "assistant"
        text = corpus.message()
        event = MessageCaptured(
            role=role,
            message={"role": role, "content": text},
            fingerprint=f"{session}:{i}",
            speaker="person" if role == "user" else "assistant",
            text=text,
            person_text=text if role == "user" else "",
            turn=i % session_len,
            user_id=user,
        )
        batch.append(core.types.pending(event, session=f"s{session}"))
        if end_sessions and i % session_len == session_len - 1:
            ended = SessionEnded(messages=session_len, captured=session_len)
            batch.append(core.types.pending(ended, session=f"s{session}"))
        if len(batch) >= 5000:
            core.store.append(batch)
            batch = []
        if (i + 1) % progress == 0:
            if index:
                core.recall.catch_up()
            rate = (i + 1) / (time.perf_counter() - started)
            done = "captured and indexed" if index else "captured"
            print(f"  {i + 1:>9,} messages {done} ({rate:,.0f}/s)", flush=True)
    if batch:
        core.store.append(batch)
    if index:
        core.recall.catch_up()
    return time.perf_counter() - started


def queries(core: ChronicleCore, corpus: Corpus, n: int, rng: random.Random) -> list[str]:
    last = core.store.last_seq()
    out: list[str] = []
    while len(out) < n:
        event = core.store.get(rng.randint(1, last))
        if event is None or event.envelope.type != "MessageCaptured":
            continue
        words = content_words(str(event.payload.get("text", "")))
        if len(words) < 2:
            continue
        picked = rng.sample(words, min(len(words), rng.randint(2, 5)))
        roll = rng.random()
        if roll < 0.2:
            picked.append(corpus.words[rng.randint(0, 5)])  # one of the commonest words
        elif roll < 0.3:
            picked.append("zzqxnotaword")
        out.append("what did we say about " + " ".join(picked) + "?")
    return out


def first_search_after_capture(
    core: ChronicleCore, corpus: Corpus, asked: list[str], user: str | None, count: int
) -> dict[str, object]:
    """Capture `count` messages through the real capture path (one list, as a long history
    arrives in one sync_turn), then time the very next search: the index must have caught up
    on capture, not on this read."""
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": corpus.message()}
        for i in range(count)
    ]
    t0 = time.perf_counter()
    core.capture.capture_messages("imported-history", history, user_id=user)
    captured = time.perf_counter() - t0
    t0 = time.perf_counter()
    core.recall.search(asked[0], user_id=user, scope="messages", limit=10)
    first = (time.perf_counter() - t0) * 1000
    print(f"first search after capturing {count:,} messages ({captured:.1f} s): {first:.2f} ms")
    return {
        "op": f"first search after a {count:,}-message capture",
        "events": core.store.count(),
        "p50_ms": round(first, 3),
        "p95_ms": round(first, 3),
    }


DATED_DAY = "2024-02-29T12:00:00+00:00"
DATED_COUNT = 1_000


def dated_searches(
    core: ChronicleCore, corpus: Corpus, asked: list[str], user: str | None
) -> list[dict[str, object]]:
    """Queries that name a time (`search._add_time`): a day that holds `DATED_COUNT` messages
    (captured here, dated `DATED_DAY`), so the time is scored as a word and its own matches
    join the candidates; February of any year (the same messages, read in each year from the
    oldest message to the newest); and the month of the store's newest message, which holds
    more than the match budget, so the time is counted up to the budget and left to the
    boost."""
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": corpus.message()}
        for i in range(DATED_COUNT)
    ]
    # The store's newest time (not its last message's: a rerun finds the dated day's last)
    with core.store.reading() as conn:  # type: ignore[attr-defined]
        row = conn.execute("SELECT max(ts) FROM recall_messages").fetchone()
    newest = datetime.fromtimestamp(float(row[0]), UTC) if row and row[0] else datetime.now(UTC)
    core.capture.capture_messages("dated-history", history, user_id=user, created_at=DATED_DAY)
    points: list[dict[str, object]] = []
    for label, phrase in (
        (f"naming a day of {DATED_COUNT:,} messages", "on 29 February, 2024"),
        (f"naming a month of any year ({DATED_COUNT:,} messages)", "in February"),
        ("naming a month of most messages", f"in {newest:%B %Y}"),
    ):
        dated = [q.rstrip("?") + f" {phrase}?" for q in asked]
        for q in dated[:20]:
            core.recall.search(q, user_id=user, scope="messages", limit=10)
        latencies = []
        cpu = time.process_time()
        for q in dated:
            t0 = time.perf_counter()
            core.recall.search(q, user_id=user, scope="messages", limit=10)
            latencies.append((time.perf_counter() - t0) * 1000)
        cpu_ms = (time.process_time() - cpu) * 1000 / len(dated)
        p50, p95 = statistics.median(latencies), percentile(latencies, 0.95)
        print(
            f"scope=messages, {label} ('{phrase}'): p50 {p50:.2f} ms, p95 {p95:.2f} ms,"
            f" max {max(latencies):.2f} ms, CPU {cpu_ms:.2f} ms a query"
        )
        points.append(
            {
                "op": f"search (messages, {label})",
                "events": core.store.count(),
                "p50_ms": round(p50, 3),
                "p95_ms": round(p95, 3),
                "cpu_ms_per_query": round(cpu_ms, 3),
            }
        )
    return points


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


PG_SETTINGS = ("shared_buffers=1GB",)
"""The bench server's settings beyond tests/postgres_support.py's (a host with 24 GB)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--db", type=Path, default=None, help="database file (default: temp)")
    parser.add_argument("--reuse", action="store_true", help="search an existing --db as is")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the store on PostgreSQL: a server on 127.0.0.1 whose data directory is kept in "
        "--pg-cache, holding one built store per --messages/--users; each run searches a copy",
    )
    parser.add_argument("--pg-cache", type=Path, default=Path("/tmp/pg-scale-cache"))
    parser.add_argument(
        "--statements",
        action="store_true",
        help="with --postgres: the server counts each statement's calls, time and rows "
        "(pg_stat_statements) over the scope `all` queries, and the run prints where a search's "
        "server time goes",
    )
    parser.add_argument(
        "--warm-pass",
        action="store_true",
        help="before timing, ask every query once in each scope (on PostgreSQL each run searches "
        "a fresh copy, whose pages otherwise land on whichever scope is timed first)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent / "out" / "latency.json",
        help="merge this run's points into this file (for bench/plots.py)",
    )
    args = parser.parse_args(argv)
    corpus = Corpus()
    with tempfile.TemporaryDirectory(prefix="chronicle-scale-") as tmp:
        if args.postgres:
            points = _on_postgres(args, corpus, Path(tmp))
        else:
            path = args.db or Path(tmp) / "scale.db"
            opening = time.perf_counter()
            core = ChronicleCore.get(path)
            try:
                if args.reuse and core.store.count() > 0:
                    core.recall.catch_up()
                    # what a new build's first start costs on an older store: its migrations
                    print(
                        f"reusing {path}: {core.store.count():,} events, opened and caught up"
                        f" in {time.perf_counter() - opening:.2f} s"
                    )
                else:
                    if core.store.count() > 0:
                        print(f"{path} is not empty; pass --reuse or another --db", file=sys.stderr)
                        return 2
                    _build(core, args, corpus, lambda: path.stat().st_size)
                points = measure(core, corpus, args.queries, args.users, warm_pass=args.warm_pass)
            finally:
                core.shutdown()
    write_points(
        args.out, points, " ".join(["python bench/search_scale.py", *(argv or sys.argv[1:])])
    )
    return 0


def _build(
    core: ChronicleCore, args: argparse.Namespace, corpus: Corpus, size: Callable[[], int]
) -> None:
    print(f"building {args.messages:,} messages for {args.users} user(s) in {core.location}")
    seconds = build(core, args.messages, args.users, corpus)
    print(
        f"built in {seconds:.0f} s ({args.messages / seconds:,.0f} messages/s), "
        f"{size() / 1e6:,.0f} MB"
    )


def _on_postgres(args: argparse.Namespace, corpus: Corpus, home: Path) -> list[dict[str, object]]:
    """Build (once, kept in the cache's server) and measure the store on PostgreSQL."""
    import psycopg
    from pg_setup import cached_database

    from chronicle_engine.config import Config

    def core_on(conninfo: str) -> ChronicleCore:
        return ChronicleCore(conninfo, Config({"store": conninfo}, hermes_home=home))

    def size(core: ChronicleCore) -> int:
        with core.store.reading() as conn:  # type: ignore[attr-defined]
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0])

    def make(conninfo: str) -> None:
        core = core_on(conninfo)
        try:
            _build(core, args, Corpus(), lambda: size(core))
        finally:
            core.shutdown()
        # What autovacuum does to a live store soon after: statistics for the planner, the GIN
        # indexes' pending lists merged. A copy made before it would search an unplanned store.
        started = time.perf_counter()
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")
        print(f"vacuumed and analyzed in {time.perf_counter() - started:.0f} s")

    def migrate(conninfo: str) -> None:
        """Open the kept store with this code (recall's index migrates its tables when built)
        and fold the session tree, as a store captured turn by turn has it: otherwise the
        capture below would first fold the whole log's sessions."""
        core = core_on(conninfo)
        try:
            started = time.perf_counter()
            core.recall.catch_up()
            core.sessions.refresh()
            print(f"kept store opened by this code in {time.perf_counter() - started:.1f} s")
        finally:
            core.shutdown()

    name = f"scale_{args.messages}_{args.users}"
    settings = PG_SETTINGS + (_STATEMENT_SETTINGS if args.statements else ())
    print(f"PostgreSQL kept in {args.pg_cache} ({', '.join(settings)}), store {name}")
    with cached_database(args.pg_cache, name, make, settings, migrate) as conninfo:
        core = core_on(conninfo)
        try:
            print(
                f"searching a copy of {name}: {core.store.count():,} events, {size(core) / 1e6:,.0f} MB"
            )
            core.recall.catch_up()
            counted = _StatementCounts(conninfo) if args.statements else None
            return measure(
                core, corpus, args.queries, args.users, counted, warm_pass=args.warm_pass
            )
        finally:
            core.shutdown()


_STATEMENT_SETTINGS = (
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track_planning=on",
)


class _StatementCounts:
    """What the server spent on each statement (pg_stat_statements, planning included) between
    `start` and `report`, per search."""

    def __init__(self, conninfo: str) -> None:
        import psycopg

        self.conninfo = conninfo
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def start(self) -> None:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")

    def report(self, searches: int) -> None:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT calls, total_exec_time + total_plan_time, rows, shared_blks_hit,"
                " shared_blks_read, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
                " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
                " WHERE datname = current_database()) AND query NOT LIKE '%pg_stat_statements%'"
                " ORDER BY 2 DESC"
            ).fetchall()
        total = sum(float(r[1]) for r in rows)
        calls = sum(int(r[0]) for r in rows)
        print(
            f"  server time {total / searches:.2f} ms a search over {calls / searches:.1f}"
            " statements; the five costliest statements:"
        )
        for n, ms, got, hit, read, sql in rows[:5]:
            print(
                f"  {float(ms) / searches:6.2f} ms a search, {int(n):5d} calls,"
                f" {int(got) / max(int(n), 1):7.1f} rows and {int(hit) / max(int(n), 1):5.0f}"
                f" + {int(read) / max(int(n), 1):4.0f} pages (cached + read) a call: {sql}"
            )


def measure(
    core: ChronicleCore,
    corpus: Corpus,
    count: int,
    users: int,
    counted: _StatementCounts | None = None,
    *,
    warm_pass: bool = False,
) -> list[dict[str, object]]:
    """Search latency per scope on a built store, then the first search after a capture
    (`counted`: the server's statements over scope `all`'s queries; `warm_pass`: every query
    asked once in each scope before anything is timed)."""
    points: list[dict[str, object]] = []
    rng = random.Random(11)
    asked = queries(core, corpus, count, rng)
    user = "user0" if users > 1 else None
    for q in asked[:20]:  # warm the page cache and the frequency cache like a live process
        core.recall.search(q, user_id=user)
    if warm_pass:
        for scope in ("messages", "all"):
            for q in asked:
                core.recall.search(q, user_id=user, scope=scope, limit=10)
    for label, scope, by_session in (
        ("messages", "messages", False),
        ("all", "all", False),
        ("all, by_session", "all", True),
    ):
        latencies = []
        found = 0
        if counted is not None and scope == "all" and not by_session:
            counted.start()
        cpu = time.process_time()
        for q in asked:
            t0 = time.perf_counter()
            results = core.recall.search(
                q, user_id=user, scope=scope, limit=10, by_session=by_session
            )
            latencies.append((time.perf_counter() - t0) * 1000)
            found += bool(results)
        cpu_ms = (time.process_time() - cpu) * 1000 / len(asked)
        if counted is not None and scope == "all" and not by_session:
            counted.report(len(asked))
        points.append(
            {
                "op": f"search ({label})",
                "events": core.store.count(),
                "p50_ms": round(statistics.median(latencies), 3),
                "p95_ms": round(percentile(latencies, 0.95), 3),
                "cpu_ms_per_query": round(cpu_ms, 3),
            }
        )
        print(
            f"scope={label:<15} {len(asked)} queries: p50 {statistics.median(latencies):.2f} ms,"
            f" p95 {percentile(latencies, 0.95):.2f} ms, max {max(latencies):.2f} ms, CPU"
            f" {cpu_ms:.2f} ms a query ({found} with results)"
        )
    # The messages captured after the store was built come from a generator of their own,
    # seeded alike in every run: a rerun on the same store (`--reuse`) sends the same lists,
    # which capture recognises, so the dated day and month keep their 1,000 messages (more
    # would pass the match budget and leave the time to the boost, a cheaper path).
    later = Corpus()
    later.rng = random.Random(13)
    points.append(first_search_after_capture(core, later, asked, user, 10_000))
    points.extend(dated_searches(core, later, asked, user))
    return points


def write_points(out: Path, points: list[dict[str, object]], command: str) -> None:
    """Merge points into the latency file, replacing any earlier point at the same op and size."""
    data: dict[str, Any] = {"points": []}
    if out.exists():
        data = json.loads(out.read_text(encoding="utf-8"))
    fresh = {(p["op"], p["events"]) for p in points}
    kept = [p for p in data.get("points", []) if (p["op"], p["events"]) not in fresh]
    data["points"] = kept + points
    data["machine"] = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    data["command"] = "python bench/search_scale.py --messages N (N = each size plotted)"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1), encoding="utf-8")
    print(f"wrote {out} ({command})")


if __name__ == "__main__":
    raise SystemExit(main())
