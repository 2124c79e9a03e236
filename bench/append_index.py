"""What the log's (session, namespace, seq) index costs an append, and what swapping it costs.

    .venv/bin/python bench/append_index.py [--events 12000]       # instructions, by callgrind
    .venv/bin/python bench/append_index.py --swap STORE.db         # first writable open of a copy

Appends: messages (namespace chronicle.chat, 500 to a session) appended to a fresh store in
batches of 100, once for each layout of that index: none, full, partial with its term written
as `namespace IN (...)`, and partial as the store writes it (equalities joined by OR). Each
layout runs in its own process under `valgrind --tool=callgrind`; the figure is the process's
total, printed beside the layout without the index (the rest of each process is the same).

Swap: STORE.db (a lived-in store of bench/scale.py) copied to a scratch file, read through
once (warm), the partial index replaced by the full one as 37d6c0f built it, then opened
writable by this checkout, which drops the full index and builds the partial one holding the
write lock; prints that open's wall and CPU time, and a second open's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from chronicle_engine.log.store import _RARE, SQLiteEventStore  # noqa: E402

_ON = "ON events(session, namespace, seq)"
LAYOUTS = {
    "none": "",
    "full": f"CREATE INDEX x {_ON}",
    "partial, IN": f"CREATE INDEX x {_ON} WHERE namespace IN"
    " ('chronicle.context', 'chronicle.host', 'chronicle.session')",
    "partial, OR (the store's)": f"CREATE INDEX x {_ON} WHERE {_RARE}",
}

_CHILD = """
import sys, tempfile
from pathlib import Path
sys.path[:0] = [sys.argv[1]]
from pydantic import BaseModel
from chronicle_engine.log.events import EventTypeRegistry
from chronicle_engine.log.store import SQLiteEventStore
class Said(BaseModel):
    role: str
    text: str
types = EventTypeRegistry()
types.register("chronicle.chat", "Said", Said)
text = "The quick brown fox jumps over the lazy dog; then it checks ~/src/app.py line 42. " * 2
n, ddl = int(sys.argv[2]), sys.argv[3]
with tempfile.TemporaryDirectory() as tmp:
    store = SQLiteEventStore(Path(tmp) / "b.db")
    with store.atomic() as conn:
        conn.execute("DROP INDEX IF EXISTS events_rare_by_session")
        if ddl:
            conn.execute(ddl)
    pending = [types.pending(Said(role="user", text=text), session=f"s{i // 500}") for i in range(n)]
    for i in range(0, n, 100):
        store.append(pending[i : i + 100])
    store.close()
"""


def instructions(events: int) -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    totals: dict[str, int] = {}
    for name, ddl in LAYOUTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
                 sys.executable, "-c", _CHILD, str(ROOT), str(events), ddl],
                capture_output=True, text=True, timeout=1800, check=True,
            )  # fmt: skip
        found = re.search(r"Collected : (\d+)", done.stderr)
        assert found, done.stderr[-2000:]
        totals[name] = int(found.group(1))
        extra = totals[name] - totals["none"]
        print(
            f"{name:28s} {totals[name] / 1e6:9,.0f}M instructions, {extra / 1e6:+7,.0f}M"
            f" against none ({extra / events:+,.0f} an event)"
        )


def swap(store: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "swap.db"
        shutil.copy(store, copy)
        with open(copy, "rb") as f:
            while f.read(1 << 24):
                pass
        with sqlite3.connect(copy) as conn:
            conn.execute("DROP INDEX IF EXISTS events_rare_by_session")
            conn.execute(f"CREATE INDEX IF NOT EXISTS events_by_session_namespace {_ON}")
        for label in ("first writable open (full index swapped)", "second open"):
            t0, c0 = time.perf_counter(), time.process_time()
            SQLiteEventStore(copy).close()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"{label}: {wall:.3f} s wall, {cpu:.3f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=12_000)
    parser.add_argument("--swap", type=Path, default=None)
    args = parser.parse_args()
    if args.swap:
        swap(args.swap)
    else:
        instructions(args.events)


if __name__ == "__main__":
    main()
