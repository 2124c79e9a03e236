"""Bounded time on Hermes' main thread: a lock held by another process costs compress and the
tools a short wait (`MAIN_THREAD_PATIENCE_MS`), then they degrade: compress returns a valid list
(its input), a tool a clear error. Nothing captured meanwhile is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from faults_support import both_slots, examples, report

from chronicle_engine.compaction.contract import violations
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.store import MAIN_THREAD_PATIENCE_MS

HOLD_S = 30
LIMIT_S = 2.0  # the target is ~1 s; the bound leaves slack for a loaded 2-core machine

_HOLDER = (
    "import sqlite3, sys, time\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('BEGIN EXCLUSIVE')\n"
    "print('locked', flush=True)\n"
    f"time.sleep({HOLD_S})\n"
    "c.execute('ROLLBACK')\n"
)


def test_an_exclusive_lock_held_for_thirty_seconds_costs_compress_and_tools_under_a_second(
    tmp_path: Path, monkeypatch: Any
) -> None:
    home = tmp_path / "home"
    config = {
        "compression": {"threshold": 0.6, "protect_first_n": 1, "protect_last_n": 4},
        "chronicle": {"busy_timeout_ms": 5000},
    }
    provider, engine = both_slots(home, config, monkeypatch)
    live: list[dict[str, Any]] = []
    for n in range(30):
        live += [
            {"role": "user", "content": f"request {n} about ticket OPS-{n} " + "x" * 900},
            {"role": "assistant", "content": f"Ticket OPS-{n} handled. " + "y" * 900},
        ]
    provider.sync_turn("", "", session_id="s1", messages=live)
    db = home / "chronicle" / "chronicle.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db)], stdout=subprocess.PIPE, text=True
    )
    times: dict[str, float] = {}
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        for attempt in range(examples(2, soak_factor=5)):
            more = [
                *live,
                {"role": "user", "content": f"and one more {attempt}"},
                {"role": "assistant", "content": "ok"},
            ]
            started = time.monotonic()
            out = engine.compress(list(more), current_tokens=60_000, force=True)
            times["compress"] = max(times.get("compress", 0), time.monotonic() - started)
            # Degraded: the input itself (Hermes reads it as "no progress"), never a broken list.
            assert out == more or not violations(more, out)
            for tool, args, slot in (
                ("chronicle_search", {"query": "OPS-3"}, provider),
                ("chronicle_remember", {"text": "a note"}, provider),
                ("chronicle_context_status", {}, engine),
            ):
                started = time.monotonic()
                result = json.loads(slot.handle_tool_call(tool, args))
                times[tool] = max(times.get(tool, 0), time.monotonic() - started)
                assert isinstance(result, dict)
            live = more
    finally:
        holder.kill()
        holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()
    report(
        "exclusive lock",
        held_s=HOLD_S,
        patience_ms=MAIN_THREAD_PATIENCE_MS,
        **{f"{k}_s": round(v, 3) for k, v in times.items()},
    )
    slowest = max(times.items(), key=lambda kv: kv[1])
    assert slowest[1] < LIMIT_S, times
    # The lock is gone: what compress captured while it was held reaches the log, once.
    provider.sync_turn("", "", session_id="s1", messages=live)
    core = ChronicleCore.get(db)
    stored = [
        e.payload["message"]
        for e in core.store.read(session="s1", namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    assert stored == live
    provider.shutdown()
