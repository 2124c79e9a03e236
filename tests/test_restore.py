"""One-call restore: `chronicle_expand` returns a whole section (or range) up to a token budget in
one call, and "the rest of this section" is one more call from the `continue_from` cursor it
gives; the older page arguments keep working."""

from __future__ import annotations

import json
from typing import Any

from test_compaction_engine import Host, core, small_policy, turn  # noqa: F401 - fixture
from test_context_engine import engine, home  # noqa: F401 - fixtures

from chronicle_engine.compaction.policy import RESTORE_MAX_TOKENS
from chronicle_engine.compaction.tools import CONTEXT_TOOLS
from chronicle_engine.core import ChronicleCore
from chronicle_engine.tools import dispatch


def _folded(store: ChronicleCore, size: int = 900) -> tuple[Host, str]:
    host = Host(store, small_policy())
    for n in range(60):
        host.add(*turn(n, size=size))
    outcome = host.compress()
    return host, outcome.written[0]


def test_a_section_within_the_budget_comes_back_whole_in_one_call(core: ChronicleCore) -> None:  # noqa: F811
    host, label = _folded(core, size=200)
    whole = host.expand_all(label)
    result = core.compaction.expand(host.session, section_id=label, max_tokens=RESTORE_MAX_TOKENS)
    assert [m["message"] for m in result["messages"]] == whole
    assert "next" not in result and "rest" not in result
    assert result["total"] == len(whole) and result["tokens"] <= result["budget_tokens"]
    assert len(json.dumps(result, ensure_ascii=False)) < 100_000  # Hermes passes it on whole


def test_the_rest_of_a_section_is_one_more_call_from_the_cursor(core: ChronicleCore) -> None:  # noqa: F811
    host, label = _folded(core, size=200)
    whole = host.expand_all(label)
    first = core.compaction.expand(host.session, section_id=label, max_tokens=2_000)
    assert first["tokens"] <= 2_000 and first["rest"]["messages"] == len(whole) - len(
        first["messages"]
    )
    rest_tokens = first["rest"]["tokens"]
    second = core.compaction.expand(
        host.session,
        section_id=label,
        max_tokens=rest_tokens,
        continue_from=first["next"]["continue_from"],
    )
    assert "next" not in second  # the rest, as announced, in one call
    restored = [m["message"] for m in first["messages"] + second["messages"]]
    assert restored == whole


def test_a_message_larger_than_the_budget_still_comes_back_alone(core: ChronicleCore) -> None:  # noqa: F811
    host, label = _folded(core, size=9000)
    result = core.compaction.expand(host.session, section_id=label, max_tokens=100)
    assert len(result["messages"]) == 1 and "next" in result


def test_the_agents_tool_budgets_from_the_policy_and_keeps_page_arguments(engine: Any) -> None:  # noqa: F811
    messages = [m for n in range(40) for m in turn(n)]
    out = engine.compress(messages)
    label = json.loads(engine.handle_tool_call("chronicle_context_status", {}, messages=out))[
        "handoff"
    ]["sections"][0]["section_id"]
    policy = engine.policy
    result = json.loads(
        engine.handle_tool_call("chronicle_expand", {"section_id": label}, messages=out)
    )
    assert result["budget_tokens"] == max(1_000, (policy.high_tokens - policy.low_tokens) // 2)
    paged = json.loads(
        engine.handle_tool_call(
            "chronicle_expand", {"section_id": label, "page": 1, "page_size": 5}, messages=out
        )
    )
    assert paged["page"] == 1 and len(paged["messages"]) == 5 and paged["next"] == {"page": 2}
    refused = json.loads(
        dispatch(
            CONTEXT_TOOLS,
            engine.core.compaction,
            "chronicle_expand",
            {"section_id": label, "max_tokens": RESTORE_MAX_TOKENS + 1},
            session_id="a1",
        )
    )
    assert "'max_tokens' must be at most" in refused["error"]
