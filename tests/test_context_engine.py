"""The context-engine slot as Hermes drives it: registration, deepcopy, policy, hooks, tools;
the Hermes home's config.yaml selects each store in turn (`store_settings`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_compaction_engine import turn
from test_compaction_support import core_for, load_plugin

from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.messages import is_own_handoff


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_settings: dict[str, str]) -> Path:
    hermes_home = tmp_path / "hermes_home"
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "compression": {
                    "threshold": 0.6,
                    "target_ratio": 0.25,
                    "protect_first_n": 1,
                    "protect_last_n": 4,
                },
                "chronicle": {"context": {"low_watermark_percent": 0.2}, **store_settings},
            }
        )
    )
    monkeypatch.setenv("HERMES_HOME", str(hermes_home))
    return hermes_home


@pytest.fixture
def core(home: Path) -> Any:
    config = load_hermes_config(home)
    c = core_for(config.location(), config)  # the SQLite file in home, or the PostgreSQL store
    yield c
    c.shutdown()


@pytest.fixture
def engine(core: ChronicleCore, home: Path) -> Any:
    plugin = load_plugin()
    from importlib import import_module

    module = import_module(plugin.__name__ + ".context")
    e = module.ChronicleContextEngine(core=core)
    e.update_model(model="m", context_length=64_000)
    e.on_session_start("a1", hermes_home=str(home), platform="cli")
    return e


def chat(turns: int) -> list[dict[str, Any]]:
    return [m for n in range(turns) for m in turn(n)]


def test_the_plugin_registers_a_hermes_context_engine_named_chronicle() -> None:
    from agent.context_engine import ContextEngine

    plugin = load_plugin()
    registered: list[Any] = []

    class GeneralLoader:  # the general loader's PluginContext offers register_context_engine
        def register_context_engine(self, engine: Any) -> None:
            registered.append(engine)

    plugin.register(GeneralLoader())
    (engine,) = registered
    assert isinstance(engine, ContextEngine) and engine.name == "chronicle"
    manifest = yaml.safe_load((Path(plugin.__file__).parent / "plugin.yaml").read_text())
    assert manifest["kind"] == "standalone"
    for tool in (
        "chronicle_expand",
        "chronicle_pin_context",
        "chronicle_edit_context",
        "chronicle_focus",
        "chronicle_context_status",
    ):
        assert tool in manifest["provides_tools"]
        assert tool in [s["name"] for s in engine.get_tool_schemas()]


def test_a_deep_copy_shares_the_core_and_keeps_working(engine: Any, core: ChronicleCore) -> None:
    core.store.last_seq()  # connections and locks are open: a naive deepcopy would fail
    clone = copy.deepcopy(engine)
    assert clone is not engine and clone.core is engine.core is core
    clone.update_model(model="small", context_length=100_000)
    assert engine.context_length == 64_000 and clone.context_length == 100_000
    messages = chat(40)
    out = clone.compress(messages)
    assert out != messages and any(is_own_handoff(m) for m in out)
    again = engine.compress(messages)  # the original, on the same shared core, still works
    assert any(is_own_handoff(m) for m in again)
    assert clone.compression_count == 1 and engine.compression_count == 1


def test_the_policy_follows_the_users_compression_settings(engine: Any) -> None:
    policy = engine.policy
    assert engine.threshold_tokens == int(64_000 * 0.75)  # 0.6, floored at 0.75 below 512K
    assert (
        policy.low_percent == 0.2
        and policy.sources["low"] == "chronicle.context.low_watermark_percent"
    )
    assert (engine.protect_first_n, engine.protect_last_n) == (1, 4)
    engine.update_model(model="big", context_length=1_000_000)
    assert engine.threshold_tokens == 600_000 and engine.context_length == 1_000_000


def test_should_compress_uses_real_usage_and_the_estimate_only_before_it(engine: Any) -> None:
    high = engine.threshold_tokens
    assert engine.should_compress(high) and not engine.should_compress(high - 1)  # no response yet
    engine.update_from_response(
        {"prompt_tokens": high - 5_000, "completion_tokens": 10, "total_tokens": high - 4_990}
    )
    assert not engine.should_compress(
        high + 3_000
    )  # a rough estimate does not override the real count
    assert engine.should_defer_preflight_to_real_usage(high + 3_000)
    assert engine.should_compress(
        engine.context_length
    )  # ... unless the request would not fit at all
    engine.update_from_response({"prompt_tokens": high + 1})
    assert engine.should_compress(0)
    engine.update_model(model="m", context_length=64_000)  # a model switch forgets the old counts
    assert not engine.should_compress(10)


def test_compress_then_rotation_then_tools_on_the_new_session(
    engine: Any, core: ChronicleCore
) -> None:
    messages = chat(40)
    out = engine.compress(
        messages, current_tokens=None, focus_topic=None, force=False, memory_context="pref: terse"
    )
    assert engine.compression_count == 1 and engine._last_compression_made_progress
    assert not engine.should_compress(
        0
    )  # our own post-compaction count stands until the next response
    handoff = next(m for m in out if is_own_handoff(m))
    assert "pref: terse" in handoff["content"]
    # What Hermes does next: end both slots' sessions, then start the continuation.
    engine.on_session_end("a1", messages)
    engine.on_session_start(
        "a2", boundary_reason="compression", old_session_id="a1", platform="cli"
    )
    assert core.sessions.lineage("a2") == ["a1", "a2"]
    assert core.sessions.chronicle_name("a2") == core.sessions.chronicle_name("a1")
    section = json.loads(engine.handle_tool_call("chronicle_context_status", {}, messages=out))
    assert section["passes"] == 1 and section["policy"]["protect_last_n"] == 4
    label = section["handoff"]["sections"][0]["section_id"]
    expanded = json.loads(
        engine.handle_tool_call(
            "chronicle_expand", {"section_id": label, "page_size": 200}, messages=out
        )
    )
    assert expanded["messages"][0]["message"] in messages and expanded["total"] == len(
        expanded["messages"]
    )
    bad = json.loads(
        engine.handle_tool_call("chronicle_expand", {"section_id": "999-1000"}, messages=out)
    )
    assert "no section" in bad["error"]


def test_pin_and_focus_tools_shape_the_next_compaction(engine: Any) -> None:
    messages = chat(40)
    pinned = json.loads(
        engine.handle_tool_call(
            "chronicle_pin_context",
            {"text": "line 3: value 7003", "note": "keep"},
            messages=messages,
        )
    )
    assert "pinned" in pinned
    focus = json.loads(
        engine.handle_tool_call("chronicle_focus", {"topic": "OPS-7"}, messages=messages)
    )
    assert focus["focus"] == "OPS-7"
    out = engine.compress(messages)
    assert turn(3)[2] in out and turn(3)[1] in out  # the pinned result, with its call
    handoff = next(m for m in out if is_own_handoff(m))["content"]
    assert "focus: OPS-7" in handoff


def test_nothing_escapes_into_the_host(
    engine: Any, core: ChronicleCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    messages = chat(40)
    monkeypatch.setattr(type(core.compaction), "compress", broken)
    assert engine.compress(messages) is messages
    assert engine.compression_count == 0
    monkeypatch.setattr(type(core.compaction), "status", broken)
    assert (
        "disk on fire"
        in json.loads(engine.handle_tool_call("chronicle_context_status", {}))["error"]
    )
    assert "unknown" in json.loads(engine.handle_tool_call("nope", {}))["error"]
    monkeypatch.setattr(type(core.compaction), "has_content", broken)
    assert engine.has_content_to_compress(messages) is True


def test_the_host_passes_every_optional_argument(engine: Any) -> None:
    from agent.conversation_compression import _supported_compression_kwargs

    kwargs = _supported_compression_kwargs(
        engine.compress, current_tokens=1, focus_topic="x", force=True, memory_context="m"
    )
    assert set(kwargs) == {"current_tokens", "focus_topic", "force", "memory_context"}


def test_compress_preflight_guard(engine: Any) -> None:
    assert engine.has_content_to_compress(chat(1)) is False
    assert engine.has_content_to_compress(chat(40)) is True


def test_a_lazy_engine_opens_the_core_of_hermes_home(home: Path) -> None:
    plugin = load_plugin()
    from importlib import import_module

    module = import_module(plugin.__name__ + ".context")
    e = module.ChronicleContextEngine()
    clone = copy.deepcopy(e)  # before any core exists
    e.on_session_start("x1", hermes_home=str(home))
    assert e.core.db_path == str((home / "chronicle" / "chronicle.db").resolve())
    assert clone.core is e.core  # one core per database, whichever copy opened it
    assert e.get_status()["engine"] == "chronicle"
    ChronicleCore.get(e.core.location).shutdown()
