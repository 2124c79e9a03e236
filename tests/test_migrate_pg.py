"""`chronicle migrate --to postgresql://...` against a real SQLite file and the session's
throwaway PostgreSQL server: the log arrives at its own seqs with its payloads exact, every
chronicle's sections arrive whole, the session tree folds there to the same projection, a run
resumes where an interrupted one stopped, and a destination holding another log or a password
on the command line is refused before anything is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_support import Target, own_schema

from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.cli import Exit, main
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.log.store import PendingEvent


@pytest.fixture
def pg(postgres_cluster) -> Iterator[tuple[str, str]]:
    """(a postgresql:// URL, the same database as a conninfo) of a schema of its own."""
    with own_schema(postgres_cluster) as conninfo:
        schema = re.search(r"search_path=(\w+)", conninfo).group(1)
        url = (
            f"postgresql://chronicle@127.0.0.1:{postgres_cluster.port}/chronicle_test"
            f"?options=-c%20search_path%3D{schema}"
        )
        yield url, conninfo


def u(text: str) -> dict:
    return {"role": "user", "content": text}


def a(text: str) -> dict:
    return {"role": "assistant", "content": text}


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Path]:
    """A database a chat wrote: two sessions (a compression continuation), a branch, a context
    edit, a usage entry, sections in two chronicles (one superseded), and gaps in its seqs."""
    path = tmp_path / "chronicle.db"
    core = ChronicleCore(path)
    live = [u("plan the move ✓"), a("step one: naïve → 東京"), u("and then?"), a("step two")]
    seqs = core.capture.capture_messages("s1", live)
    core.store.append_new([PendingEvent("test", "Note", 1, {"n": 1}, id="dup")])
    core.store.append_new([PendingEvent("test", "Note", 1, {"n": 1}, id="dup")])  # spends a seq
    core.sessions.switch("s2", parent_session_id="s1", reason="compression")
    core.capture.capture_messages("s2", [u("after the rotation"), a("still here")])
    core.sessions.branch("s1", core.sessions.path("s1")[1].entry_id)
    core.capture.capture_messages("s1", [*live[:2], u("another way"), a("fine")])
    core.sessions.edit_context("s1", core.sessions.path("s1")[0].entry_id, u("plan (edited)"))
    core.sessions.record_usage("s1", prompt_tokens=10, completion_tokens=2, source="host")
    first = core.chronicle("conversation:s1")
    first.append_new(Section(Anchor("1-2", seqs[0], seqs[1], seqs[1]), "planned the move"))
    first.append_new(
        Section(Anchor("1-2#2", seqs[0], seqs[1], seqs[1], "1-2"), "planned it, again")
    )
    core.chronicle("conversation:other").append_new(
        Section(Anchor("3-4", seqs[2], seqs[3], seqs[3]), "the second step", ("pin",))
    )
    core.shutdown()
    yield path


def _log(store) -> list[tuple]:
    return [(e.seq, e.envelope, json.dumps(e.payload, ensure_ascii=False)) for e in store.read()]


def _migrate(capsys, db: Path, url: str) -> tuple[int, dict]:
    code = main(["migrate", "--db", str(db), "--to", url, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def test_migrate_copies_the_log_sections_and_tree_and_resumes(source, pg, capsys) -> None:
    url, conninfo = pg
    core = ChronicleCore(source)
    events = _log(core.store)
    assert [s for s, _, _ in events] != list(range(1, len(events) + 1)), "want gaps"
    sections = {n: core.chronicle(n).export() for n in core.chronicle().chronicles()}
    projections = {s: core.sessions.projection(s) for s in ("s1", "s2")}
    lineage = core.sessions.lineage("s2")
    core.shutdown()

    # An interrupted run: the destination holds the first events already.
    dest = PostgresEventStore(conninfo)
    dest.restore(list(ChronicleCore(source).store.read(upto=events[2][0])))
    dest.close()

    code, data = _migrate(capsys, source, url)
    assert code == 0
    assert (data["events"], data["already_there"], data["copied"]) == (
        len(events),
        3,
        len(events) - 3,
    )
    assert data["sections"] == {"conversation:other": 1, "conversation:s1": 2}

    dest = PostgresEventStore(conninfo)
    assert _log(dest) == events
    target = Target("postgres", conninfo)
    for name, written in sections.items():
        assert target.chronicle(dest, name).export() == written
    tree = target.tree(dest)
    assert {s: tree.sessions.projection(s) for s in ("s1", "s2")} == projections
    assert tree.sessions.lineage("s2") == lineage
    dest.close()

    # Again: nothing new, nothing doubled.
    code, data = _migrate(capsys, source, url)
    assert (code, data["copied"], data["already_there"]) == (0, 0, len(events))
    assert sum(data["sections"].values()) == 0
    dest = PostgresEventStore(conninfo)
    assert _log(dest) == events
    dest.close()


def test_migrate_refuses_another_log_and_a_password(source, pg, capsys) -> None:
    url, conninfo = pg
    code = main(
        ["migrate", "--db", str(source), "--to", url.replace("chronicle@", "chronicle:pw@")]
    )
    assert code == Exit.USAGE
    assert "PGPASSWORD" in capsys.readouterr().err
    code = main(["migrate", "--db", str(source), "--to", "sqlite:///elsewhere.db"])
    assert code == Exit.USAGE

    dest = PostgresEventStore(conninfo)
    dest.append([PendingEvent("test", "Note", 1, {"mine": True}, id="not-from-here")])
    before = _log(dest)
    dest.close()
    code = main(["migrate", "--db", str(source), "--to", url])
    assert code == Exit.USAGE
    assert "not the beginning of this one" in capsys.readouterr().err
    dest = PostgresEventStore(conninfo)
    assert _log(dest) == before
    dest.close()
