"""Compaction at the limits: the host's overhead is honoured, and a stall is reported once and
never re-fired every turn (the anti-thrash guard)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib import import_module
from typing import Any

import pytest
from test_compaction_engine import turn
from test_compaction_support import core_for, load_plugin

from chronicle_engine.compaction.handoff import cited
from chronicle_engine.compaction.instructions import (
    INSTRUCTIONS_HEADING,
    Carried,
    render_instructions,
)
from chronicle_engine.compaction.limits import (
    ThrashGuard,
    bound_pins,
    host_overhead,
    message_budget,
)
from chronicle_engine.compaction.planner import MessageFacts
from chronicle_engine.compaction.policy import policy_from_config
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.messages import (
    content_text,
    estimate_list_tokens,
    estimate_tokens,
    is_own_handoff,
)

HERMES_DEFAULTS = {
    "threshold": 0.5,
    "target_ratio": 0.2,
    "protect_first_n": 3,
    "protect_last_n": 20,
}


@pytest.fixture(params=["memory", "postgres"])
def core(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[ChronicleCore]:
    if request.param == "postgres":
        from postgres_support import postgres_core

        cluster = request.getfixturevalue("postgres_cluster")
        with postgres_core(cluster, tmp_path / "store_core_home", HERMES_DEFAULTS) as c:
            yield c
        return
    c = core_for(":memory:", Config(compression=HERMES_DEFAULTS))
    yield c
    c.shutdown()


@pytest.fixture
def engine(core: ChronicleCore) -> Any:
    module = import_module(load_plugin().__name__ + ".context")
    e = module.ChronicleContextEngine(core=core)
    e.update_model(model="m", context_length=64_000)
    e.on_session_start("s1", platform="cli")
    return e


def chat(turns: int) -> list[dict[str, Any]]:
    return [m for n in range(turns) for m in turn(n)]


def test_the_overhead_is_the_hosts_count_less_the_messages() -> None:
    assert host_overhead(None, 10_000, 64_000) == 0
    assert host_overhead(60_000, 16_000, 64_000) == 44_000
    assert host_overhead(90_000, 16_000, 64_000) == 48_000  # no prompt is larger than the window
    assert host_overhead(5_000, 16_000, 64_000) == 0
    assert message_budget(19_200, 48_000, 10_000) == 9_200
    assert message_budget(19_200, 48_000, 40_000) == 4_000  # half the room under the threshold
    assert message_budget(19_200, 48_000, 50_000) == 0  # the protected tail alone


@pytest.mark.parametrize("current", [60_000, 63_000])
def test_a_64k_window_with_heavy_overhead_still_compacts(engine: Any, current: int) -> None:
    """~16k tokens of messages, the host counting 60k or 63k: the pass must fold (the engine
    used to cap the overhead it believed at half its low mark and return the list unchanged)."""
    messages = chat(30)
    before = estimate_list_tokens(messages)
    assert 14_000 < before < 18_000
    out = engine.compress(messages, current_tokens=current)
    assert out != messages and any(is_own_handoff(m) for m in out)
    after = estimate_list_tokens(out)
    overhead = current - before
    # Tail-only: the low mark is out of reach, so the messages shrink to the protected tail.
    assert after < 2_500
    assert engine._real_tokens == overhead + after
    assert out[-4]["content"] == messages[-4]["content"]  # the newest request stays


def test_a_pass_ends_at_the_low_mark_counting_the_overhead(core: ChronicleCore) -> None:
    policy = policy_from_config(
        Config(compression={**HERMES_DEFAULTS, "protect_last_n": 6}), 16_000
    )
    messages = chat(16)
    before = estimate_list_tokens(messages)
    for overhead in (0, 1_500, 3_000):
        outcome = core.compaction.compress(
            f"s{overhead}", messages, policy=policy, current_tokens=before + overhead
        )
        assert outcome.messages is not None
        assert outcome.tokens_after + overhead <= policy.low_tokens + 50, overhead


def test_a_stall_is_reported_once_and_not_refired_every_turn(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    messages = chat(30)
    caplog.set_level(logging.WARNING, logger="chronicle.context")
    out = engine.compress(messages, current_tokens=63_000)
    assert out != messages  # progress: folded down to the tail ...
    assert engine._real_tokens >= engine.threshold_tokens  # ... yet still over the threshold
    due, why = engine.should_compress_info(engine._real_tokens)
    assert not due and why and "over the threshold" in why
    assert not engine.should_compress(engine._real_tokens)
    # The next turns add little: the guard holds, and the warning is not repeated.
    stalled = engine._real_tokens
    for k in range(5):
        engine.update_from_response({"prompt_tokens": stalled + 100 * k, "completion_tokens": 5})
        assert not engine.should_compress(0)
    again = engine.compress(out, current_tokens=stalled + 400)
    assert again is not None
    warnings = [r for r in caplog.records if "still over the threshold" in r.getMessage()]
    assert len(warnings) == 1
    # New content re-opens it: a step of growth after enough model calls.
    engine.update_from_response({"prompt_tokens": stalled + 20_000, "completion_tokens": 5})
    assert engine.should_compress(0)


def test_the_guard_backs_off_by_calls_and_waits_for_growth() -> None:
    guard = ThrashGuard()
    high, window = 48_000, 64_000
    assert guard.hold(call=0, tokens=50_000, high=high, window=window) is None  # no pass yet
    warning = guard.passed(call=1, after=49_000, high=high)
    assert warning and "still over the threshold" in warning
    assert guard.backoff == 2
    # Growth without the calls, the calls without growth: both held.
    assert guard.hold(call=2, tokens=54_000, high=high, window=window)
    assert guard.hold(call=10, tokens=49_500, high=high, window=window)
    assert guard.hold(call=3, tokens=54_000, high=high, window=window) is None
    assert guard.passed(call=3, after=49_200, high=high) is None  # reported once per stall
    assert guard.backoff == 4  # the frequency dimension: each futile pass doubles the wait
    assert guard.hold(call=6, tokens=54_000, high=high, window=window)
    assert guard.hold(call=7, tokens=54_000, high=high, window=window) is None
    # Near the window growth alone re-opens it.
    assert guard.hold(call=4, tokens=61_000, high=high, window=window) is None
    # A pass that made room clears the stall; a fresh stall warns again.
    assert guard.passed(call=8, after=30_000, high=high) is None
    assert not guard.stalled and guard.backoff == 0
    assert guard.hold(call=9, tokens=49_000, high=high, window=window)  # floor_calls between passes
    assert guard.hold(call=10, tokens=49_000, high=high, window=window) is None
    assert guard.passed(call=10, after=49_000, high=high)


def test_a_pass_that_cannot_fold_is_reported_once(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chronicle.context")
    messages = chat(1)[:3]  # nothing to fold: the head holds it all
    for _ in range(3):
        assert engine.compress(messages, current_tokens=60_000) == messages
    due, why = engine.should_compress_info(60_000)
    assert not due and why and "could not fold" in why
    assert len([r for r in caplog.records if "could not fold" in r.getMessage()]) == 1


def test_a_compression_rotation_keeps_the_guard_and_a_new_conversation_resets_it(
    engine: Any,
) -> None:
    engine.compress(chat(30), current_tokens=63_000)
    assert engine._thrash.stalled
    engine.on_session_start("s2", old_session_id="s1", boundary_reason="compression")
    assert engine._thrash.stalled
    engine.on_session_start("s3")
    assert not engine._thrash.stalled


# -- what is kept whatever its age has a budget --------------------------------------------------


def test_standing_instructions_stay_within_their_budget_newest_verbatim() -> None:
    items = [
        (10 * k + 1, f"From now on always run linter rule R{k} before committing.")
        for k in range(400)
    ]
    text, carried = render_instructions(items, 1_200)
    assert estimate_tokens({"role": "user", "content": text}) <= 1_200
    lines = text.splitlines()
    assert lines[0] == INSTRUCTIONS_HEADING
    assert lines[-1] == f"- [seq {items[-1][0]}] {items[-1][1]}"  # the newest, verbatim
    assert carried.older > 0 and f"{carried.older} older instruction(s)" in text
    assert carried.older + len(carried.shown) == len(items)
    assert carried.older_from == 1 and carried.older_to < min(carried.shown)
    # The next pass carries on from the record, and never grows past the budget.
    again, later = render_instructions(
        [*((s, t) for s, t in items if s in carried.shown), (9_001, "Never deploy on Fridays.")],
        1_200,
        Carried.from_record((), carried.as_record()),
    )
    assert estimate_tokens({"role": "user", "content": again}) <= 1_200
    assert again.splitlines()[-1] == "- [seq 9001] Never deploy on Fridays."
    assert later.older >= carried.older
    assert later.older + len(later.shown) == len(items) + 1  # every one shown or counted
    assert cited(again) == []  # never read as a section block
    # A repeated instruction is shown once, at its newest seq.
    same, kept = render_instructions(
        [(5, "Always answer in French."), (9, "always answer in  French.")], 500
    )
    assert kept.shown == (9,) and same.count("French") == 1


def test_pins_keep_messages_only_within_their_budget() -> None:
    facts = [MessageFacts(tokens=100, role="user", protected=True, pinned=True) for _ in range(10)]
    bounded = bound_pins(facts, 350)
    assert [f.protected for f in bounded] == [False] * 7 + [True] * 3  # newest first
    held = MessageFacts(tokens=100, role="user", protected=True)  # not a pin: untouched
    assert bound_pins([held], 0) == [held]


def test_instruction_turns_keep_the_request_not_the_tool_traffic(core: ChronicleCore) -> None:
    """Every 7th request a standing instruction, 20 passes: the kept part stays bounded and each
    instruction stays in view (verbatim or condensed), citing its seq."""
    policy = policy_from_config(core.config, 64_000)
    messages: list[dict[str, Any]] = []
    session, passes, n = "i0", 0, 0
    said: list[str] = []
    while passes < 20 and n < 3_000:
        instruction = None
        if n % 7 == 6:
            instruction = f"From now on always run linter rule R{n} before you commit."
            said.append(instruction)
        messages.extend(turn(n, instruction=instruction))
        n += 1
        core.capture.capture_messages(session, messages)
        if estimate_list_tokens(messages) >= policy.high_tokens:
            outcome = core.compaction.compress(session, messages, policy=policy)
            assert outcome.messages is not None
            messages = outcome.messages
            passes += 1
            core.sessions.switch(f"i{passes}", parent_session_id=session, reason="compression")
            session = f"i{passes}"
            assert outcome.tokens_after <= policy.low_tokens + policy.standing_tokens // 4
    assert passes == 20
    handoff = content_text(next(m for m in messages if is_own_handoff(m)))
    assert said[-1] in handoff or any(said[-1] == content_text(m) for m in messages)
    standing = handoff[handoff.index(INSTRUCTIONS_HEADING) :]
    assert estimate_tokens({"role": "user", "content": standing}) <= policy.standing_tokens


def test_the_head_is_byte_identical_after_a_pass(core: ChronicleCore) -> None:
    policy = policy_from_config(core.config, 16_000)
    messages = chat(30)
    outcome = core.compaction.compress("h1", messages, policy=policy, current_tokens=15_000)
    assert outcome.messages is not None
    assert outcome.messages[:3] == messages[:3]  # protect_first_n = 3: user, call, its result
