"""Stores that will not open, or stop taking writes: no acknowledged turn is ever dropped.

Each case drives the memory slot the way Hermes does while the store is unavailable, then makes
it available again and checks that the log holds every message of every acknowledged turn,
once. The failures: a cold-start race of processes creating one new database, `db_path` under a
regular file, a read-only file system (then writable again), a damaged database file (garbage
header, truncated, a random page overwritten), a full disk. Isolation after a failed
initialize: nothing is stored or served for nobody.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from faults_support import can_mount, examples, report, tmpfs, write_config

from chronicle_engine.cli import Exit, main
from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.errors import StoreError, StoreFull
from chronicle_engine.log.store import PendingEvent, SQLiteEventStore
from provider import ChronicleMemoryProvider

ROOT = Path(__file__).resolve().parents[2]


def start(home: Path, session: str, **identity: Any) -> ChronicleMemoryProvider:
    """A provider initialised as Hermes does (alice on the CLI unless told otherwise)."""
    provider = ChronicleMemoryProvider()
    kwargs = {"platform": "cli", "user_id": "alice", **identity}
    provider.initialize(session, hermes_home=str(home), **kwargs)
    return provider


def turns(n: int, first: int = 0, user: str = "alice") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(first, first + n):
        out += [
            {"role": "user", "content": f"{user} request {k}: note the figure {k * 7919}"},
            {"role": "assistant", "content": f"Noted {k * 7919} for {user}."},
        ]
    return out


def logged(db: Path | str, session: str) -> list[dict[str, Any]]:
    config = load_hermes_config(None)
    core = ChronicleCore.get(db, config=config)
    return [
        e.payload["message"]
        for e in core.store.read(session=session, namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


def drive(
    provider: ChronicleMemoryProvider, session: str, live: list[dict[str, Any]], n: int
) -> None:
    """n acknowledged turns: Hermes appends to the live list and calls sync_turn after each."""
    start = len(live) // 2
    for k in range(start, start + n):
        live += turns(1, k)
        provider.on_turn_start(k + 1, live[-2]["content"])
        provider.sync_turn(
            live[-2]["content"], live[-1]["content"], session_id=session, messages=live
        )


def due_now(provider: ChronicleMemoryProvider) -> None:
    """Skip the backoff: the next hook tries to open the store again."""
    if provider._reopening is not None:
        provider._reopening.next_at = 0.0


# -- a cold-start race ------------------------------------------------------------------------------

_STARTER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {root!r})
    from provider import ChronicleMemoryProvider
    home, n = sys.argv[1], sys.argv[2]
    provider = ChronicleMemoryProvider()
    provider.initialize("s" + n, hermes_home=home, platform="cli")
    live = [{{"role": "user", "content": "cold " + n}}, {{"role": "assistant", "content": "ok " + n}}]
    provider.sync_turn("", "", session_id="s" + n, messages=live)
    print(json.dumps({{"opened": provider._core is not None}}))
    provider.shutdown()
    """
)


def test_a_cold_start_race_of_eight_processes_loses_no_start_and_no_turn(tmp_path: Path) -> None:
    rounds = examples(2, soak_factor=10)
    starts = failed = 0
    for r in range(rounds):
        home = tmp_path / f"race{r}"
        home.mkdir()
        write_config(home)
        script = _STARTER.format(root=str(ROOT))
        env = {**os.environ, "HERMES_HOME": str(home)}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(home), str(i)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i in range(8)
        ]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            starts += 1
            if proc.returncode != 0 or not json.loads(out.strip().splitlines()[-1])["opened"]:
                failed += 1
        db = home / "chronicle" / "chronicle.db"
        for i in range(8):
            assert logged(db, f"s{i}") == [
                {"role": "user", "content": f"cold {i}"},
                {"role": "assistant", "content": f"ok {i}"},
            ]
        for core in ChronicleCore.open_cores():
            core.shutdown()
    report("cold-start race", processes=8, starts=starts, failed_starts=failed, turns_lost=0)
    assert failed == 0


# -- a store that cannot be opened ----------------------------------------------------------------


def test_db_path_under_a_regular_file_keeps_turns_until_it_opens(home: Path) -> None:
    blocker = home / "not-a-dir"
    blocker.write_text("a regular file")
    db = blocker / "chronicle.db"
    write_config(home, db)
    provider = start(home, "s1")
    assert provider._core is None
    live: list[dict[str, Any]] = []
    drive(provider, "s1", live, 5)
    provider.on_session_end(live)
    provider.shutdown()
    blocker.unlink()  # the path becomes a directory: the next start opens and replays
    again = start(home, "s2")
    assert again._core is not None
    assert logged(db, "s1") == live
    again.shutdown()


@pytest.mark.skipif(not can_mount(), reason="needs root to mount a read-only tmpfs")
def test_a_read_only_file_system_keeps_turns_and_replays_when_writable(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with tmpfs(home / "ro", size="4m", read_only=True) as mount:
        db = mount.path / "chronicle.db"
        write_config(home, db)
        provider = start(home, "s1")
        assert provider._core is None
        live: list[dict[str, Any]] = []
        drive(provider, "s1", live, 6)
        found = json.loads(provider.handle_tool_call("chronicle_search", {"query": "figure"}))
        assert "error" in found  # the tool says so; it opens nothing for nobody
        mount.remount(read_only=False)  # writable again, same process
        due_now(provider)
        drive(provider, "s1", live, 2)
        assert provider._core is not None
        assert logged(db, "s1") == live
        provider.shutdown()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "nothing is lost" in warnings[0], warnings


# -- a damaged database file ------------------------------------------------------------------------


def _damage(db: Path, how: str, rng: random.Random) -> None:
    data = bytearray(db.read_bytes())
    if how == "garbage header":
        data[:100] = bytes(rng.randrange(256) for _ in range(100))
    elif how == "truncated":
        data = data[: len(data) // 3 + 17]
    else:  # a random page (not the first) overwritten
        page = 4096
        at = page * rng.randrange(1, max(2, len(data) // page))
        data[at : at + page] = bytes(rng.randrange(256) for _ in range(page))
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["garbage header", "truncated", "random page"])
def test_a_damaged_database_is_moved_aside_and_nothing_is_dropped(
    home: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = home / "chronicle" / "chronicle.db"
    first = start(home, "old")
    old: list[dict[str, Any]] = []
    drive(first, "old", old, 40)
    first.shutdown()
    _damage(db, how, random.Random(how))
    caplog.set_level(logging.ERROR)
    provider = start(home, "s1")
    live: list[dict[str, Any]] = []
    drive(provider, "s1", live, 20)
    provider.on_session_end(live)
    provider.shutdown()
    again = start(home, "s2")
    assert logged(db, "s1") == live  # 20 of 20 kept
    aside = sorted(db.parent.glob("chronicle.db.corrupt-*"))
    damaged = [p for p in aside if not p.name.endswith(("-wal", "-shm"))]
    if how != "random page" or aside:  # a page no read touched may go unnoticed
        assert damaged
        assert any("doctor --salvage" in r.getMessage() for r in caplog.records)
    again.shutdown()
    for core in ChronicleCore.open_cores():
        core.shutdown()
    for path in damaged:  # salvage copies what the damaged file still holds, read-only
        before = path.read_bytes()
        assert main(["doctor", "--salvage", str(path), "--db", str(db), "--json"]) == Exit.OK
        assert path.read_bytes() == before
        salvaged = {m["content"] for m in logged(db, "old") if isinstance(m.get("content"), str)}
        assert salvaged <= {m["content"] for m in old}
        report("salvage", damage=how, old_messages=len(old), salvaged=len(salvaged))


# -- a full disk -------------------------------------------------------------------------------------


@pytest.mark.skipif(not can_mount(), reason="needs root to mount a small tmpfs")
def test_a_full_disk_spills_elsewhere_and_loses_nothing(home: Path, tmp_path: Path) -> None:
    with tmpfs(home / "small", size="600k") as mount:
        db = mount.path / "chronicle.db"
        write_config(home, db)
        provider = start(home, "s1")
        live: list[dict[str, Any]] = []
        total = examples(150, soak_factor=4)
        for k in range(total):
            live += [
                {"role": "user", "content": f"request {k} " + "filler text " * 40},
                {"role": "assistant", "content": f"answer {k} " + "more filler " * 40},
            ]
            provider.sync_turn("", "", session_id="s1", messages=live)
        provider.on_session_end(live)
        provider.shutdown()  # the disk stayed full until the session ended
        for core in ChronicleCore.open_cores():
            core.shutdown()
        spilled = list((tmp_path / "tmp").rglob("*.jsonl"))
        assert spilled, "the full disk's turns wait in the private spill directory"
        mount.resize("64m")  # space frees; the next start writes what waited
        again = start(home, "s2")
        got = logged(db, "s1")
        again.shutdown()
        for core in ChronicleCore.open_cores():
            core.shutdown()
    report("full disk", turns=total, turns_lost=(len(live) - len(got)) // 2)
    assert got == live


# -- no identity, no access ---------------------------------------------------------------------------


def test_after_a_failed_initialize_nothing_is_stored_or_served_for_nobody(home: Path) -> None:
    db = home / "chronicle" / "chronicle.db"
    seed = start(home, "a0", platform="telegram")
    salary = [
        {"role": "user", "content": "remember: my salary is 91000"},
        {"role": "assistant", "content": "Noted, your salary is 91000."},
    ]
    seed.sync_turn("", "", session_id="a0", messages=salary)
    seed.shutdown()
    for core in ChronicleCore.open_cores():
        core.shutdown()
    blocker = home / "blocked"
    blocker.write_text("x")
    write_config(home, blocker / "chronicle.db")  # alice's next start fails to open
    alice = start(home, "a1", platform="telegram")
    assert alice._core is None
    found = json.loads(alice.handle_tool_call("chronicle_search", {"query": "salary"}))
    assert "error" in found
    alice.sync_turn("", "", session_id="a1", messages=turns(2, user="alice"))
    write_config(home, db)  # the store is back; alice's provider retries and replays
    blocker.unlink()
    alice._reopening.config = load_hermes_config(home)  # type: ignore[union-attr]
    due_now(alice)
    alice.sync_turn("", "", session_id="a1", messages=turns(3, user="alice"))
    nobody = start(home, "n1", user_id=None)
    assert "91000" not in nobody.prefetch("what is my salary?")
    found = json.loads(nobody.handle_tool_call("chronicle_search", {"query": "salary 91000"}))
    assert found["count"] == 0 and "91000" not in json.dumps(found["results"])
    core = ChronicleCore.get(db, config=load_hermes_config(home))
    users = {
        (e.envelope.session, e.payload.get("user_id"))
        for e in core.store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    }
    assert users == {("a0", "alice"), ("a1", "alice")}
    mine = json.loads(alice.handle_tool_call("chronicle_search", {"query": "salary 91000"}))
    assert mine["count"] >= 1  # alice, once her store opened, finds her own
    alice.shutdown()
    nobody.shutdown()


def test_a_write_sqlite_rolled_back_itself_fails_as_a_full_disk_not_a_lost_savepoint(
    tmp_path: Path,
) -> None:
    """On a full disk SQLite may roll the whole transaction back in the middle of a nested
    write. That used to surface as "no such savepoint", which a caller going on after a failed
    savepoint swallowed and capture did not spill: 81 of 600 turns were lost in the long
    version of the full-disk test. The error must go up as StoreFull, for capture to spill."""
    store = SQLiteEventStore(tmp_path / "full.db")
    try:
        with pytest.raises(StoreFull), store.atomic() as conn:
            try:
                with store.atomic():
                    conn.execute("ROLLBACK")  # what SQLite does itself on a full disk
                    raise sqlite3.OperationalError("database or disk is full")
            except StoreError:
                raise
            except Exception:  # noqa: BLE001 - as the session tree's spill replay goes on
                pass
        assert store.depth == 0
        store.append([PendingEvent(namespace="t", type="Noted", version=1, payload={})])
        assert store.last_seq() == 1  # the store writes again
    finally:
        store.close()
