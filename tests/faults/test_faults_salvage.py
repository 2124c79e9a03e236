"""Salvage from a damaged database: every event still on an intact page comes back, exactly.

A database is filled the way the memory slot fills one (sessions of turns, so the log's pages sit
among the search index's and the session tree's), then damaged: truncated at several points, a
garbage header, pages overwritten, and a file whose newest events are only in its -wal.
`chronicle doctor --salvage` must recover every event whose page the damage left (what the page
walk can reach), byte for byte, and never write the damaged file.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from faults_support import examples, report
from test_compaction_support import load_bench

from chronicle_engine.cli import Exit, main
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.store import read_payload
from provider import ChronicleMemoryProvider

bench = load_bench("salvage")


def salvaged(target: Path) -> dict[str, tuple[str, str, str | None, str]]:
    """id -> (namespace, type, session, payload as stored) of the events in `target`."""
    with sqlite3.connect(target) as conn:
        rows = conn.execute("SELECT id, namespace, type, session, payload FROM events").fetchall()
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("salvage") / "home"
    home.mkdir()
    return Path(bench.build(home, sessions=examples(3, soak_factor=4), turns=40))


DAMAGES = [
    "truncated at 33%",
    "truncated at 60%",
    "truncated at 90%",
    "garbage header",
    "5 random pages overwritten",
]


@pytest.mark.parametrize("how", DAMAGES)
def test_salvage_recovers_every_event_left_on_an_intact_page(
    filled: Path, tmp_path: Path, how: str
) -> None:
    original = bench.events_by_page(filled)
    broken = tmp_path / "broken.db"
    before, intact = bench.damage(filled.read_bytes(), how, random.Random(how))
    broken.write_bytes(before)
    target = tmp_path / "new.db"
    assert main(["doctor", "--salvage", str(broken), "--db", str(target), "--json"]) == Exit.OK
    assert broken.read_bytes() == before  # read, never written
    got = salvaged(target)
    reachable = {seq: e for seq, (page, e) in original.items() if page in intact}
    assert set(got) == {e.id for e in reachable.values()}
    for event in reachable.values():  # exactly as they were
        namespace, type_, session, payload = got[event.id]
        assert (namespace, type_, session) == (event.namespace, event.type, event.session)
        assert read_payload(json.loads(payload)) == event.payload
    again = main(["doctor", "--salvage", str(broken), "--db", str(target), "--json"])
    assert again == Exit.OK and len(salvaged(target)) == len(got)  # twice stores nothing twice
    report(
        "salvage",
        damage=how,
        events=len(original),
        on_intact_pages=len(reachable),
        salvaged=len(got),
    )


def test_salvage_reads_the_events_only_the_wal_holds(tmp_path: Path) -> None:
    """A process killed before a checkpoint leaves its newest events in the -wal only; with the
    main file's header then damaged, they come back from the WAL's frames."""
    home = tmp_path / "home"
    home.mkdir()
    db = Path(bench.build(home, sessions=1, turns=10))
    try:
        provider = ChronicleMemoryProvider()
        provider.initialize("late", hermes_home=str(home), platform="cli", user_id="alice")
        late = [{"role": "user", "content": "the late turn names the harbour code H-7731"}]
        provider.sync_turn("", "", session_id="late", messages=late)
        copy = tmp_path / "copy.db"
        shutil.copyfile(db, copy)
        shutil.copyfile(f"{db}-wal", f"{copy}-wal")
        provider.shutdown()
    finally:
        for open_core in ChronicleCore.open_cores():
            open_core.shutdown()
    data = bytearray(copy.read_bytes())
    data[:100] = b"\0" * 100
    copy.write_bytes(bytes(data))
    target = tmp_path / "new.db"
    assert main(["doctor", "--salvage", str(copy), "--db", str(target), "--json"]) == Exit.OK
    payloads = "".join(p for *_, p in salvaged(target).values())
    assert "H-7731" in payloads
    report("salvage", damage="garbage header, newest events in the -wal", late_event_found=1)
