"""The `chronicle` command against real SQLite files, built through the core's lower layers."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from chronicle_engine.capture.events import MessageCaptured, register_capture_events
from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.cli import Exit, main
from chronicle_engine.core import ChronicleCore
from chronicle_engine.sessions.tree import CHRONICLE_PREFIX

CHRONICLE = CHRONICLE_PREFIX + "s1"  # the chronicle the session tree names for session s1

MESSAGES = [
    {"role": "user", "content": "Please rename the service to heron-api. ünïcode ✓"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "terminal", "arguments": '{"cmd": "git mv a b"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "renamed a -> b"},
    {"role": "assistant", "content": "Done: the service is now heron-api."},
    {"role": "user", "content": "Thanks. Next, the port should be 8443."},
]


def _captured(message: dict, turn: int) -> MessageCaptured:
    text = message.get("content") or ""
    return MessageCaptured(
        role=message["role"],
        message=message,
        fingerprint=f"fp{turn}",
        speaker="person" if message["role"] == "user" else "assistant",
        text=text,
        turn=turn,
    )


def seed(db: Path, session: str = "s1", chronicle: str = CHRONICLE) -> ChronicleCore:
    core = ChronicleCore.get(db)
    if not core.types.knows("chronicle.chat", "MessageCaptured"):
        register_capture_events(core.types)
    core.store.append(
        [core.types.pending(_captured(m, i), session=session) for i, m in enumerate(MESSAGES)]
    )
    core.chronicle(chronicle).append_new(
        Section(Anchor("1-4", 1, 4, 1), "Renamed the service to heron-api (seq 1-4).")
    )
    return core


@pytest.fixture
def db(tmp_path: Path):
    path = tmp_path / "chronicle.db"
    core = seed(path)
    core.shutdown()
    return path


def run_json(capsys, *argv: str) -> tuple[int, object]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_missing_database_is_not_found_and_says_what_to_do(tmp_path, capsys):
    code = main(["status", "--db", str(tmp_path / "nope.db")])
    err = capsys.readouterr().err
    assert code == Exit.NOT_FOUND
    assert "chronicle demo" in err and "--db" in err
    assert not (tmp_path / "nope.db").exists()


def test_status_counts_events_sessions_and_chronicles(db, capsys):
    code, data = run_json(capsys, "status", "--db", str(db))
    assert code == Exit.OK
    assert data["events"] == len(MESSAGES) and data["last_seq"] == len(MESSAGES)
    assert data["sessions"] == 1
    assert data["chronicles"] == [
        {"chronicle": CHRONICLE, "sections": 1, "current": 1, "through_seq": 4}
    ]
    assert main(["status", "--db", str(db)]) == 0
    assert CHRONICLE in capsys.readouterr().out


def test_sections_lists_ranges(db, capsys):
    code, data = run_json(capsys, "sections", "--db", str(db))
    assert code == Exit.OK
    (section,) = data[CHRONICLE]
    assert (section["id"], section["from_seq"], section["to_seq"]) == ("1-4", 1, 4)


def test_expand_returns_the_original_messages_byte_for_byte(db, capsys):
    code = main(["expand", "1-4", "--db", str(db), "--raw"])
    lines = capsys.readouterr().out.splitlines()
    assert code == Exit.OK
    assert lines == [json.dumps(m, ensure_ascii=False) for m in MESSAGES[:4]]

    code, data = run_json(capsys, "expand", "2..3", "--db", str(db))
    assert code == Exit.OK
    assert [m["message"] for m in data["messages"]] == MESSAGES[1:3]


def test_expand_unknown_section_is_not_found(db, capsys):
    assert main(["expand", "nonsense", "--db", str(db)]) == Exit.NOT_FOUND
    assert "chronicle sections" in capsys.readouterr().err


def test_export_import_round_trip_is_idempotent(db, tmp_path, capsys):
    out = tmp_path / "s1.jsonl"
    code, data = run_json(capsys, "export", "--db", str(db), "-o", str(out))
    assert code == Exit.OK and data["written"] == len(MESSAGES)

    target = tmp_path / "other.db"
    code, data = run_json(capsys, "import", str(out), "--db", str(target))
    assert code == Exit.OK and (data["stored"], data["skipped"]) == (len(MESSAGES), 0)
    code, data = run_json(capsys, "import", str(out), "--db", str(target))
    assert (data["stored"], data["skipped"]) == (0, len(MESSAGES))

    src, dst = ChronicleCore.get(db), ChronicleCore.get(target)
    try:
        assert [(e.envelope.id, e.seq, e.payload) for e in src.store.read()] == [
            (e.envelope.id, e.seq, e.payload) for e in dst.store.read()
        ]
    finally:
        src.shutdown()
        dst.shutdown()


def test_chronicle_carry_between_databases(db, tmp_path, capsys):
    out = tmp_path / "sections.jsonl"
    assert main(["export", "--chronicle", CHRONICLE, "--db", str(db), "-o", str(out)]) == 0
    assert "exported 1 sections" in capsys.readouterr().out
    target = tmp_path / "replica.db"
    code, data = run_json(capsys, "import", str(out), "--db", str(target))
    assert (code, data["loaded"], data["chronicle"]) == (Exit.OK, 1, CHRONICLE)
    code, data = run_json(capsys, "import", str(out), "--db", str(target))
    assert data["loaded"] == 0


def test_import_of_a_malformed_file_names_the_line(db, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"format": "chronicle-export", "version": 1, "kind": "events"}\n{"id": 1}\n[]\n',
        encoding="utf-8",
    )
    assert main(["import", str(bad), "--db", str(db)]) == Exit.USAGE
    assert "line 2" in capsys.readouterr().err


def test_backup_is_consistent_while_a_writer_appends(db, tmp_path, capsys):
    core = ChronicleCore.get(db)
    register_capture_events(core.types)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < 2000:
            core.store.append(
                [
                    core.types.pending(
                        _captured({"role": "user", "content": f"m{i}"}, i), session="w"
                    )
                ]
            )
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        dest = tmp_path / "copy.db"
        code, data = run_json(capsys, "backup", str(dest), "--db", str(db))
    finally:
        stop.set()
        thread.join(timeout=30)
        core.shutdown()
    assert code == Exit.OK and Path(data["backup"]) == dest
    with sqlite3.connect(dest) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        seqs = [r[0] for r in conn.execute("SELECT seq FROM events ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= len(MESSAGES)
    assert not Path(f"{dest}-wal").exists()
    assert main(["backup", str(dest), "--db", str(db)]) == Exit.USAGE


def test_doctor_reports_config_problems_and_a_sound_database(db, tmp_path, capsys):
    home = tmp_path / "hermes_home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "memory: {provider: chronicle}\ncontext: {engine: compressor}\n"
        "plugins: {enabled: [chronicle]}\nchronicle: {no_such_key: 1}\n",
        encoding="utf-8",
    )
    code, data = run_json(capsys, "doctor", "--db", str(db), "--hermes-home", str(home))
    checks = {c["name"]: c for c in data["checks"]}
    assert code == Exit.UNHEALTHY and data["verdict"] == "fail"
    assert checks["context.engine"]["status"] == "fail"
    assert "context.engine: chronicle" in checks["context.engine"]["detail"]
    assert checks["memory.provider"]["status"] == "ok"
    assert checks["quick_check"]["status"] == "ok"
    assert checks["no forks"]["status"] == "ok"
    assert "chronicle.no_such_key" in checks["unknown chronicle keys"]["detail"]


def test_tree_shows_lineage_switch_and_compaction_points(tmp_path, capsys):
    db = tmp_path / "tree.db"
    core = ChronicleCore.get(db)
    try:
        seqs = core.capture.capture_messages("s1", MESSAGES)
        core.sessions.switch("s2", parent_session_id="s1", reason="compression")
        core.sessions.record_compaction(
            "s1",
            section_ids=["1-4"],
            first_kept_seq=seqs[-1],
            tokens_before=9000,
            tokens_after=1200,
        )
        core.capture.capture_messages("s2", [{"role": "user", "content": "and the TLS cert?"}])
    finally:
        core.shutdown()
    code, data = run_json(capsys, "tree", "--db", str(db))
    assert code == Exit.OK
    (lineage,) = data["lineages"]
    assert lineage["chronicle"] == CHRONICLE
    first, second = lineage["sessions"]
    assert (first["session"], second["session"]) == ("s1", "s2")
    assert (second["reason"], second["parent"]) == ("compression", "s1")
    (point,) = first["compactions"]
    assert point["sections"] == ["1-4"] and point["tokens_after"] == 1200
    assert main(["tree", "--db", str(db)]) == 0
    assert "compaction" in capsys.readouterr().out


def test_maintenance_reports_and_runs_pending_jobs(db, capsys):
    code, data = run_json(capsys, "maintenance", "--db", str(db))
    assert code == Exit.OK and data["ran"] is None
    assert {"schedules", "queue", "consolidation"} <= set(data["status"])
    code, data = run_json(capsys, "maintenance", "--run", "--db", str(db))
    assert code == Exit.OK and isinstance(data["ran"], int)


def test_maintenance_reindex_folds_recall_again_and_notes_what_an_older_host_did_not(
    tmp_path, capsys
):
    db = tmp_path / "reindex.db"
    core = ChronicleCore.get(db)
    try:
        core.capture.capture_messages(
            "s1",
            [
                {"role": "user", "content": "Where did we leave the heron-api port?"},
                {"role": "assistant", "content": "On 8443, set yesterday."},
            ],
        )
        core.recall.catch_up()
    finally:
        core.shutdown()
    # a host older than the question notes folded these messages: no note of the question
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM recall_questions").fetchone() == (1,)
        conn.execute("DELETE FROM recall_questions")
    code, data = run_json(capsys, "maintenance", "--reindex", "--db", str(db))
    assert code == Exit.OK
    assert data["reindexed"]["events"] >= 2
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM recall_questions").fetchone() == (1,)
    code, data = run_json(capsys, "search", "heron-api port", "--db", str(db))
    assert code == Exit.OK and any("8443" in json.dumps(hit) for hit in data["hits"])
    assert main(["maintenance", "--reindex", "--db", str(db)]) == Exit.OK
    assert "recall's index folded again" in capsys.readouterr().out


def test_search_finds_captured_memory_in_the_latest_sessions_partition(tmp_path, capsys):
    db = tmp_path / "search.db"
    core = ChronicleCore.get(db)
    try:
        core.capture.capture_messages("s1", MESSAGES, profile="default")
    finally:
        core.shutdown()
    code, data = run_json(capsys, "search", "heron-api", "--db", str(db))
    assert code == Exit.OK
    assert any("heron-api" in json.dumps(hit) for hit in data["hits"])
    code, data = run_json(capsys, "search", "zebra crossing", "--db", str(db))
    assert code == Exit.NOT_FOUND and data["hits"] == []


def test_expand_with_session_follows_the_lineage(tmp_path, capsys):
    db = tmp_path / "lineage.db"
    core = ChronicleCore.get(db)
    try:
        core.capture.capture_messages("s1", MESSAGES[:2])
        core.sessions.switch("s2", parent_session_id="s1", reason="compression")
        core.capture.capture_messages("s2", MESSAGES[2:])
        last = core.store.last_seq()
    finally:
        core.shutdown()
    code = main(["expand", f"1..{last}", "--session", "s2", "--db", str(db), "--raw"])
    lines = capsys.readouterr().out.splitlines()
    assert code == Exit.OK
    assert lines == [json.dumps(m, ensure_ascii=False) for m in MESSAGES]


def test_a_session_exported_and_imported_comes_back_byte_for_byte(tmp_path, capsys):
    src = tmp_path / "src.db"
    core = ChronicleCore.get(src)
    try:
        core.capture.capture_messages("s1", MESSAGES)
    finally:
        core.shutdown()
    out = tmp_path / "s1.session.jsonl"
    code, data = run_json(capsys, "export", "--session", "s1", "--db", str(src), "-o", str(out))
    assert code == Exit.OK and data["kind"] == "session"
    dst = tmp_path / "dst.db"
    code, data = run_json(capsys, "import", str(out), "--db", str(dst))
    assert code == Exit.OK and data["kind"] == "session" and data["stored"] > 0
    code, data = run_json(capsys, "import", str(out), "--db", str(dst))
    assert data["stored"] == 0
    core = ChronicleCore.get(dst)
    try:
        last = core.store.last_seq()
    finally:
        core.shutdown()
    assert main(["expand", f"1..{last}", "--session", "s1", "--db", str(dst), "--raw"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [json.dumps(m, ensure_ascii=False) for m in MESSAGES]


def test_doctor_says_which_egress_would_be_refused(db, tmp_path, capsys):
    home = tmp_path / "egress_home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "chronicle:\n"
        "  context: {summarizer: endpoint, summarizer_base_url: 'http://127.0.0.1:8080/v1'}\n"
        "  recall: {embeddings: {url: 'http://203.0.113.7:11434/v1'}}\n",
        encoding="utf-8",
    )
    code, data = run_json(capsys, "doctor", "--db", str(db), "--hermes-home", str(home))
    checks = {c["name"]: c for c in data["checks"] if c["area"] == "egress"}
    assert checks["summaries"]["status"] == "ok" and "127.0.0.1" in checks["summaries"]["detail"]
    embeddings = checks["embeddings"]["detail"]
    assert embeddings.startswith("REFUSED") and "recall.embeddings.allow_remote" in embeddings


def test_a_missing_dependency_names_the_requirement_and_how_to_install_it(capsys):
    import argparse

    from chronicle_engine.cli import run

    def needs_a_model(session):
        raise ModuleNotFoundError("No module named 'pydantic_ai'", name="pydantic_ai.messages")

    code = run(argparse.Namespace(run=needs_a_model, db=None, json=False))
    err = capsys.readouterr().err
    assert code == Exit.FAILED
    assert "pydantic-ai-slim>=1.0 is not installed" in err
    assert "hermes memory setup chronicle" in err and "-m pip install" in err
