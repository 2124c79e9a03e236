"""Forgetting is total: a fact forgotten after it was compacted leaves every surface that derives
from the log (search, answer, prefetch, the CLI's search, the next handoff, expand's prose,
`sections --full`, the three exports, the search tables), while the log itself stays append-only
and still holds the event."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from faults_support import report

from chronicle_engine.cli import main
from chronicle_engine.compaction.policy import Policy, policy_from_config
from chronicle_engine.compaction.tools import CONTEXT_TOOLS
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.messages import content_text, is_own_handoff
from chronicle_engine.recall.tools import RECALL_TOOLS
from chronicle_engine.tools import dispatch

FACT = "4417-ZEBRA"
SURFACES = 14
"""What the first test checks: the handoff sent, expand's prose (2 ids and the engine), search,
answer, prefetch, the CLI's search, `sections --full` (text and JSON), 3 exports, the search
tables and the sections table, counted as one each."""
PLANTED = f"Please keep this safe: my locker combination is {FACT}."
USER = "alice"


def _policy() -> Policy:
    config = Config(
        {},
        compression={
            "threshold": 0.5,
            "target_ratio": 0.2,
            "protect_first_n": 2,
            "protect_last_n": 6,
        },
    )
    return policy_from_config(config, 16_000)


def _turn(n: int) -> list[dict[str, Any]]:
    pad = "detail " * 120
    user = PLANTED if n == 3 else f"request {n}: look into ticket OPS-{n}"
    return [
        {"role": "user", "content": user},
        {"role": "assistant", "content": f"Decided: ticket OPS-{n} is handled. {pad}"},
    ]


class _Host:
    """Plays Hermes around one conversation: grow, compress, rotate the session id."""

    def __init__(self, core: ChronicleCore) -> None:
        self.core = core
        self.session = "f0"
        self.messages: list[dict[str, Any]] = []
        self.rotations = 0
        self.sent: list[list[dict[str, Any]]] = []  # every compacted list the model was sent

    def add(self, *messages: dict[str, Any]) -> None:
        self.messages.extend(messages)
        self.core.capture.capture_messages(self.session, self.messages, user_id=USER)

    def compress(self) -> Any:
        outcome = self.core.compaction.compress(
            self.session, self.messages, policy=_policy(), force=True, user_id=USER
        )
        assert outcome.messages is not None, outcome.reason
        self.messages = outcome.messages
        self.sent.append(outcome.messages)
        self.rotations += 1
        new = f"f{self.rotations}"
        self.core.sessions.switch(new, parent_session_id=self.session, reason="compression")
        self.session = new
        return outcome

    def handoff(self) -> str:
        return content_text(next(m for m in self.messages if is_own_handoff(m)))

    def tool(self, tools: Any, name: str, **args: Any) -> dict[str, Any]:
        # Each tool is handed the one subsystem it serves, as the slots hand it.
        target = self.core.recall if tools is RECALL_TOOLS else self.core.compaction
        result = json.loads(
            dispatch(tools, target, name, args, session_id=self.session, user_id=USER)
        )
        assert "error" not in result, result
        return result


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_forgotten_fact_leaves_every_derived_surface(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "chronicle.db"
    core = ChronicleCore.get(db)
    try:
        host = _Host(core)
        for n in range(30):
            host.add(*_turn(n))
        first = host.compress()
        (label,) = first.written
        # Planted: the fact is in the section's prose and the handoff the model was sent.
        assert FACT in host.handoff()
        hits = host.tool(RECALL_TOOLS, "chronicle_search", query=FACT)["results"]
        assert hits, "the planted fact is searchable before it is forgotten"
        assert FACT in _cli(capsys, "search", FACT, "--user", USER, "--db", str(db), "--json")

        # Forget it: the message (with the beliefs it stated), then whatever still finds it
        # (the section that quoted it).
        said = next(h for h in hits if str(h["id"]).startswith("m"))
        forgotten = host.tool(RECALL_TOOLS, "chronicle_forget", id=said["id"], include_source=True)
        assert forgotten["sections_redrawn"] == [f"{label} -> {label}#2"]
        still = host.tool(RECALL_TOOLS, "chronicle_search", query=FACT)["results"]
        assert [h["id"] for h in still if str(h["id"]).startswith(("m", "b"))] == []
        for hit in still:
            host.tool(RECALL_TOOLS, "chronicle_forget", id=hit["id"], include_source=True)

        # The next compaction's handoff carries the new generation's words.
        for n in range(30, 45):
            host.add(*_turn(n))
        host.compress()
        assert f"{label}#2" in host.handoff()
        assert FACT not in json.dumps(host.sent[-1])

        # expand(section_id) prose, by the old id and the new one, and through the tool.
        for asked in (label, f"{label}#2"):
            expanded = host.tool(CONTEXT_TOOLS, "chronicle_expand", section_id=asked)
            assert expanded["section_id"] == f"{label}#2"
            assert FACT not in json.dumps(expanded)
        assert FACT not in core.compaction.expand(host.session, section_id=label)["prose"]

        # Search, answer and prefetch (they already left it out; they still do).
        assert host.tool(RECALL_TOOLS, "chronicle_search", query=FACT)["results"] == []
        assert FACT not in json.dumps(core.recall.answer(FACT, session_id=host.session))
        assert FACT not in core.recall.prefetch("locker combination", session_id=host.session)

        # The CLI's search, as the person who said it: nothing found (exit 3), and what a
        # neighbouring query finds does not quote the fact.
        capsys.readouterr()
        assert main(["search", FACT, "--user", USER, "--db", str(db), "--json"]) == 3
        assert json.loads(capsys.readouterr().out)["hits"] == []
        shown = _cli(capsys, "search", "ticket OPS", "--user", USER, "--db", str(db), "--json")
        assert "OPS-" in shown and FACT not in shown

        # The CLI's sections, every generation, in full.
        shown = _cli(capsys, "sections", "--all", "--full", "--db", str(db))
        assert f"{label}#2" in shown and FACT not in shown
        shown = _cli(capsys, "sections", "--all", "--full", "--json", "--db", str(db))
        assert FACT not in shown

        # The three exports: the whole log, the session, the chronicle's sections.
        name = core.sessions.chronicle_name(host.session)
        for i, argv in enumerate(([], ["--session", host.session], ["--chronicle", name])):
            out = tmp_path / f"export-{i}.jsonl"
            _cli(capsys, "export", *argv, "-o", str(out), "--db", str(db))
            text = out.read_text(encoding="utf-8")
            assert text.count("\n") > 1 and FACT not in text, argv

        # The tables recall derives: no row holds the words, no index finds them.
        conn = sqlite3.connect(db)
        try:
            quoted = '"' + FACT + '"'
            assert conn.execute(
                "SELECT COUNT(*) FROM recall_messages WHERE body LIKE ? OR person LIKE ?",
                (f"%{FACT}%", f"%{FACT}%"),
            ).fetchone() == (0,)
            assert conn.execute(
                "SELECT COUNT(*) FROM recall_sections_fts WHERE recall_sections_fts MATCH ?",
                (quoted,),
            ).fetchone() == (0,)
            assert conn.execute(
                "SELECT COUNT(*) FROM sections WHERE prose LIKE ? OR meta LIKE ?",
                (f"%{FACT}%", f"%{FACT}%"),
            ).fetchone() == (0,)
            for (n,) in conn.execute("SELECT n FROM recall_scopes").fetchall():
                assert conn.execute(
                    f"SELECT COUNT(*) FROM recall_fts_{n} WHERE recall_fts_{n} MATCH ?",
                    (quoted,),
                ).fetchone() == (0,)
            # The log is append-only: the event, and the forgetting, are both still in it.
            assert (
                conn.execute(
                    "SELECT COUNT(*) FROM events WHERE payload LIKE ?", (f"%{FACT}%",)
                ).fetchone()[0]
                >= 1
            )
            assert conn.execute(
                "SELECT COUNT(*) FROM events WHERE type = 'MemoryForgotten'"
            ).fetchone()[0] == 1 + len(still)
        finally:
            conn.close()
        report("forgetting", surfaces=SURFACES, leaks=0)
    finally:
        core.shutdown()


def _forget_after(core: ChronicleCore, turns: int) -> tuple[_Host, dict[str, Any], dict[str, Any]]:
    """A conversation of `turns` turns whose message stating FACT is then forgotten: the host,
    the message's search hit, and what forgetting it answered."""
    host = _Host(core)
    for n in range(turns):
        host.add(*_turn(n))
    said = host.tool(RECALL_TOOLS, "chronicle_search", query=FACT)["results"][0]
    forgotten = host.tool(RECALL_TOOLS, "chronicle_forget", id=said["id"], include_source=True)
    return host, said, forgotten


def test_a_fact_forgotten_before_compaction_is_never_summarised(store_core: ChronicleCore) -> None:
    core = store_core  # on each store
    host, said, forgotten = _forget_after(core, 30)
    assert forgotten["sections_redrawn"] == []  # nothing was compacted yet
    outcome = host.compress()
    # The message is folded like any other (the handoff cites its range) but not summarised.
    (label,) = outcome.written
    section = core.compaction.expand(host.session, section_id=label)
    assert section["from_seq"] <= int(said["id"][1:]) <= section["to_seq"]
    assert FACT not in section["prose"] and FACT not in host.handoff()


def test_background_consolidation_leaves_a_forgotten_message_out(store_core: ChronicleCore) -> None:
    core = store_core  # on each store
    host, said, _ = _forget_after(core, 6)
    core.capture.record_session_end(host.session, len(host.messages), 0)  # closes the unit
    consolidator = core.scheduler.consolidator
    assert consolidator is not None
    consolidator.run(budget=10_000)
    (section,) = core.chronicle(core.sessions.chronicle_name(host.session)).current()
    assert section.anchor.from_seq <= int(said["id"][1:]) <= section.anchor.to_seq
    assert FACT not in section.prose and "request 4" in section.prose


def test_a_later_process_consolidating_leaves_out_what_an_earlier_one_forgot(
    tmp_path: Path,
) -> None:
    """Consolidation asks recall what is forgotten only when the log holds recall's events
    (the only ones that hide a message), so it must find a forgetting it did not see happen."""
    path = tmp_path / "chronicle.db"

    def recall_built(db: Path) -> bool:
        conn = sqlite3.connect(db)
        try:
            return (
                conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'recall_hidden'").fetchone()
                is not None
            )
        finally:
            conn.close()

    core = ChronicleCore.get(path)
    try:
        host = _Host(core)
        for n in range(6):
            host.add(*_turn(n))
        core.capture.record_session_end(host.session, len(host.messages), 0)
        consolidator = core.scheduler.consolidator
        assert consolidator is not None
        consolidator.run(budget=10_000)
        (first,) = core.chronicle(core.sessions.chronicle_name(host.session)).current()
        assert FACT in first.prose and not recall_built(path)  # nothing forgotten: not asked
        session = host.session
    finally:
        core.shutdown()

    core = ChronicleCore.get(path)
    try:
        host = _Host(core)
        host.session = session + "-2"
        for n in range(6):
            host.add(*_turn(n))
        said = host.tool(RECALL_TOOLS, "chronicle_search", query=FACT)
        hit = next(r for r in said["results"] if int(r["id"][1:]) > first.anchor.to_seq)
        host.tool(RECALL_TOOLS, "chronicle_forget", id=hit["id"], include_source=True)
        core.capture.record_session_end(host.session, len(host.messages), 0)
    finally:
        core.shutdown()

    core = ChronicleCore.get(path)  # a new process: its recall is not built yet
    try:
        consolidator = core.scheduler.consolidator
        assert consolidator is not None
        consolidator.run(budget=10_000)
        (section,) = core.chronicle(core.sessions.chronicle_name(session + "-2")).current()
        assert section.anchor.from_seq <= int(hit["id"][1:]) <= section.anchor.to_seq
        assert FACT not in section.prose and "request 4" in section.prose
    finally:
        core.shutdown()
