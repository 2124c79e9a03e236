"""The hooks newer Hermes (its main branch) adds, each against the contract its
agent/context_engine.py and agent/memory_provider.py document. Hermes 0.19.0 calls none of
them; each is also checked to be harmless there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_compaction_engine import turn
from test_compaction_limits import HERMES_DEFAULTS, core  # noqa: F401 - the shared fixture
from test_compaction_support import load_plugin

from chronicle_engine.compaction.policy import model_threshold, policy_from_config
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.messages import content_text, estimate_tokens


@pytest.fixture
def engine(core: ChronicleCore) -> Any:  # noqa: F811 - the shared fixture
    module = import_module(load_plugin().__name__ + ".context")
    e = module.ChronicleContextEngine(core=core)
    e.update_model(model="m", context_length=128_000)
    e.on_session_start("n1", platform="cli")
    return e


@pytest.fixture
def provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_settings: dict[str, str]
) -> Iterator[Any]:
    home = tmp_path / "home"
    home.mkdir()
    config: dict[str, Any] = {"memory": {"provider": "chronicle"}}
    if store_settings:  # SQLite, then PostgreSQL (conftest.py)
        config["chronicle"] = dict(store_settings)
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("HERMES_HOME", str(home))
    module = import_module(load_plugin().__name__ + ".provider")
    p = module.ChronicleMemoryProvider()
    p.initialize("p1", hermes_home=str(home), platform="cli")
    yield p
    p.shutdown()


def chat(turns: int) -> list[dict[str, Any]]:
    return [m for n in range(turns) for m in turn(n)]


# -- context engine ---------------------------------------------------------------------------


def test_clone_for_agent_shares_the_store_and_copies_the_budget_state(engine: Any) -> None:
    engine.update_from_response({"prompt_tokens": 5_000})
    clone = engine.clone_for_agent()
    assert clone is not engine and clone.core is engine.core
    assert clone._thrash is not engine._thrash and clone._real_tokens == 5_000
    clone.update_model(model="other", context_length=200_000)
    assert engine.context_length == 128_000 and clone.context_length == 200_000


def test_should_compress_info_says_why_not_only_when_held(engine: Any) -> None:
    assert engine.should_compress_info(1_000) == (False, None)
    assert engine.should_compress_info(engine.threshold_tokens) == (True, None)


def test_has_content_to_compress(engine: Any) -> None:
    assert not engine.has_content_to_compress(chat(1)[:3])  # the head holds it all
    assert engine.has_content_to_compress(chat(40))


def test_prune_tool_results_only_trims_old_output_and_keeps_it_restorable(engine: Any) -> None:
    messages = chat(30)
    before = json.dumps(messages)
    out, pruned = engine.prune_tool_results_only(messages, current_tokens=50_000)
    assert json.dumps(messages) == before  # the host's list is not changed
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    cut = [i for i in tools if out[i] != messages[i]]
    assert pruned == len(cut) > 0
    assert out[:3] == messages[:3] and out[-20:] == messages[-20:]  # head and tail as they were
    assert all(out[i] == messages[i] for i in range(len(messages)) if messages[i]["role"] != "tool")
    for i in cut:
        assert estimate_tokens(out[i]) < estimate_tokens(messages[i])
        note = content_text(out[i])
        start = note.index("chronicle_expand(from_seq=") + len("chronicle_expand(from_seq=")
        seq = int(note[start:].split(",")[0])
        back = json.loads(
            engine.handle_tool_call(
                "chronicle_expand", {"from_seq": seq, "to_seq": seq}, messages=out
            )
        )
        assert back["messages"][0]["message"] == messages[i]
    again, n = engine.prune_tool_results_only(out)
    assert n == 0 and again is out  # nothing more to trim


def test_on_turn_complete_observes_and_returns_nothing(engine: Any) -> None:
    messages = chat(2)
    copy = json.dumps(messages)
    assert engine.on_turn_complete(messages, usage={"prompt_tokens": 10}, turn_id="t1") is None
    assert engine.on_turn_complete(messages, usage=None, interrupted=True) is None
    assert json.dumps(messages) == copy


def test_per_model_thresholds_longest_match_and_provider_scope(engine: Any) -> None:
    table = {"gpt-5": 0.8, "gpt-5.5": 0.85, "codex:gpt-5": 0.9}
    assert model_threshold("gpt-5.5-mini", table) == (0.85, "gpt-5.5")
    assert model_threshold("gpt-5-mini", table, "codex") == (0.9, "codex:gpt-5")
    assert model_threshold("claude", table) is None
    # The host assigns the resolved map before update_model; the policy follows the model.
    engine.model_thresholds = {"big-model": 0.9}
    engine.update_model(model="big-model-2", context_length=128_000)
    assert engine.threshold_tokens == int(128_000 * 0.9)
    assert engine.policy.sources["high"] == "compression.model_thresholds[big-model]"
    engine.update_model(model="small", context_length=128_000)  # no match: the configured one
    assert engine.threshold_tokens == int(128_000 * 0.75)
    # Without the host's map, config.yaml's applies; the small-window floor still holds.
    configured = Config(compression={**HERMES_DEFAULTS, "model_thresholds": {"tiny": 0.6}})
    assert policy_from_config(configured, 128_000, model="tiny-1").high_percent == 0.75


# -- memory provider --------------------------------------------------------------------------


def test_pre_compress_is_a_checkpoint_that_raises_when_required(provider: Any) -> None:
    assert provider.pre_compress_checkpoint_api_version == 2
    messages = chat(3)
    provider.on_pre_compress(messages, require_checkpoint=True)
    assert provider.core.sessions.message_count("p1") == len(messages)
    assert provider.on_pre_compress(messages) is not None  # the v1 call shape still works

    def broken(*_: Any, **__: Any) -> int:
        raise OSError("disk full")

    provider.core.capture.capture_turn = broken
    with pytest.raises(RuntimeError, match="keep the transcript uncompressed"):
        provider.on_pre_compress(chat(4), require_checkpoint=True)
    assert provider.on_pre_compress(chat(4)) == ""  # best effort: degrade, never raise


def test_recall_status_reflects_the_last_prefetch_only(provider: Any) -> None:
    provider.sync_turn(
        "the vault code for locker nine is 4471",
        "Noted.",
        session_id="p1",
        messages=[
            {"role": "user", "content": "the vault code for locker nine is 4471"},
            {"role": "assistant", "content": "Noted."},
        ],
    )
    provider.on_session_switch("p2", parent_session_id="", reset=True)
    found = provider.prefetch("what is the vault code for locker nine?", session_id="p2")
    assert "4471" in found
    status = provider.recall_status()
    assert status is not None and status.provider_label == "Chronicle"
    assert status.count == sum(1 for ln in found.splitlines() if ln.startswith("- [")) > 0
    assert provider.prefetch("ok", session_id="p2") == ""
    assert provider.recall_status() is None  # never a stale count


def test_trivial_prompts_skip_prefetch(provider: Any) -> None:
    module = import_module(load_plugin().__name__ + ".provider")
    for text in ("", "  ", "/compress", "ok", "Thanks!", "go ahead", "hi."):
        assert module.is_trivial_prompt(text), text
    for text in ("ok so what was the deploy key path?", "k8s config", "note this down"):
        assert not module.is_trivial_prompt(text), text
    calls: list[str] = []
    recall = provider.core.recall
    original = recall.queue_prefetch
    recall.queue_prefetch = lambda query, **kw: calls.append(query)
    try:
        provider.queue_prefetch("thanks", session_id="p1")
        provider.queue_prefetch("which port does billing use?", session_id="p1")
    finally:
        recall.queue_prefetch = original
    assert calls == ["which port does billing use?"]
