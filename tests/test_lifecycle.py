"""Both slots across Hermes' session lifecycle: rebinding on /new, /resume and /branch, who a
message compress captured first belongs to, the core's lifetime across the two slots, switches
recorded once, and tree reads that take no write lock. Real WAL files under a tmp HERMES_HOME."""

from __future__ import annotations

import contextlib
import threading
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml
from postgres_support import postgres_core
from test_compaction_engine import turn
from test_compaction_support import load_plugin

from chronicle_engine import users
from chronicle_engine.compaction.handoff import cited
from chronicle_engine.core import ChronicleCore
from chronicle_engine.messages import content_text, is_own_handoff
from chronicle_engine.sessions.fold import FOLD_NAME
from provider import ChronicleMemoryProvider


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chronicle: dict[str, Any]) -> Path:
    home = tmp_path / "hermes_home"
    home.mkdir()
    (home / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "compression": {"threshold": 0.6, "protect_first_n": 1, "protect_last_n": 4},
                "chronicle": chronicle,
            }
        )
    )
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_SESSION_ID", raising=False)
    return home


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_settings: dict[str, str]) -> Path:
    return _home(tmp_path, monkeypatch, dict(store_settings))  # SQLite, then PostgreSQL


@pytest.fixture(autouse=True)
def _no_core_left_open() -> Any:
    yield
    for core in ChronicleCore.open_cores():
        core.shutdown()


def new_engine(home: Path, session: str = "a1") -> Any:
    module = import_module(load_plugin().__name__ + ".context")
    engine = module.ChronicleContextEngine()
    engine.update_model(model="m", context_length=64_000)
    engine.on_session_start(session, hermes_home=str(home), platform="cli")
    return engine


def chat(turns: int, start: int = 0) -> list[dict[str, Any]]:
    return [m for n in range(start, start + turns) for m in turn(n)]


def captured(core: ChronicleCore, session: str) -> list[dict[str, Any]]:
    return [
        e.payload for e in core.store.read(session=session) if e.envelope.type == "MessageCaptured"
    ]


def switches(core: ChronicleCore, session: str) -> list[dict[str, Any]]:
    return [
        e.payload for e in core.store.read(session=session) if e.envelope.type == "SessionSwitched"
    ]


def _handoff(messages: list[dict[str, Any]]) -> str:
    return content_text(next(m for m in messages if is_own_handoff(m)))


# -- finding 2: the engine follows the host's session ------------------------------------------


def test_bind_session_state_moves_compress_and_tools_to_the_new_session(home: Path) -> None:
    engine = new_engine(home, "a1")
    core = engine.core
    engine.update_from_response({"prompt_tokens": 50_000, "completion_tokens": 10})
    assert engine.compress(chat(40)) is not None and engine.compression_count == 1
    a1_sections = len(core.chronicle(core.sessions.chronicle_name("a1")))
    assert a1_sections > 0

    # /new: Hermes sets agent.session_id, resets, then rebinds through bind_session_state.
    engine.on_session_reset()
    engine.bind_session_state(None, "b1")
    assert engine._session_id == "b1" and not engine._real_known
    other = chat(40, start=100)
    out = engine.compress(other)
    assert any(is_own_handoff(m) for m in out)
    assert len(captured(core, "b1")) == len(other)
    assert not [p for p in captured(core, "a1") if p["message"] in other]
    assert len(core.chronicle(core.sessions.chronicle_name("a1"))) == a1_sections
    assert len(core.chronicle(core.sessions.chronicle_name("b1"))) > 0
    status = engine.handle_tool_call("chronicle_context_status", {}, messages=out)
    assert '"passes": 1' in status  # b1's own pass, not a1's


def test_on_session_reset_follows_a_changed_hermes_session_id(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_SESSION_ID", "a1")
    engine = new_engine(home, "a1")
    engine.on_session_reset()
    assert engine._session_id == "a1"
    monkeypatch.setenv("HERMES_SESSION_ID", "n2")
    engine.on_session_reset()
    assert engine._session_id == "n2"


def test_a_branch_keeps_citing_the_sections_of_the_conversation_it_left(home: Path) -> None:
    engine = new_engine(home, "a1")
    core = engine.core
    first = engine.compress(chat(40))
    before = {(lo, hi) for _, _, lo, hi in cited(_handoff(first))}
    assert before

    # /branch: the provider records the branch, the engine is rebound to it.
    core.sessions.switch("br", parent_session_id="a1", reason="branch")
    engine.bind_session_state(None, "br")
    assert core.sessions.chronicle_name("br") != core.sessions.chronicle_name("a1")
    second = engine.compress([*first, *chat(40, start=200)], force=True)
    after = {(lo, hi) for _, _, lo, hi in cited(_handoff(second))}
    # The parent's sections are still cited (or condensed into a section of the branch that
    # covers them): nothing before the branch point left the handoff.
    lowest = min(lo for lo, _ in before)
    assert before <= after or min(lo for lo, _ in after) <= lowest


# -- finding 3: who a message compress captured first belongs to -------------------------------


def test_compress_captures_with_the_identity_the_memory_slot_remembered(home: Path) -> None:
    provider = ChronicleMemoryProvider()
    provider.initialize(
        "s1", hermes_home=str(home), platform="telegram", user_id="u7", agent_identity="coder"
    )
    engine = new_engine(home, "s1")
    messages = chat(40)
    engine.compress(messages)  # mid-turn: before the memory slot's sync_turn saw any of it
    provider.sync_turn("x", "y", session_id="s1", messages=messages)
    stored = captured(provider.core, "s1")
    assert len(stored) == len(messages)
    assert {(p["user_id"], p["profile"], p["agent_context"]) for p in stored} == {
        ("u7", "coder", "primary")
    }
    assert {p["speaker"] for p in stored if p["message"]["role"] == "user"} == {"person"}
    provider.shutdown()


def test_a_subagents_compress_keeps_its_agent_context(home: Path) -> None:
    provider = ChronicleMemoryProvider()
    provider.initialize("sub", hermes_home=str(home), platform="cli", agent_context="subagent")
    engine = new_engine(home, "sub")
    engine.compress(chat(40))
    stored = captured(provider.core, "sub")
    assert stored and {p["agent_context"] for p in stored} == {"subagent"}
    assert {p["speaker"] for p in stored if p["message"]["role"] == "user"} != {"person"}
    provider.shutdown()


@pytest.mark.parametrize(
    "chronicle",
    [{"capture": {"enabled": False}}, {"capture": {"skip_agent_contexts": ["flush"]}}],
    ids=["capture-off", "context-skipped"],
)
def test_compress_honours_the_capture_switches(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chronicle: dict[str, Any],
    store_settings: dict[str, str],
) -> None:
    home = _home(tmp_path, monkeypatch, {**store_settings, **chronicle})
    provider = ChronicleMemoryProvider()
    provider.initialize("f1", hermes_home=str(home), platform="cli", agent_context="flush")
    engine = new_engine(home, "f1")
    messages = chat(40)
    assert engine.compress(messages) is messages  # no progress, nothing recorded
    engine.on_session_end("f1", messages)
    assert captured(provider.core, "f1") == []
    provider.shutdown()


# -- finding 8: the core's lifetime counts the context engine -----------------------------------


def test_the_engine_never_reopens_a_core_its_last_holder_shut(home: Path) -> None:
    provider = ChronicleMemoryProvider()
    provider.initialize("e1", hermes_home=str(home), platform="cli")
    engine = new_engine(home, "e1")
    core = provider.core
    assert engine.core is core
    messages = chat(3)
    # Hermes at exit: the memory slot ends and shuts down first, then the engine's end.
    provider.on_session_end(messages)
    provider.shutdown()
    assert core._closed
    engine.on_session_end("e1", messages)
    assert ChronicleCore.open_cores() == []  # no brand-new core opened just to end
    reopened = ChronicleCore.for_hermes_home(str(home))
    assert len(captured(reopened, "e1")) == len(messages)


def test_a_provider_shutting_down_mid_call_leaves_the_closing_to_the_call(home: Path) -> None:
    provider = ChronicleMemoryProvider()
    provider.initialize("m1", hermes_home=str(home), platform="cli")
    engine = new_engine(home, "m1")
    core = provider.core
    entered, release = threading.Event(), threading.Event()
    real = core.compaction.compress

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(10)
        return real(*args, **kwargs)

    core.compaction.compress = slow  # type: ignore[method-assign]
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(engine.compress(chat(40))))
    worker.start()
    assert entered.wait(10)
    provider.shutdown()
    assert not core._closed and users.users(core) == 1  # the compress call still runs
    release.set()
    worker.join(10)
    assert any(is_own_handoff(m) for m in result[0])  # it finished on an open store
    assert core._closed  # and the last one out closed it


def test_a_standalone_engine_checkpoints_at_the_sessions_end(home: Path) -> None:
    engine = new_engine(home, "solo")
    core = engine.core
    messages = chat(3)
    engine.on_session_end("solo", messages)
    assert len(captured(core, "solo")) == len(messages)
    wal = Path(core.db_path + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


# -- finding 9: only a compression links sessions; a switch is recorded once --------------------


def test_an_unlabelled_start_with_an_old_id_does_not_merge_conversations(home: Path) -> None:
    engine = new_engine(home, "old")
    engine.on_session_start("fresh", old_session_id="old", platform="cli")
    assert engine.core.sessions.lineage("fresh") == ["fresh"]
    assert engine._session_id == "fresh"
    engine.on_session_start("next", old_session_id="fresh", boundary_reason="compression")
    assert engine.core.sessions.lineage("next") == ["fresh", "next"]


def test_both_slots_hearing_one_rotation_record_one_switch(home: Path) -> None:
    provider = ChronicleMemoryProvider()
    provider.initialize("r1", hermes_home=str(home), platform="cli")
    engine = new_engine(home, "r1")
    core = provider.core
    # Hermes' order in a compression rotation: the engine's start, then the memory switch.
    engine.on_session_start("r2", boundary_reason="compression", old_session_id="r1")
    provider.on_session_switch("r2", parent_session_id="r1", reset=False, reason="compression")
    assert switches(core, "r2") == [{"parent_session": "r1", "reason": "compression"}]
    # A different switch into the same session is still recorded.
    provider.on_session_switch("r2", parent_session_id="zz", reset=False, reason="resume")
    assert [s["reason"] for s in switches(core, "r2")] == ["compression", "resume"]
    provider.shutdown()


# -- finding 10: tree reads take no write lock when nothing they read changed -------------------


@pytest.mark.parametrize("where", ["memory", "file", "postgres"])
def test_tree_reads_do_not_write_for_events_outside_the_tree(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    from test_compaction_support import core_for

    with contextlib.ExitStack() as stack:
        if where == "postgres":
            cluster = request.getfixturevalue("postgres_cluster")
            core = stack.enter_context(postgres_core(cluster, tmp_path / "home"))
        else:
            core = core_for(":memory:" if where == "memory" else tmp_path / "t.db")
            stack.callback(core.shutdown)
        # In memory every read takes the one shared connection's lock, so reads wait for a
        # writer there by design: only the file and the server are read while one writes.
        _tree_reads_take_no_write(core, hold=where != "memory", explain=where != "postgres")


def _tree_reads_take_no_write(core: ChronicleCore, *, hold: bool, explain: bool) -> None:
    core.capture.capture_messages("t1", chat(2))
    core.sessions.switch("t2", parent_session_id="t1", reason="compression")
    assert core.sessions.lineage("t2") == ["t1", "t2"]
    folded = core.store.position(FOLD_NAME)
    # Every turn appends events the tree does not fold (turns, compactions, recall).
    core.capture.record_turn_start("t2", 3, "hello")
    assert core.store.last_seq() > folded

    held = threading.Event()
    done = threading.Event()

    def hold_the_write_lock() -> None:
        # The tree's writers' turn: SQLite's one write lock; PostgreSQL's tree lock.
        with core.sessions.tables.writing("holding the tree's writes"):
            held.set()
            done.wait(10)

    writer = threading.Thread(target=hold_the_write_lock)
    if hold:
        writer.start()
        assert held.wait(10)
    try:
        # With another writer holding the lock, reads still answer (they need no write).
        assert core.sessions.lineage("t2") == ["t1", "t2"]
        assert core.sessions.scope("t2")[0][0] == "t1"
        assert writer.is_alive() == hold  # answered while the writer still held its turn
    finally:
        done.set()
        if hold:
            writer.join(10)
    assert core.store.position(FOLD_NAME) == folded

    # A tree event another writer appended is still seen.
    core.store.append([core.types.pending(_switch("t1"), session="t3")])
    assert core.sessions.lineage("t3") == ["t1", "t2", "t3"]
    if not explain:
        return
    with core.store.reading() as conn:  # SQLite's query plan
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT session FROM session_heads WHERE lineage_root = ?"
                " ORDER BY started_seq, rowid",
                ("t1",),
            )
        )
    assert "session_heads_by_root" in plan


def _switch(parent: str) -> Any:
    from chronicle_engine.sessions.events import SessionSwitched

    return SessionSwitched(parent_session=parent, reason="compression")


def test_hermes_own_reset_path_rebinds_the_engine(home: Path) -> None:
    """Hermes' real `AIAgent.reset_session_state` (what /new, /resume and /branch run after
    setting `agent.session_id`), on a host object carrying only what that method reads."""
    import types

    from run_agent import AIAgent

    engine = new_engine(home, "h1")
    engine.update_from_response({"prompt_tokens": 40_000, "completion_tokens": 5})
    host = types.SimpleNamespace(context_compressor=engine, session_id="h2", _session_db=None)
    host._transition_context_engine_session = types.MethodType(
        AIAgent._transition_context_engine_session, host
    )
    AIAgent.reset_session_state(host)  # type: ignore[arg-type]
    assert engine._session_id == "h2" and not engine._real_known
    engine.compress(chat(40))
    assert captured(engine.core, "h2") and not captured(engine.core, "h1")
