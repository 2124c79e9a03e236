"""The context engine alone (Chronicle as the context engine, no memory slot): its store opens the
way the memory slot's does. A store that will not open keeps what compress and the session's end
were handed on disk, tries again after a backoff, and replays it once it opens; a damaged file is
moved aside and a fresh one started. Nothing reaches Hermes, and the failure is said once."""

from __future__ import annotations

import json
import logging
import random
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from faults_support import report, write_config
from test_compaction_support import load_plugin
from test_faults_store_open import _damage, logged, turns

from chronicle_engine.core import ChronicleCore


def engine_for(home: Path, session: str) -> Any:
    engine = import_module(load_plugin().__name__ + ".context").ChronicleContextEngine(
        hermes_home=str(home)
    )
    engine.update_model(model="m", context_length=64_000)
    engine.on_session_start(session, hermes_home=str(home), platform="cli", user_id="alice")
    return engine


def chat(n: int) -> list[dict[str, Any]]:
    return [
        {**m, "content": m["content"] + " " + "words " * 400}  # enough for a pass to fold
        for m in turns(n)
    ]


def test_the_engine_alone_keeps_what_it_is_handed_until_its_store_opens(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    blocker = home / "not-a-dir"
    blocker.write_text("a regular file")
    db = blocker / "chronicle.db"
    write_config(home, db)
    engine = engine_for(home, "s1")
    assert engine._open_core() is None and engine._opening is not None
    live = chat(12)
    handed = 0
    for k in range(4, 13, 4):  # compress on Hermes' thread: the host's list back, no raise
        view = live[: 2 * k]
        engine._opening.next_at = 0.0  # each call tries the store again
        assert engine.compress(view, force=True) is view
        handed += 1
    assert json.loads(engine.handle_tool_call("chronicle_context_status", {}))["error"]
    engine.on_session_end("s1", live)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "nothing is lost" in warnings[0], warnings
    blocker.unlink()  # the path can be made now: the next call opens the store and replays
    engine._opening.next_at = 0.0
    out = engine.compress(list(live), force=True)
    assert out != live and engine._open_core() is not None
    assert logged(db, "s1") == live  # every message handed over while it was closed, once
    report("engine alone: store would not open", calls_while_closed=handed + 1, turns_lost=0)
    for core in ChronicleCore.open_cores():
        core.shutdown()


def test_the_engine_alone_moves_a_damaged_database_aside(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = home / "chronicle" / "chronicle.db"
    first = engine_for(home, "old")
    first.on_session_end("old", chat(6))
    for core in ChronicleCore.open_cores():
        core.shutdown()
    _damage(db, "garbage header", random.Random(7))
    caplog.set_level(logging.ERROR)
    engine = engine_for(home, "s1")  # opens the store: the damaged file goes aside
    live = chat(12)
    out = engine.compress(list(live), force=True)
    assert out != live
    assert logged(db, "s1") == live
    aside = [p for p in db.parent.glob("chronicle.db.corrupt-*") if not p.name.endswith("-wal")]
    assert aside and any("doctor --salvage" in r.getMessage() for r in caplog.records)
    report("engine alone: damaged database", moved_aside=len(aside), turns_lost=0)
    for core in ChronicleCore.open_cores():
        core.shutdown()
