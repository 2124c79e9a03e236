"""Bad arguments to every tool of both slots: an answer in the tool's own words, never a crash.

Each example opens a fresh store, drives both slots through a short conversation, then calls one
tool (any of the memory slot's or the context engine's) with one argument replaced by a bad
value (the kinds of test_faults_bad_input: lone surrogates, control characters, a cycle, deep
nesting, a foreign object, NaN, a 400-digit integer, a surrogate key) or with an unknown extra
argument. The laws: the result is valid UTF-8 JSON; an error names no Python internals (no
traceback, no exception class); nothing is logged as a warning; the session goes on being
captured.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from faults_support import both_slots, core_of, example_store, examples, report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_faults_bad_input import BAD_VALUES, bad_value, captured, conversation

from chronicle_engine.compaction.tools import CONTEXT_TOOLS
from chronicle_engine.core import ChronicleCore
from chronicle_engine.recall.tools import RECALL_TOOLS

SLOTS = {spec.name: "engine" for spec in CONTEXT_TOOLS} | {
    spec.name: "provider" for spec in RECALL_TOOLS
}
ARGUMENTS = {
    spec.name: sorted(spec.arguments.model_fields) for spec in (*CONTEXT_TOOLS, *RECALL_TOOLS)
}
INTERNALS = re.compile(r"Traceback|\b[A-Z][A-Za-z]*(Error|Exception)\b|File \"")
TRIED: dict[str, int] = {"examples": 0, "errors": 0}
CONFIG: dict[str, Any] = {
    "compression": {"threshold": 0.6, "protect_first_n": 1, "protect_last_n": 4},
    "chronicle": {"busy_timeout_ms": 200},
}


@pytest.mark.parametrize("store", ["sqlite", "postgres"])  # a store of its own an example
@settings(
    max_examples=examples(24),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(sorted(BAD_VALUES)),
    tool=st.sampled_from(sorted(SLOTS)),
    data=st.data(),
)
def test_a_bad_argument_to_any_tool_gets_an_answer_in_the_tools_own_words(
    store: str,
    kind: str,
    tool: str,
    data: st.DataObject,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    where = data.draw(st.sampled_from([*ARGUMENTS[tool], "(an unknown argument)"]))
    with tempfile.TemporaryDirectory() as tmp, example_store(store, request) as conninfo:
        caplog.clear()
        caplog.set_level(logging.WARNING)
        config = (
            CONFIG
            if conninfo is None
            else {**CONFIG, "chronicle": {**CONFIG["chronicle"], "store": conninfo}}
        )
        provider, engine = both_slots(Path(tmp), config, monkeypatch, user_id="alice")
        try:
            live = conversation(3)
            provider.sync_turn("", "", session_id="s1", messages=live)
            args: dict[Any, Any] = {"unexpected": bad_value(kind)}
            if where != "(an unknown argument)":
                args = {where: bad_value(kind)}
            slot = provider if SLOTS[tool] == "provider" else engine
            if slot is engine:
                result = engine.handle_tool_call(tool, args, messages=live)
            else:
                result = provider.handle_tool_call(tool, args)
            assert isinstance(result, str)
            result.encode("utf-8")  # valid UTF-8, whatever came in
            answer = json.loads(result)
            if isinstance(answer, dict) and "error" in answer:
                TRIED["errors"] += 1
                assert not INTERNALS.search(str(answer["error"])), (tool, where, answer)
            live += conversation(5)[12:]
            provider.sync_turn("", "", session_id="s1", messages=live)
            core = core_of(Path(tmp))
            stored = [p["message"] for p in captured(core, "s1")]
            assert stored[-4:] == live[-4:]  # the session goes on being captured
            problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert not problems, (kind, tool, where, problems)
            TRIED["examples"] += 1
        finally:
            provider.shutdown()
            for core in ChronicleCore.open_cores():
                if tmp in core.db_path:
                    core.shutdown()


def test_report_tool_figures() -> None:
    """The figures of the property test above (run after it, in file order)."""
    report(
        "bad tool arguments",
        tools=len(SLOTS),
        kinds=len(BAD_VALUES),
        examples=TRIED["examples"],
        refused_in_own_words=TRIED["errors"],
        crashes=0,
    )
    assert TRIED["examples"] > 0
