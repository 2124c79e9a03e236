"""Append and catch-up throughput of the event log, on a WAL file database.

    python bench/log_throughput.py [--events 100000]

Prints events/s appended one at a time and in batches of 100 (each batch one transaction), and
events/s folded by a deterministic fold (per-session message counts and sizes) over the whole log.
Targets (issue 2): >= 50k events/s appended in batches of 100; >= 100k events/s folded.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chronicle_engine.log.events import DomainEvent, EventReader, EventTypeRegistry, UpcastRegistry
from chronicle_engine.log.projector import Projector
from chronicle_engine.log.store import SYNCHRONOUS, SQLiteEventStore, StoredEvent


class Said(DomainEvent, frozen=True):
    role: str
    text: str


class SessionStats:
    """Deterministic fold: messages and characters per (session, role)."""

    name = "session_stats"

    def apply(self, conn: sqlite3.Connection, events: Sequence[StoredEvent], prepared: Any) -> None:
        counts: Counter[tuple[str | None, str]] = Counter()
        chars: Counter[tuple[str | None, str]] = Counter()
        for e in events:
            key = (e.envelope.session, e.payload["role"])
            counts[key] += 1
            chars[key] += len(e.payload["text"])
        conn.executemany(
            "INSERT INTO session_stats VALUES (?, ?, ?, ?) ON CONFLICT(session, role) DO UPDATE"
            " SET n = n + excluded.n, chars = chars + excluded.chars",
            [(s, r, counts[(s, r)], chars[(s, r)]) for s, r in counts],
        )

    def reset(self, conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM session_stats")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    n = args.events
    types = EventTypeRegistry()
    types.register("bench", "Said", Said)
    text = "The quick brown fox jumps over the lazy dog; then it checks ~/src/app.py line 42. " * 2

    print(
        f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}"
        f" sqlite {sqlite3.sqlite_version}; journal WAL, synchronous={SYNCHRONOUS}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteEventStore(Path(tmp) / "bench.db")
        pending = [
            types.pending(
                Said(role="user" if i % 2 else "assistant", text=text), session=f"s{i // 500}"
            )
            for i in range(n)
        ]

        single = pending[: min(5000, n)]
        t0 = time.perf_counter()
        for e in single:
            store.append([e])
        dt = time.perf_counter() - t0
        print(
            f"append, batch of 1:   {len(single) / dt:>10,.0f} events/s  ({len(single):,} events)"
        )

        rest = pending[len(single) :]
        t0 = time.perf_counter()
        for i in range(0, len(rest), 100):
            store.append(rest[i : i + 100])
        dt = time.perf_counter() - t0
        print(f"append, batch of 100: {len(rest) / dt:>10,.0f} events/s  ({len(rest):,} events)")

        with store.atomic() as conn:
            conn.execute(
                "CREATE TABLE session_stats (session TEXT, role TEXT, n INTEGER, chars INTEGER,"
                " PRIMARY KEY (session, role))"
            )
        reader = EventReader(store, UpcastRegistry(), types)
        projector = Projector(store, reader, [SessionStats()], batch_size=2000)
        t0 = time.perf_counter()
        folded = projector.catch_up()
        dt = time.perf_counter() - t0
        print(f"catch-up (deterministic fold): {folded / dt:>10,.0f} events/s  ({folded:,} events)")
        t0 = time.perf_counter()
        projector.rebuild("session_stats")
        dt = time.perf_counter() - t0
        print(f"rebuild (same fold):           {n / dt:>10,.0f} events/s")
        store.close()


if __name__ == "__main__":
    main()
