"""Isolation between the people who share one database: the log's seqs are global, so a tool that
takes a seq must check whose it is. A pin may name only the conversation's own messages; a pin
on another user's seq is refused in the tool's own words and records nothing."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml
from faults_support import report
from test_compaction_support import load_plugin

from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore
from provider import ChronicleMemoryProvider


def chat(user: str, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(n):
        out += [
            {"role": "user", "content": f"{user} asks {k}: keep the figure {k * 7919}"},
            {"role": "assistant", "content": f"Kept {k * 7919} for {user}."},
        ]
    return out


def seqs_of(core: ChronicleCore, session: str) -> list[int]:
    return [
        e.seq
        for e in core.store.read(session=session, namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


def test_a_pin_on_another_users_seq_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_settings: dict[str, str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    if store_settings:  # PostgreSQL, named by config.yaml
        (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": store_settings}))
    monkeypatch.setenv("HERMES_HOME", str(home))
    live = {"alice": chat("alice", 4), "bob": chat("bob", 4)}
    providers = {}
    for user, session in (("alice", "a1"), ("bob", "b1")):
        provider = ChronicleMemoryProvider()
        provider.initialize(session, hermes_home=str(home), platform="cli", user_id=user)
        provider.sync_turn("", "", session_id=session, messages=live[user])
        providers[user] = provider
    engine = import_module(load_plugin().__name__ + ".context").ChronicleContextEngine(
        hermes_home=str(home)
    )
    engine.update_model(model="m", context_length=64_000)
    engine.on_session_start("b1", hermes_home=str(home), platform="cli")
    config = load_hermes_config(home)
    core = ChronicleCore.get(config.location(), config=config)
    alices, bobs = seqs_of(core, "a1"), seqs_of(core, "b1")
    assert alices and bobs and not set(alices) & set(bobs)

    def pin(**args: Any) -> dict[str, Any]:
        return json.loads(
            engine.handle_tool_call("chronicle_pin_context", args, messages=live["bob"])
        )

    def recorded() -> int:
        return sum(
            1
            for e in core.store.read(namespaces=["chronicle.context"])
            if e.envelope.type == "ContextPinned"
        )

    tries = [
        {"from_seq": alices[0]},
        {"from_seq": alices[0], "to_seq": alices[-1]},
        {"from_seq": alices[-1], "to_seq": bobs[-1]},  # alice's start, bob's end
        {"from_seq": bobs[0], "to_seq": core.store.last_seq() + 100},  # bob's start, nobody's end
        {"from_seq": core.store.last_seq() + 100},  # nobody's
    ]
    refused = 0
    for args in tries:
        answer = pin(**args)
        assert "pinned" not in answer, args
        assert "not a message of this conversation" in answer["error"], answer
        refused += 1
    assert recorded() == 0
    assert "pinned" in pin(from_seq=bobs[1], to_seq=bobs[2], note="his own")
    assert "pinned" in pin(text="bob asks 3")  # by a phrase in his own live list
    assert recorded() == 2
    status = json.loads(engine.handle_tool_call("chronicle_context_status", {}, messages=[]))
    assert alices[0] not in [p.get("from_seq") for p in status.get("pins", [])]
    report("isolation: pins", tried=len(tries), refused=refused, foreign_pins_recorded=0)
    for provider in providers.values():
        provider.shutdown()
