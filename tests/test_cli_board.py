"""What the dashboard tab shows (chronicle_engine/cli/board.py), read from a database the demo filled
through the real adapters: each view against what the core holds, refusals by name, and no
write. The browser and Hermes' dashboard are exercised in tests/integration/test_dashboard.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chronicle_engine.capture.events import NAMESPACE as CHAT
from chronicle_engine.capture.events import MessageCaptured
from chronicle_engine.cli import Exit, board, main
from chronicle_engine.cli.exits import CommandFailed
from chronicle_engine.core import ChronicleCore
from chronicle_engine.sessions.events import NAMESPACE as SESSION
from chronicle_engine.sessions.events import CompactionRecorded


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("board") / "hermes_home" / "chronicle" / "chronicle.db"
    path.parent.mkdir(parents=True)
    assert main(["demo", "--db", str(path), "--json"]) == Exit.OK
    return path


@pytest.fixture
def core(demo_db: Path) -> Iterator[ChronicleCore]:
    core = ChronicleCore.get(demo_db)
    events = core.store.count()
    yield core
    assert core.store.count() == events  # every view only reads
    core.shutdown()


def test_overview_is_one_conversation_shown_under_hermes_home(core, demo_db):
    data = board.overview(core, demo_db.parent.parent)
    assert data["db_shown"] == "$HERMES_HOME/chronicle/chronicle.db"
    assert data["db_path"] == str(demo_db)
    assert data["events"] == core.store.count() and data["last_seq"] == core.store.last_seq()
    [conversation] = data["conversations"]  # the demo's three sessions are one lineage
    assert conversation["sessions"] == core.sessions.lineage(conversation["session"])
    assert len(conversation["sessions"]) == data["sessions"] == 3
    assert conversation["sections"] == len(core.chronicle(conversation["chronicle"]).current())
    assert board.overview(core)["db_shown"] == str(demo_db)


def test_conversation_timeline_and_chart_match_the_log(core):
    latest = board.overview(core)["conversations"][0]["session"]
    data = board.conversation(core, "latest")
    assert data["session"] == latest
    lineage = core.sessions.lineage(latest)
    typed = list(core.reader.typed(sessions=lineage, namespaces=[CHAT, SESSION]))
    messages = [d for d in typed if isinstance(d.event, MessageCaptured)]
    compactions = [d for d in typed if isinstance(d.event, CompactionRecorded)]
    assert data["messages"] == len(messages) and data["compactions"] == len(compactions) >= 2
    shown = [t for t in data["timeline"] if t["kind"] == "compaction"]
    assert [(t["seq"], t["tokens_before"], t["tokens_after"]) for t in shown] == [
        (d.seq, d.event.tokens_before, d.event.tokens_after) for d in compactions
    ]
    # The chart drops to the host's own count after each compaction.
    after = [p["tokens"] for p in data["tokens"] if p.get("compaction")][1::2]
    assert after == [d.event.tokens_after for d in compactions]
    assert [s["id"] for s in data["sections"]] == [
        s.anchor.section_id for s in core.chronicle(data["chronicle"]).current()
    ]
    assert any(t["kind"] == "switch" and t["reason"] == "compression" for t in data["timeline"])


def test_expand_gives_the_original_messages_and_refuses_an_unknown_section(core):
    data = board.conversation(core, "latest")
    first = data["sections"][0]
    expanded = board.expand(core, data["session"], first["id"])
    originals = core.sessions.message_events(data["session"], first["from_seq"], first["to_seq"])
    assert [m["message"] for m in expanded["messages"]] == [e.payload["message"] for e in originals]
    with pytest.raises(LookupError, match=first["id"]):
        board.expand(core, data["session"], "999-1000")


def test_search_hides_tool_traffic_ranks_and_refuses_bad_arguments(core):
    data = board.search(core, "vault path staging")
    assert [h["rank"] for h in data["hits"]] == list(range(1, len(data["hits"]) + 1))
    assert all("score" not in h for h in data["hits"])
    top = data["hits"][0]
    assert (
        top["kind"] == "message"
        and "kv/heron/staging" in core.store.get(top["seq"]).payload["text"]
    )
    with pytest.raises(ValueError, match="scope must be one of"):
        board.search(core, "x", scope="everything")
    with pytest.raises(ValueError, match="needs a session"):
        board.search(core, "x", scope="session")


def test_unknown_session_is_refused_naming_what_exists(core):
    latest = board.overview(core)["conversations"][0]["session"]
    with pytest.raises(CommandFailed) as refused:
        board.conversation(core, "nope")
    assert refused.value.code == Exit.NOT_FOUND and latest in str(refused.value)


def test_maintenance_lists_every_schedule(core):
    data = board.maintenance(core)
    status = core.scheduler.maintenance_status()
    assert [s["task"] for s in data["schedules"]] == [s["task"] for s in status["schedules"]]
    assert data["summary"][0].startswith("maintenance on")
    assert "open_units" not in data["consolidation"]
