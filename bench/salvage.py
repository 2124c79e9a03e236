"""How much `chronicle doctor --salvage` recovers from a damaged database.

Builds a database the way the memory slot fills one (sessions of turns through the provider, so
the log's pages sit among the search index's and the session tree's), checkpoints it, then for
each damage (truncated at several points, a garbage header, pages overwritten) salvages a copy
into a fresh store and prints how many of the events came back, beside how many of them still sat
on the pages the damage left intact (what any reader could hope to recover).

    python bench/salvage.py [--sessions 10] [--turns 100]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chronicle_engine.core import ChronicleCore  # noqa: E402
from chronicle_engine.log.pages import leaf_rows  # noqa: E402
from chronicle_engine.log.salvage import as_event, salvage  # noqa: E402
from chronicle_engine.log.store import PendingEvent, SQLiteEventStore  # noqa: E402
from provider import ChronicleMemoryProvider  # noqa: E402


def build(home: Path, sessions: int, turns: int) -> Path:
    provider = ChronicleMemoryProvider()
    provider.initialize("s0", hermes_home=str(home), platform="cli", user_id="alice")
    rng = random.Random(1)
    for s in range(sessions):
        live: list[dict[str, str]] = []
        for t in range(turns):
            words = " ".join(
                rng.choice(("deploy", "config", "error", "path", "figure", "note"))
                for _ in range(rng.randrange(5, 60))
            )
            live += [
                {"role": "user", "content": f"session {s} turn {t}: {words}"},
                {"role": "assistant", "content": f"Done {s}.{t}: {words[::-1]}"},
            ]
            provider.sync_turn("", "", session_id=f"s{s}", messages=live)
        provider.on_session_end(live)
    provider.shutdown()
    for core in ChronicleCore.open_cores():
        core.shutdown()
    return home / "chronicle" / "chronicle.db"


def events_by_page(db: Path) -> dict[int, tuple[int, PendingEvent]]:
    """seq -> (the page its row is on, the event), read from an intact file."""
    found: dict[int, tuple[int, PendingEvent]] = {}
    for page, seq, row in leaf_rows(db):
        event = as_event(row)
        if event is not None:
            found[seq] = (page, event)
    return found


def damage(data: bytes, how: str, rng: random.Random) -> tuple[bytes, set[int]]:
    """The damaged bytes, and the page numbers it left intact."""
    page = 4096
    count = len(data) // page
    if how.startswith("truncated at "):
        keep = int(len(data) * float(how.split()[-1].rstrip("%")) / 100)
        return data[:keep], {n for n in range(1, count + 1) if n * page <= keep}
    out = bytearray(data)
    if how == "garbage header":
        out[:100] = bytes(rng.randrange(256) for _ in range(100))
        return bytes(out), set(range(2, count + 1))
    k = int(how.split()[0])  # "N random pages overwritten"
    hit = set(rng.sample(range(2, count + 1), k))
    for n in hit:
        at = (n - 1) * page
        out[at : at + page] = bytes(rng.randrange(256) for _ in range(page))
    return bytes(out), set(range(1, count + 1)) - hit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chronicle-salvage-"))
    try:
        home = work / "home"
        home.mkdir()
        db = build(home, args.sessions, args.turns)
        data = db.read_bytes()
        where = {seq: page for seq, (page, _) in events_by_page(db).items()}
        events = len(where)
        print(f"database: {len(data) // 4096} pages, {events} events")
        rng = random.Random(7)
        damages = [f"truncated at {p}%" for p in (10, 25, 50, 75, 90, 99)]
        damages += ["garbage header", "1 random pages overwritten", "10 random pages overwritten"]
        for how in damages:
            bytes_, intact = damage(data, how, rng)
            broken = work / "broken.db"
            broken.write_bytes(bytes_)
            target = work / "target.db"
            for leftover in work.glob("target.db*"):
                leftover.unlink()
            store = SQLiteEventStore(target)
            started = time.perf_counter()
            found = salvage(broken, store)
            seconds = time.perf_counter() - started
            store.close()
            reachable = sum(1 for page in where.values() if page in intact)
            print(
                json.dumps(
                    {
                        "damage": how,
                        "events": events,
                        "on_intact_pages": reachable,
                        "salvaged": found.stored,
                        "unreadable_cells": found.unreadable,
                        "seconds": round(seconds, 3),
                    }
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
