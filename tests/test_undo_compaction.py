"""Undo after compactions: Hermes' own `/undo` (the CLI's `undo_last`, which truncates the host's
list and tells the memory providers `on_session_switch(..., rewound=True)` through Hermes' real
MemoryManager), after 1, 2 and 10 compactions. After each undo and the turn that follows it, the
session tree's projection is the list the host holds.

Both slots are loaded as Hermes loads them (bench/soak.py's loop, at CI size): a 64K window with
~40K of host overhead, so a pass comes every few turns. Run with and without the session rotation
a compaction brings (`compression.in_place`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from agent.memory_manager import MemoryManager
from agent.model_metadata import estimate_messages_tokens_rough
from test_compaction_support import rotate, slots, tool_step, wire

from chronicle_engine.core import ChronicleCore
from chronicle_engine.messages import is_own_handoff

WINDOW, OVERHEAD = 64_000, 40_000
# After that many passes, /undo that many turns (0: every turn after the handoff, so the host
# holds only what came before it).
UNDO_AFTER = {1: 1, 2: 2, 3: 0, 10: 1}


def _turn(t: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"Turn {t}: check ticket T-{t} and report."},
        *tool_step(f"call_{t}", f"cat /srv/t-{t}.log", f"exit 0\nT-{t} ok\n" + "x " * 600),
        {"role": "assistant", "content": f"T-{t} is fine."},
    ]


def _undo(cli_state: SimpleNamespace, turns: int) -> None:
    """Hermes' CLI `/undo <turns>`, its own code, on the state it reads (no session database)."""
    from cli import HermesCLI

    HermesCLI.undo_last(cli_state, n=turns, prefill=False)  # type: ignore[arg-type]


def _key(message: dict[str, Any]) -> str:
    return json.dumps(wire(message), sort_keys=True)


def _projected(core: ChronicleCore, session: str) -> list[str]:
    return [_key(m) for m in core.sessions.projection(session, branch_summaries=False)]


def _held(messages: list[dict[str, Any]]) -> list[str]:
    # The tree keeps a handoff as its summary text: a user message with that content.
    return [
        _key({"role": "user", "content": m["content"]} if is_own_handoff(m) else m)
        for m in messages
    ]


@pytest.mark.parametrize("rotated", [True, False], ids=["rotation", "in_place"])
def test_undo_after_compactions_keeps_the_projection_equal_to_the_host_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rotated: bool, store_settings: dict[str, str]
) -> None:
    home = tmp_path / "hermes_home"
    home.mkdir()
    slots_selected = {"memory": {"provider": "chronicle"}, "context": {"engine": "chronicle"}}
    (home / "config.yaml").write_text(  # (on each store: SQLite, then PostgreSQL)
        yaml.safe_dump({**slots_selected, "chronicle": dict(store_settings)})
    )
    monkeypatch.setenv("HERMES_HOME", str(home))
    registered, provider = slots()
    manager = MemoryManager()
    manager.add_provider(provider)
    session = "undo-0"
    provider.initialize(session, hermes_home=str(home), platform="cli")
    engine = copy.deepcopy(registered)
    engine.update_model(model="undo", context_length=WINDOW)
    engine.on_session_start(session, hermes_home=str(home), platform="cli")
    state = SimpleNamespace(
        conversation_history=[],
        session_id=session,
        _session_db=None,
        agent=SimpleNamespace(_memory_manager=manager),
        _undo_content_to_text=lambda content: str(content or ""),
    )
    passes = rotations = 0
    checked: list[int] = []
    try:
        for t in range(400):  # bounded: 10 passes come well before
            if len(checked) == len(UNDO_AFTER):
                break
            new = _turn(t)
            messages = state.conversation_history
            messages.extend(new)
            prompt = OVERHEAD + estimate_messages_tokens_rough(messages)
            if engine.should_compress(prompt):
                compressed = engine.compress(messages, current_tokens=prompt)
                assert compressed != messages
                passes += 1
                if rotated:
                    rotations += 1
                    session = rotate(engine, manager, session, f"undo-{rotations}", messages)
                    state.session_id = session
                state.conversation_history = messages = compressed
            engine.update_from_response({"prompt_tokens": prompt, "completion_tokens": 40})
            provider.sync_turn(
                new[0]["content"], new[-1]["content"], session_id=session, messages=messages
            )
            assert _projected(engine.core, session) == _held(messages)
            if passes in UNDO_AFTER and passes not in checked:
                checked.append(passes)
                before = len(state.conversation_history)
                history = state.conversation_history
                at = next(i for i, m in enumerate(history) if is_own_handoff(m))
                after = sum(1 for m in history[at + 1 :] if m["role"] == "user")
                _undo(state, UNDO_AFTER[passes] or after)
                assert len(state.conversation_history) < before
                assert any(is_own_handoff(m) for m in state.conversation_history)
                # The turn after the undo: the host sends its truncated list plus the new turn.
                redo = [
                    dict(m, content=f"{m['content']} (again)") if m["role"] == "user" else m
                    for m in _turn(1000 + t)
                ]
                state.conversation_history.extend(redo)
                provider.sync_turn(
                    redo[0]["content"],
                    redo[-1]["content"],
                    session_id=session,
                    messages=state.conversation_history,
                )
                core = engine.core
                assert _projected(core, session) == _held(state.conversation_history), (
                    f"after {passes} compaction(s) and an undo the tree projects "
                    f"{len(_projected(core, session))} messages, the host holds "
                    f"{len(state.conversation_history)}"
                )
        assert checked == list(UNDO_AFTER)
    finally:
        manager.shutdown_all()
