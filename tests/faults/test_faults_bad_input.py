"""Bad input at every host-facing call: one bad message never stops capture of a session.

Each example opens a fresh store, drives both slots the way Hermes does with a conversation in
which one message (or one hook argument) is bad: a lone surrogate, control characters, a cycle,
nesting beyond any real message, a foreign object, numbers JSON has no form for. The laws:
- no call raises, and none logs a warning (a guarded failure is a silent loss);
- every message of the list is in the log, once, the bad one escaped or marked visibly, and the
  original of an escaped one recoverable from the event;
- compress still folds (a valid list that differs from the input) and captures nothing twice.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml
from faults_support import core_of, example_store, examples, report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compaction_support import load_plugin

from chronicle_engine.capture.align import UNREPRESENTABLE
from chronicle_engine.compaction.contract import violations
from chronicle_engine.core import ChronicleCore
from provider import ChronicleMemoryProvider

SURROGATE = "caf\udce9"
TRIED: dict[str, int] = {"examples": 0, "hook calls": 0}


class Foreign:
    def __init__(self) -> None:
        self.name = "an object"
        self._hidden = 1


def cyclic() -> dict[str, Any]:
    part: dict[str, Any] = {"type": "text", "text": "loop"}
    part["self"] = part
    return part


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


# The bad values one message can carry, by name (a case is one of these in one place).
BAD_VALUES: dict[str, Any] = {
    "lone surrogate": SURROGATE,
    "high surrogate": "x\ud800y",
    "nul and controls": "a\x00b\x1b[31mc\x7f",
    "cycle": None,  # built per example: a cycle cannot be shared safely
    "deep nesting": None,
    "foreign object": None,
    "nan and infinity": [math.nan, math.inf, -math.inf],
    "huge integer": 10**400,
    "surrogate key": {"caf\udce9": "value"},
}


def bad_value(kind: str) -> Any:
    if kind == "cycle":
        return [cyclic()]
    if kind == "deep nesting":
        return deep(3000)
    if kind == "foreign object":
        return Foreign()
    return BAD_VALUES[kind]


def conversation(turns: int) -> list[dict[str, Any]]:
    live: list[dict[str, Any]] = []
    for n in range(turns):
        live += [
            {"role": "user", "content": f"request {n}: check ticket OPS-{n}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"call{n}",
                        "type": "function",
                        "function": {"name": "shell", "arguments": json.dumps({"n": n})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call{n}", "content": f"output {n} " + "x" * 800},
            {"role": "assistant", "content": f"Ticket OPS-{n} is done."},
        ]
    return live


PLACES = ["user content", "tool content", "tool arguments", "content part", "extra key"]


def spoil(message_list: list[dict[str, Any]], index: int, place: str, value: Any) -> None:
    """Put `value` into the message at `index` (a turn starts at a multiple of 4)."""
    turn = index - index % 4
    if place == "user content":
        message_list[turn]["content"] = value
    elif place == "tool content":
        message_list[turn + 2]["content"] = value
    elif place == "tool arguments":
        message_list[turn + 1]["tool_calls"][0]["function"]["arguments"] = value
    elif place == "content part":
        message_list[turn + 3]["content"] = [{"type": "text", "text": "part"}, value]
    else:
        message_list[turn + 3]["metadata"] = value


def write_config(home: Path, store: str | None = None) -> None:
    """config.yaml; `store` names a PostgreSQL schema (else SQLite under the home)."""
    config = {
        "compression": {"threshold": 0.6, "protect_first_n": 1, "protect_last_n": 4},
        "chronicle": {"busy_timeout_ms": 200, **({"store": store} if store else {})},
    }
    (home / "config.yaml").write_text(yaml.safe_dump(config))


def captured(core: ChronicleCore, session: str) -> list[dict[str, Any]]:
    return [
        e.payload
        for e in core.store.read(session=session, namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


@pytest.mark.parametrize("store", ["sqlite", "postgres"])  # a store of its own an example
@settings(
    max_examples=examples(18),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(sorted(BAD_VALUES)),
    place=st.sampled_from(PLACES),
    turn=st.integers(0, 5),
)
def test_one_bad_message_never_stops_capture(
    store: str,
    kind: str,
    place: str,
    turn: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: Any,
    request: pytest.FixtureRequest,
) -> None:
    with tempfile.TemporaryDirectory() as tmp, example_store(store, request) as conninfo:
        home = Path(tmp)
        write_config(home, conninfo)
        monkeypatch.setenv("HERMES_HOME", str(home))
        caplog.clear()
        caplog.set_level(logging.WARNING)
        provider = ChronicleMemoryProvider()
        provider.initialize("s1", hermes_home=str(home), platform="cli", user_id="alice")
        engine = import_module(load_plugin().__name__ + ".context").ChronicleContextEngine(
            hermes_home=str(home)
        )
        engine.update_model(model="m", context_length=64_000)
        engine.on_session_start("s1", hermes_home=str(home), platform="cli")
        try:
            live = conversation(8)
            spoil(live, turn * 4, place, bad_value(kind))
            for n in range(8):
                head = live[: 4 * (n + 1)]
                provider.on_turn_start(n + 1, head[-4]["content"])
                assert isinstance(provider.prefetch(f"ticket OPS-{n}"), str)
                provider.sync_turn("", "", session_id="s1", messages=head)
            out = engine.compress(list(live), current_tokens=60_000, force=True)
            provider.on_session_end(live)
            engine.on_session_end("s1", live)
            core = core_of(home)
            stored = captured(core, "s1")
            assert len(stored) == len(live), (kind, place, len(stored))
            assert stored[-1]["message"] == live[-1] or turn == 7
            assert isinstance(out, list) and out and out != live
            assert not violations(live, out)
            for payload in stored:
                # Every stored text is valid UTF-8, and an escaped message keeps its original.
                json.dumps(payload, ensure_ascii=False).encode("utf-8")
                if payload["original"] is not None:
                    assert "\\u" in payload["original"]
                    assert json.loads(payload["original"])["role"] == payload["role"]
            if kind in ("cycle", "deep nesting"):
                assert any(UNREPRESENTABLE in json.dumps(p["message"]) for p in stored)
            found = json.loads(provider.handle_tool_call("chronicle_search", {"query": "OPS-7"}))
            assert found.get("count", 0) >= 1, found
            problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert not problems, problems
            TRIED["examples"] += 1
            TRIED["hook calls"] += 8 * 3 + 4
        finally:
            provider.shutdown()
            engine.on_session_end("s1", [])
            for core in ChronicleCore.open_cores():
                if tmp in core.db_path:
                    core.shutdown()


def test_the_original_of_an_escaped_message_comes_back_exactly(store_core: ChronicleCore) -> None:
    core = store_core  # memory, file, PostgreSQL
    live = [
        {"role": "user", "content": "read the file"},
        {"role": "tool", "tool_call_id": "c1", "content": SURROGATE + " au lait"},
        {"role": "assistant", "content": "done"},
    ]
    core.capture.capture_messages("s", live)
    again = core.capture.capture_messages("s", [*live, {"role": "user", "content": "next"}])
    assert len(set(again)) == 4  # the escaped message aligned: nothing captured twice
    (escaped,) = [p for p in captured(core, "s") if p["original"]]
    assert escaped["message"]["content"] == "caf\\udce9 au lait"  # visible, valid UTF-8
    assert json.loads(escaped["original"]) == live[1]
    core.shutdown()


HOOKS = [
    "on_turn_start",
    "prefetch",
    "queue_prefetch",
    "on_memory_write",
    "on_delegation",
    "on_pre_compress",
    "sync_turn session",
    "tool query",
    "compress focus",
]


def call_hook(provider: Any, engine: Any, hook: str, value: Any, live: list[Any]) -> None:
    if hook == "on_turn_start":
        provider.on_turn_start(3, value)
    elif hook == "prefetch":
        assert isinstance(provider.prefetch(value), str)
    elif hook == "queue_prefetch":
        provider.queue_prefetch(value)
    elif hook == "on_memory_write":
        provider.on_memory_write("add", "memory", value, {"note": value})
    elif hook == "on_delegation":
        provider.on_delegation(value, value, child_session_id="child")
    elif hook == "on_pre_compress":
        assert isinstance(
            provider.on_pre_compress([*live, {"role": "user", "content": value}]), str
        )
    elif hook == "sync_turn session":
        odd = value if isinstance(value, str) else type(value).__name__
        provider.sync_turn("", "", session_id=f"odd {odd}", messages=live)
    elif hook == "tool query":
        result = provider.handle_tool_call("chronicle_search", {"query": value})
        json.loads(result)  # valid JSON whatever the query was
        result.encode("utf-8")
    else:
        out = engine.compress(list(live), current_tokens=60_000, force=True, focus_topic=value)
        assert isinstance(out, list) and out


@pytest.mark.parametrize("store", ["sqlite", "postgres"])  # a store of its own an example
@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(kind=st.sampled_from(sorted(BAD_VALUES)), hook=st.sampled_from(HOOKS))
def test_a_bad_argument_to_any_hook_never_stops_the_session(
    store: str,
    kind: str,
    hook: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: Any,
    request: pytest.FixtureRequest,
) -> None:
    with tempfile.TemporaryDirectory() as tmp, example_store(store, request) as conninfo:
        home = Path(tmp)
        write_config(home, conninfo)
        monkeypatch.setenv("HERMES_HOME", str(home))
        caplog.clear()
        caplog.set_level(logging.WARNING)
        provider = ChronicleMemoryProvider()
        provider.initialize("s1", hermes_home=str(home), platform="cli", user_id="alice")
        engine = import_module(load_plugin().__name__ + ".context").ChronicleContextEngine(
            hermes_home=str(home)
        )
        engine.update_model(model="m", context_length=64_000)
        engine.on_session_start("s1", hermes_home=str(home), platform="cli")
        try:
            live = conversation(3)
            provider.sync_turn("", "", session_id="s1", messages=live)
            call_hook(provider, engine, hook, bad_value(kind), live)
            live += conversation(5)[12:]
            provider.sync_turn("", "", session_id="s1", messages=live)
            core = core_of(home)
            stored = [p["message"] for p in captured(core, "s1")]
            assert stored[-4:] == live[-4:]  # the session goes on being captured
            problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert not problems, (kind, hook, problems)
            TRIED["examples"] += 1
            TRIED["hook calls"] += 3
        finally:
            provider.shutdown()
            for core in ChronicleCore.open_cores():
                if tmp in core.db_path:
                    core.shutdown()


def test_report_bad_input_figures() -> None:
    """The figures of the property test above (run after it, in file order)."""
    report(
        "bad input",
        kinds=len(BAD_VALUES),
        places=len(PLACES),
        examples=TRIED["examples"],
        hook_calls=TRIED["hook calls"],
        hooks=len(HOOKS),
        sessions_stopped=0,
    )
    assert TRIED["examples"] > 0
