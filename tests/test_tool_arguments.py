"""Tool arguments are models: the schema Hermes sees is generated from them, every call is
validated before it runs, errors are in the tools' own words and results are always UTF-8 JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_recall_support import core_on, say

from chronicle_engine.compaction.tools import CONTEXT_TOOLS
from chronicle_engine.core import ChronicleCore
from chronicle_engine.recall.tools import RECALL_TOOLS
from chronicle_engine.tools import ToolSpec, _scrub, dispatch, parameters_schema

TOOLS: tuple[ToolSpec[Any], ...] = (*RECALL_TOOLS, *CONTEXT_TOOLS)
CONTEXT = {"session_id": "s1", "user_id": "u", "messages": []}
# What a Python internal looks like when it leaks into a tool's answer.
INTERNALS = ("Error:", "Traceback", "Python int", "dictionary update", "object has no attribute")


@pytest.fixture(params=["memory", "postgres"])
def core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChronicleCore]:
    """A core on each store holding one message of user u."""
    with core_on(request.param, request, tmp_path) as c:
        say(c, "s1", "The spare key is under the blue flowerpot.", user_id="u")
        yield c


def call(core: ChronicleCore, name: str, args: Any) -> dict[str, Any]:
    if name in {t.name for t in RECALL_TOOLS}:
        text = dispatch(RECALL_TOOLS, core.recall, name, args, **CONTEXT)
    else:
        text = dispatch(CONTEXT_TOOLS, core.compaction, name, args, **CONTEXT)
    text.encode("utf-8")  # raises if the answer is not valid UTF-8
    answer = json.loads(text)
    assert isinstance(answer, dict)
    return answer


def test_the_schemas_hermes_sees_keep_their_names_and_required_arguments() -> None:
    seen = {
        t.name: (sorted(t.parameters["properties"]), t.parameters.get("required", []))
        for t in TOOLS
    }
    assert seen == {
        "chronicle_search": (["by_session", "limit", "query", "scope", "session"], ["query"]),
        "chronicle_answer": (["question"], ["question"]),
        "chronicle_remember": (["text"], ["text"]),
        "chronicle_correct": (["id", "text"], ["id", "text"]),
        "chronicle_forget": (["id", "include_source", "reason"], ["id"]),
        "chronicle_expand": (
            [
                "continue_from",
                "from_seq",
                "max_tokens",
                "page",
                "page_size",
                "section_id",
                "to_seq",
            ],
            [],
        ),
        "chronicle_pin_context": (["from_seq", "note", "text", "to_seq", "unpin"], []),
        "chronicle_edit_context": (["hide", "replacement", "seq", "text"], []),
        "chronicle_focus": (["topic"], ["topic"]),
        "chronicle_context_status": ([], []),
    }


def test_each_schema_is_generated_from_its_arguments_model() -> None:
    for tool in TOOLS:
        schema = tool.schema()
        assert set(schema) == {"name", "description", "parameters"}
        assert schema["parameters"] == parameters_schema(tool.arguments)
        assert schema["parameters"]["type"] == "object"
        text = json.dumps(schema)
        assert '"title"' not in text and '"anyOf"' not in text  # plain types for the model
    search = next(t for t in TOOLS if t.name == "chronicle_search").parameters["properties"]
    assert search["limit"] == {"type": "integer", "minimum": 1, "maximum": 100}
    assert search["scope"]["enum"] == ["all", "session", "messages", "beliefs", "sections"]


def test_a_ten_megabyte_argument_is_refused_fast_and_stores_nothing(core: ChronicleCore) -> None:
    huge = "x" * 10_000_000
    before = core.recall.search("flowerpot", user_id="u")
    for name, args in (
        ("chronicle_remember", {"text": huge}),
        ("chronicle_search", {"query": huge}),
        ("chronicle_focus", {"topic": huge}),
        ("chronicle_pin_context", {"text": huge}),
    ):
        started = time.perf_counter()
        answer = call(core, name, args)
        assert time.perf_counter() - started < 0.5, name
        assert "is too long" in answer["error"] and "characters at most" in answer["error"]
    assert core.recall.search("flowerpot", user_id="u") == before


@pytest.mark.parametrize(
    ("name", "args", "said"),
    [
        ("chronicle_expand", {"from_seq": 10**30}, "'from_seq' must be at most"),
        ("chronicle_expand", {"from_seq": -1, "to_seq": 3}, "'from_seq' must be at least 0"),
        ("chronicle_expand", {"from_seq": "9" * 5000}, "'from_seq'"),
        ("chronicle_expand", {"page_size": 10**6}, "'page_size' must be at most 200"),
        ("chronicle_pin_context", {"from_seq": True}, "'from_seq' must be a whole number"),
        ("chronicle_search", {"query": "key", "limit": "many"}, "'limit' must be a whole number"),
        ("chronicle_search", {"query": "key", "limit": 10**40}, "'limit' must be at most 100"),
        ("chronicle_search", {"query": "key", "scope": "everything"}, "'scope' must be one of"),
        ("chronicle_search", {}, "'query' is required"),
        ("chronicle_search", {"query": "   "}, "'query' must be non-empty text"),
        ("chronicle_search", {"query": ["a", "b"]}, "'query' must be text"),
        ("chronicle_forget", {"id": "m1", "include_source": "perhaps"}, "true or false"),
        ("chronicle_search", ["query", "key"], "must be a JSON object"),
        ("chronicle_search", "not json", "must be a JSON object"),
        ("chronicle_search", 42, "must be a JSON object"),
    ],
)
def test_bad_arguments_are_refused_in_the_tools_own_words(
    core: ChronicleCore, name: str, args: Any, said: str
) -> None:
    error = call(core, name, args)["error"]
    assert error.startswith(name + ":") and said in error
    assert not any(leak in error for leak in INTERNALS), error


def test_arguments_the_host_may_send_loosely_are_still_understood(core: ChronicleCore) -> None:
    found = call(core, "chronicle_search", {"query": "spare key", "limit": "3", "scope": None})
    assert found["count"] >= 1 and found["scope"] == "all"
    found = call(core, "chronicle_search", json.dumps({"query": "spare key"}))
    assert found["count"] >= 1
    expanded = call(core, "chronicle_expand", {"from_seq": "1", "to_seq": "", "page": None})
    assert "error" not in expanded or "from_seq" not in expanded["error"]


def test_a_query_with_a_lone_surrogate_is_answered_as_valid_utf8(core: ChronicleCore) -> None:
    found = call(core, "chronicle_search", {"query": "caf\udce9 flowerpot"})
    assert found["query"] == "caf\ufffd flowerpot" and found["count"] >= 1
    kept = call(core, "chronicle_remember", {"text": "Passwords live in the caf\udce9 safe."})
    assert "error" not in kept


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.one_of(
            st.characters(max_codepoint=0x7F),
            st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF, blacklist_categories=()),
            st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        ),
        max_size=40,
    )
)
def test_every_lone_surrogate_and_nothing_else_becomes_a_replacement_character(text) -> None:
    scrubbed = _scrub(text)
    assert scrubbed == "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    scrubbed.encode("utf-8")  # valid UTF-8 whatever came in


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tool=st.sampled_from([t for t in TOOLS if t.name != "chronicle_remember"]),
    data=st.data(),
)
def test_any_arguments_give_a_json_answer_and_never_a_python_internal(
    core: ChronicleCore, tool: ToolSpec[Any], data: st.DataObject
) -> None:
    names = [*tool.parameters["properties"], "unexpected"]
    args = data.draw(st.dictionaries(st.sampled_from(names), _values, max_size=4))
    answer = call(core, tool.name, args)
    if "error" in answer:
        assert not any(leak in answer["error"] for leak in INTERNALS), answer["error"]
