"""The memory-provider slot driven the way Hermes drives it: its own MemoryManager, its threads."""

from __future__ import annotations

import json
import logging
import random
import threading
from collections import Counter
from pathlib import Path

import pytest
import yaml
from agent.memory_manager import MemoryManager
from agent.memory_provider import MemoryProvider
from test_compaction_support import tool_step

from chronicle_engine import users
from chronicle_engine.capture.events import HANDOFF_MARKER
from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore
from provider import ChronicleMemoryProvider


@pytest.fixture
def home(tmp_path, store_settings) -> Path:
    """A Hermes home on each store in turn: SQLite in it, then PostgreSQL named by config.yaml."""
    path = tmp_path / "hermes_home"
    path.mkdir()
    if store_settings:
        (path / "config.yaml").write_text(yaml.safe_dump({"chronicle": store_settings}))
    return path


def configure(home: Path, data: dict) -> None:
    """Write config.yaml, keeping the store the home was made on."""
    before = load_hermes_config(home)
    store = {"store": before.settings.store} if before.postgres else {}
    chronicle = {**data.get("chronicle", {}), **store}
    (home / "config.yaml").write_text(yaml.safe_dump({**data, "chronicle": chronicle}))


def core_of(home: Path) -> ChronicleCore:
    config = load_hermes_config(home)
    return ChronicleCore.get(config.location(), config=config)


def captured(core: ChronicleCore, sessions: list[str] | None = None) -> list[tuple[str, str]]:
    """(session, json of the wire message) for every MessageCaptured event."""
    return [
        (e.envelope.session or "", json.dumps(e.payload["message"], sort_keys=True))
        for e in core.store.read(sessions=sessions, namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


def tool_turn(rng: random.Random, agent: str, n: int) -> list[dict]:
    return [
        *tool_step(f"{agent}_call_{n}", "true", "output " * rng.randint(1, 50)),
        {"role": "assistant", "content": "Done." if rng.random() < 0.5 else f"answer {n}"},
    ]


class Agent:
    """One Hermes agent: a MemoryManager with Chronicle, a live message list, Hermes' hooks."""

    def __init__(self, home: Path, name: str, turns: int, seed: int) -> None:
        self.manager = MemoryManager()
        self.provider = ChronicleMemoryProvider()
        self.manager.add_provider(self.provider)
        self.session = f"{name}_0"
        self.sessions = [self.session]
        self.manager.initialize_all(self.session, hermes_home=str(home), platform="cli")
        self.name = name
        self.turns = turns
        self.rng = random.Random(seed)
        self.live: list[dict] = []
        self.expected: list[dict] = []  # every conversation message, in order, once

    def compress(self) -> None:
        """What Hermes does around a compaction with the built-in compressor (rotation mode)."""
        self.manager.on_pre_compress(self.live)
        keep = self.live[-3:]
        old = self.session
        self.manager.on_session_end(list(self.live))  # commit_memory_session
        self.session = f"{self.name}_{len(self.sessions)}"
        self.sessions.append(self.session)
        self.manager.on_session_switch(
            self.session, parent_session_id=old, reset=False, reason="compression"
        )
        handoff = {
            "role": "user",
            "content": HANDOFF_MARKER + " summary",
            "_compressed_summary": True,
        }
        self.live = [self.live[0], handoff, *[dict(m) for m in keep]]

    def run(self) -> None:
        for n in range(self.turns):
            text = "ok" if self.rng.random() < 0.4 else f"{self.name} question {n}"
            self.manager.on_turn_start(n + 1, text)
            self.manager.prefetch_all(text)  # on its own thread, like Hermes
            user = {"role": "user", "content": text}
            self.live.append(user)
            self.expected.append(user)
            new = tool_turn(self.rng, self.name, n)
            self.live.extend(new)
            self.expected.extend(new)
            self.manager.sync_all(
                text, new[-1]["content"], session_id=self.session, messages=self.live
            )
            self.manager.queue_prefetch_all(text, session_id=self.session)
            if n % 7 == 6:
                self.compress()
        # The session ends while the last sync may still be queued on the mem-sync worker.
        self.manager.on_session_end(self.live)
        self.manager.shutdown_all()


def test_full_hermes_call_sequence_from_several_agents_at_once(home):
    agents = [Agent(home, f"agent{i}", turns=15, seed=i) for i in range(4)]
    errors: list[BaseException] = []

    def drive(agent: Agent) -> None:
        try:
            agent.run()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    core = core_of(home)
    for agent in agents:
        got = [m for _, m in captured(core, agent.sessions)]
        want = [json.dumps(m, sort_keys=True) for m in agent.expected]
        assert got == want, agent.name  # every message of every turn, once, in order
        assert core.sessions.lineage(agent.session) == agent.sessions
    core.shutdown()


def test_on_session_end_racing_the_last_sync_turn(home):
    provider = ChronicleMemoryProvider()
    provider.initialize("race", hermes_home=str(home), platform="cli")
    live: list[dict] = []
    for round_ in range(30):
        live += [
            {"role": "user", "content": "ok"},
            {"role": "assistant", "content": f"r{round_ % 3}"},
        ]
        snapshot = list(live)
        barrier = threading.Barrier(2)

        def sync(snapshot: list[dict] = snapshot, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            provider.sync_turn("ok", "r", session_id="race", messages=snapshot)

        def end(snapshot: list[dict] = snapshot, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            provider.on_session_end(snapshot)

        threads = [threading.Thread(target=sync), threading.Thread(target=end)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    core = provider.core
    assert [m for _, m in captured(core)] == [json.dumps(m, sort_keys=True) for m in live]
    ends = [e for e in core.capture.host_events("race") if e.envelope.type == "SessionEnded"]
    assert len(ends) == 30
    provider.shutdown()


def test_it_is_hermes_memory_provider_and_nothing_escapes(home, caplog):
    provider = ChronicleMemoryProvider()
    assert isinstance(provider, MemoryProvider) and provider.name == "chronicle"
    assert provider.is_available()
    with caplog.at_level(logging.WARNING, logger="chronicle.provider"):
        # Not initialised: every hook degrades to its neutral value and logs once.
        assert provider.sync_turn("a", "b", session_id="s", messages=[{"role": "user"}]) is None
        assert provider.sync_turn("a", "b", session_id="s") is None
        assert provider.on_pre_compress([]) == ""
        assert provider.prefetch("q") == ""
        # Tool schemas are static (Hermes indexes them before initialize()), and a tool call
        # that arrives first opens the core HERMES_HOME names.
        assert "chronicle_search" in {t["name"] for t in provider.get_tool_schemas()}
        assert json.loads(provider.handle_tool_call("chronicle_search", {}))["error"]
    assert sum("sync_turn failed" in r.getMessage() for r in caplog.records) == 1
    provider.initialize("s", hermes_home=str(home), platform="cli")
    provider.core.shutdown()  # the database goes away under the provider
    provider.sync_turn("a", "b", session_id="s", messages=[{"role": "user", "content": "x"}])
    provider.on_session_end([{"role": "user", "content": "x"}])
    provider.shutdown()


def test_switches_hooks_and_masking_are_recorded(home):
    provider = ChronicleMemoryProvider()
    provider.initialize("s1", hermes_home=str(home), platform="telegram", user_id="u-7")
    key = "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"
    provider.on_turn_start(1, f"my token is {key}")
    provider.sync_turn(
        "hi",
        "hello",
        session_id="s1",
        messages=[
            {"role": "user", "content": f"[Alice] my token is {key}"},
            {"role": "assistant", "content": "stored nowhere but the transcript"},
        ],
    )
    provider.on_memory_write("add", "user", f"token {key}", metadata={"session_id": "s1"})
    provider.on_delegation("look it up", f"found {key}", child_session_id="child")
    provider.on_session_switch("s2", parent_session_id="s1", reset=False, reason="branch")
    provider.on_session_switch("s2", parent_session_id="", rewound=True)
    provider.on_session_switch("s3", parent_session_id="s2", reset=True, reason="new_session")
    core = provider.core
    host = [e.payload for e in core.capture.host_events("s1")]
    assert all(key not in json.dumps(p) for p in host)
    assert [e.envelope.type for e in core.capture.host_events("s1")] == [
        "TurnStarted",
        "MemoryWritten",
        "DelegationObserved",
    ]
    (first, _) = [
        e.payload for e in core.store.read(session="s1") if e.envelope.type == "MessageCaptured"
    ]
    assert first["person_text"] == "my token is «masked:github_token»"
    assert first["user_id"] == "u-7"
    assert core.sessions.lineage("s3") == ["s3"]
    assert core.sessions.chronicle_names("s2") == ["conversation:s2", "conversation:s1"]
    switches = [
        e.payload["reason"]
        for e in core.store.read(namespaces=["chronicle.session"])
        if e.envelope.type == "SessionSwitched"
    ]
    assert switches == ["branch", "rewound", "new"]
    provider.shutdown()


def test_pre_compress_captures_first_and_stays_quiet_when_chronicle_compacts_too(home):
    provider = ChronicleMemoryProvider()
    provider.initialize("s", hermes_home=str(home), platform="cli")
    live = [
        {"role": "user", "content": "remember the port 8443"},
        {"role": "assistant", "content": "ok"},
    ]
    note = provider.on_pre_compress(live)
    assert "2 so far" in note
    assert len(captured(provider.core)) == 2
    provider.shutdown()
    configure(home, {"context": {"engine": "chronicle"}})
    other = ChronicleMemoryProvider()
    other.initialize("s", hermes_home=str(home), platform="cli")
    assert other.on_pre_compress(live) == ""
    other.shutdown()


def test_capture_switches_honour_config(home):
    configure(home, {"chronicle": {"capture": {"skip_agent_contexts": ["flush"]}}})
    flush = ChronicleMemoryProvider()
    flush.initialize("f", hermes_home=str(home), platform="cli", agent_context="flush")
    flush.sync_turn("x", "y", session_id="f", messages=[{"role": "user", "content": "x"}])
    cron = ChronicleMemoryProvider()
    cron.initialize("c", hermes_home=str(home), platform="cron", agent_context="cron")
    cron.sync_turn("x", "y", session_id="c", messages=[{"role": "user", "content": "digest"}])
    core = cron.core
    assert captured(core, ["f"]) == []
    (event,) = [e for e in core.store.read(session="c") if e.envelope.type == "MessageCaptured"]
    assert event.payload["speaker"] == "automation" and event.payload["person_text"] == ""
    flush.shutdown()
    cron.shutdown()


def test_the_last_provider_to_go_shuts_the_core(home):
    first, second = ChronicleMemoryProvider(), ChronicleMemoryProvider()
    first.initialize("a", hermes_home=str(home), platform="cli")
    second.initialize("b", hermes_home=str(home), platform="cli")
    core = first.core
    assert second.core is core and users.users(core) == 2
    first.shutdown()
    assert not core._closed
    second.sync_turn("x", "y", session_id="b", messages=[{"role": "user", "content": "still here"}])
    second.shutdown()
    assert core._closed
    assert ChronicleCore.get(core.location) is not core  # a fresh core reopens the store


def test_setup_schema_save_config_and_backup_paths(tmp_path):
    # SQLite only: where its file lives, and the files `hermes backup` must copy.
    home = tmp_path / "hermes_home"
    home.mkdir()
    provider = ChronicleMemoryProvider()
    assert [f["key"] for f in provider.get_config_schema()][-1] == "db_path"
    (home / "config.yaml").write_text(yaml.safe_dump({"memory": {"provider": "chronicle"}}))
    assert provider.backup_paths() == []  # the default database lives inside HERMES_HOME
    outside = tmp_path / "elsewhere" / "chronicle.db"
    provider.save_config({"db_path": str(outside)}, str(home))
    saved = yaml.safe_load((home / "config.yaml").read_text())
    assert saved["memory"] == {"provider": "chronicle"}  # the rest of the file is kept
    assert saved["chronicle"]["db_path"] == str(outside)
    assert provider.backup_paths() == [str(outside), f"{outside}-wal", f"{outside}-shm"]
    provider.initialize("s", hermes_home=str(home), platform="cli")
    assert Path(provider.core.db_path) == outside
    provider.shutdown()


def test_a_turn_without_the_live_list_is_still_captured_once(home):
    provider = ChronicleMemoryProvider()
    provider.initialize("s", hermes_home=str(home), platform="cli")
    for _ in range(3):
        provider.sync_turn("ok", "Done.", session_id="s")
    assert Counter(m for _, m in captured(provider.core)) == {
        json.dumps({"role": "user", "content": "ok"}, sort_keys=True): 3,
        json.dumps({"content": "Done.", "role": "assistant"}, sort_keys=True): 3,
    }
    provider.shutdown()


def test_memory_comes_back_in_a_later_session_through_recall(home):
    provider = ChronicleMemoryProvider()
    provider.initialize("monday", hermes_home=str(home), platform="cli")
    provider.sync_turn(
        "x",
        "y",
        session_id="monday",
        messages=[
            {"role": "user", "content": "Remember that my project launch day is Friday."},
            {"role": "assistant", "content": "Noted: launch on Friday."},
        ],
    )
    provider.on_session_switch(
        "tuesday", parent_session_id="monday", reset=True, reason="new_session"
    )
    names = {schema["name"] for schema in provider.get_tool_schemas()}
    assert "chronicle_search" in names
    recalled = provider.prefetch("When is my project launch day?", session_id="")
    assert "Friday" in recalled
    result = json.loads(provider.handle_tool_call("chronicle_search", {"query": "launch day"}))
    assert "Friday" in json.dumps(result)
    provider.shutdown()
