"""Laws of the pure planner and assembler, over random conversations (hypothesis).

Conversations mix requests, standing instructions, host scaffolding, replies, tool calls with
their results (some missing, some orphaned), pins, an earlier handoff and an already-folded
prefix. Whatever the mix, the compacted list satisfies the host's contract and loses nothing
that is not already folded.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronicle_engine.compaction.assemble import assemble
from chronicle_engine.compaction.contract import violations
from chronicle_engine.compaction.engine import message_facts
from chronicle_engine.compaction.handoff import HEADER
from chronicle_engine.compaction.planner import STUB_TOKENS, MessageFacts, plan, units_of
from chronicle_engine.messages import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    chars_for_tokens,
    content_text,
    estimate_list_tokens,
    estimate_tokens,
    is_real_user,
)

_block = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 3000)),
    st.tuples(st.just("instruction"), st.integers(1, 400)),
    st.tuples(st.just("scaffold"), st.integers(1, 300)),
    st.tuples(st.just("assistant"), st.integers(1, 3000)),
    st.tuples(
        st.just("tools"),
        st.integers(1, 3),
        st.integers(1, 4000),
        st.sampled_from(["ok", "ok", "ok", "missing", "orphan"]),
    ),
    st.tuples(st.just("system"), st.integers(1, 200)),
)


def build(blocks: list[tuple[Any, ...]], handoff_at: int | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n, block in enumerate(blocks):
        if handoff_at is not None and n == handoff_at:
            out.append({"role": "user", "content": HEADER + "\n\n## 1-4 · seq 1–4\nUser: earlier"})
        kind = block[0]
        pad = "x" * block[1]
        if kind == "user":
            out.append(
                {
                    "role": "user",
                    "content": f"request {n} {pad}",
                    "api_content": f"request {n} {pad} +memory",
                }
            )
        elif kind == "instruction":
            out.append({"role": "user", "content": f"from now on never touch prod-{n} {pad}"})
        elif kind == "scaffold":
            out.append(
                {
                    "role": "user",
                    "content": f"[System: note {n}] {pad}",
                    "_todo_snapshot_synthetic": True,
                }
            )
        elif kind == "assistant":
            out.append({"role": "assistant", "content": f"reply {n} {pad}", "_db_persisted": True})
        elif kind == "system":
            out.append({"role": "system", "content": f"system {n} {pad}"})
        else:
            _, calls, size, shape = block
            ids = [f"c{n}_{k}" for k in range(calls)]
            if shape != "orphan":
                out.append(
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": i,
                                "type": "function",
                                "function": {"name": "terminal", "arguments": '{"command": "ls"}'},
                            }
                            for i in ids
                        ],
                    }
                )
            answered = ids[:-1] if shape == "missing" else ids
            for i in answered:
                out.append({"role": "tool", "tool_call_id": i, "content": f"out {i} " + "y" * size})
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    blocks = draw(st.lists(_block, min_size=1, max_size=40))
    handoff_at = draw(st.one_of(st.none(), st.integers(0, len(blocks))))
    messages = build(blocks, handoff_at)
    seqs: list[int | None] = []
    next_seq = 1
    for m in messages:
        if m.get("role") == "system" or content_text(m).startswith(HEADER[:20]):
            seqs.append(None)
        else:
            seqs.append(next_seq)
            next_seq += 1
    through = draw(st.integers(0, next_seq)) if handoff_at is not None else 0
    pin_count = draw(st.integers(0, 3))
    pins = [
        (a, a + draw(st.integers(0, 3)))
        for a in draw(
            st.lists(st.integers(1, max(1, next_seq)), min_size=pin_count, max_size=pin_count)
        )
    ]
    return {
        "messages": messages,
        "seqs": seqs,
        "through": through,
        "pins": pins,
        "first": draw(st.integers(0, 4)),
        "last": draw(st.integers(0, 8)),
        "budget": draw(st.integers(50, 20_000)),
        "reserve": draw(st.integers(0, 2_000)),
        "force": draw(st.booleans()),
    }


def _plan(s: dict[str, Any]) -> tuple[list[MessageFacts], Any]:
    facts = message_facts(s["messages"], s["seqs"], through=s["through"], pins=s["pins"])
    p = plan(
        facts,
        protect_first_n=s["first"],
        protect_last_n=s["last"],
        budget=s["budget"],
        reserve=s["reserve"],
        force=s["force"],
    )
    return facts, p


_settings = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(scenarios())
def test_compacted_list_satisfies_the_host_contract(s: dict[str, Any]) -> None:
    facts, p = _plan(s)
    if not p.changed:
        return
    out, rewritten = assemble(s["messages"], p, {"role": "user", "content": HEADER}, s["seqs"])
    assert violations(s["messages"], out, rewritten) == []
    assert not any(isinstance(m, dict) and "_db_persisted" in m for m in out)
    for index in rewritten:
        assert "api_content" not in out[index]
        assert "chronicle_expand" in content_text(out[index]) or "not in the log" in content_text(
            out[index]
        )
    # A message with an allowance is cut to it (a call's arguments only to about it) and says so.
    source = [*p.head, None, *p.keep]
    for position, index in enumerate(source):
        if index is None or index not in p.allowances:
            continue
        assert position in rewritten
        original = s["messages"][index]
        assert estimate_tokens(out[position]) < estimate_tokens(original)
        if not original.get("tool_calls"):
            assert estimate_tokens(out[position]) <= p.allowances[index]


@_settings
@given(scenarios())
def test_nothing_leaves_the_context_unless_folded(s: dict[str, Any]) -> None:
    facts, p = _plan(s)
    n = len(facts)
    kept = set(p.head) | set(p.keep)
    assert not set(p.head) & set(p.keep)
    assert sorted(kept | set(p.drop)) == list(range(n))
    assert not kept & set(p.drop)
    assert set(p.fold) <= set(p.drop)
    for i in p.drop:
        assert facts[i].folded or facts[i].handoff or i in p.fold
    assert list(p.head) == sorted(p.head) and list(p.keep) == sorted(p.keep)
    assert not p.keep or not p.head or max(p.head) < min(p.keep)


@_settings
@given(scenarios())
def test_units_are_kept_whole_and_protected_ones_kept(s: dict[str, Any]) -> None:
    facts, p = _plan(s)
    kept = set(p.head) | set(p.keep)
    units = units_of(facts)
    head_end = max(p.head) + 1 if p.head else 0
    for unit in units:
        inside = [i in kept for i in unit.indices()]
        assert all(inside) or not any(inside)
        if not unit.well_formed:
            assert not any(inside)
        elif unit.start >= head_end and any(facts[i].protected for i in unit.indices()):
            assert all(inside)
        if unit.well_formed and unit.start >= p.cut:
            assert all(inside)
    real = [i for i, m in enumerate(s["messages"]) if is_real_user(m)]
    if real:
        assert real[-1] in kept
    formed_tail = [u for u in units if u.well_formed]
    if formed_tail and formed_tail[-1] is units[-1]:
        assert all(i in kept for i in units[-1].indices())


@_settings
@given(scenarios())
def test_budget_holds_unless_the_protected_part_is_shortened(s: dict[str, Any]) -> None:
    facts, p = _plan(s)
    kept_cost = sum(facts[i].tokens for i in (*p.head, *p.keep)) + s["reserve"]
    # The head is never shortened (it stays byte-identical), so it is paid for whole.
    head_cost = sum(facts[i].tokens for i in p.head)
    if not p.allowances:
        assert p.tokens_after == kept_cost
        # Over budget with nothing shortened only by the head and messages already at a
        # stub's size.
        stubs = sum(facts[i].tokens for i in p.keep if facts[i].tokens <= STUB_TOKENS)
        assert kept_cost <= max(s["budget"], s["reserve"]) + stubs + head_cost
    for i, allowance in p.allowances.items():
        assert STUB_TOKENS <= allowance < facts[i].tokens
        assert i in p.keep and i not in p.head
    if p.allowances:
        # Shortened, the kept part fits the budget unless even its stubs (and the head) do not.
        stubs = sum(min(facts[i].tokens, STUB_TOKENS) for i in p.keep)
        assert p.tokens_after <= max(s["budget"], s["reserve"] + stubs + head_cost)


@_settings
@given(scenarios())
def test_force_keeps_only_the_protected_tail(s: dict[str, Any]) -> None:
    s = dict(s, force=True, budget=10**9)
    facts, p = _plan(s)
    counted = 0
    units = [u for u in units_of(facts) if u.start >= (max(p.head) + 1 if p.head else 0)]
    floor = len(facts)
    for unit in reversed(units):
        if counted >= s["last"]:
            break
        floor = unit.start
        if unit.well_formed:
            counted += unit.end - unit.start
    assert p.cut >= floor


def test_newest_request_survives_a_long_tool_loop() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
    ]
    messages.append({"role": "user", "content": "migrate the billing tables"})
    for k in range(30):
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"t{k}",
                        "type": "function",
                        "function": {"name": "sql", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"t{k}", "content": "row " * 400})
    facts = message_facts(messages, list(range(1, len(messages) + 1)), through=0)
    p = plan(facts, protect_first_n=2, protect_last_n=4, budget=3000, reserve=500)
    assert 2 in p.keep  # the request, far behind the tail
    assert p.cut > 10
    out, _ = assemble(
        messages, p, {"role": "assistant", "content": HEADER}, list(range(1, len(messages) + 1))
    )
    assert [m["content"] for m in out[:3]] == ["first", "ok", HEADER]
    assert out[3]["content"] == "migrate the billing tables"


def test_overflowing_protected_part_is_shortened_newest_first_and_says_how_to_restore() -> None:
    big = "z" * 40_000
    messages = [
        {"role": "user", "content": "head " + big},
        {"role": "assistant", "content": "older " + big},
        {"role": "user", "content": "newest request " + big, "api_content": "stale"},
        {"role": "assistant", "content": "newest answer " + big},
    ]
    seqs = [1, 2, 3, 4]
    facts = message_facts(messages, seqs, through=0)
    p = plan(facts, protect_first_n=1, protect_last_n=4, budget=22_000, reserve=1_000)
    assert 3 not in p.allowances  # the newest turn wins
    assert 2 in p.allowances
    assert 0 not in p.allowances and p.head == (0,)  # the head stays byte-identical
    out, rewritten = assemble(messages, p, {"role": "assistant", "content": HEADER}, seqs)
    assert out[-1]["content"] == messages[3]["content"]
    # Every message with an allowance was cut to about it, and says how to restore it.
    source = [*p.head, None, *p.keep]  # output position -> input index (None: the handoff)
    assert sorted(source[i] for i in rewritten) == sorted(p.allowances) == [1, 2]
    assert out[0] == messages[0]
    for position in rewritten:
        index = source[position]
        assert index is not None
        m = out[position]
        assert m["content"].startswith(messages[index]["content"][:100])
        assert f"chronicle_expand(from_seq={seqs[index]}, to_seq={seqs[index]})" in m["content"]
        assert "api_content" not in m
        assert estimate_tokens(m) < estimate_tokens(messages[index])
        assert estimate_tokens(m) <= p.allowances[index] + STUB_TOKENS
    assert estimate_list_tokens(out) < estimate_list_tokens(messages)
    assert violations(messages, out, rewritten) == []


@st.composite
def turn_conversations(draw: st.DrawFn) -> dict[str, Any]:
    """Well-formed chats: a request (sometimes a standing instruction), a few tool steps, an
    answer. Pins land anywhere."""
    messages: list[dict[str, Any]] = []
    for t in range(draw(st.integers(1, 25))):
        if draw(st.integers(0, 5)) == 0:
            messages.append({"role": "user", "content": f"always keep rule {t} in mind"})
        else:
            messages.append(
                {"role": "user", "content": f"request {t} " + "x" * draw(st.integers(1, 2000))}
            )
        for k in range(draw(st.integers(0, 3))):
            call = f"t{t}_{k}"
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": "sh", "arguments": "{}"},
                        }
                    ],
                }
            )
            messages.append(
                {"role": "tool", "tool_call_id": call, "content": "y" * draw(st.integers(1, 3000))}
            )
        if draw(st.booleans()) or t == 0:
            messages.append(
                {"role": "assistant", "content": f"answer {t} " + "z" * draw(st.integers(1, 2000))}
            )
    seqs: list[int | None] = list(range(1, len(messages) + 1))
    pins = [(p, p) for p in draw(st.lists(st.integers(1, len(messages)), max_size=3))]
    return {
        "messages": messages,
        "seqs": seqs,
        "through": 0,
        "pins": pins,
        "first": draw(st.integers(0, 4)),
        "last": draw(st.integers(0, 8)),
        "budget": draw(st.integers(500, 20_000)),
        "reserve": draw(st.integers(0, 1_000)),
        "force": draw(st.booleans()),
    }


@_settings
@given(turn_conversations())
def test_no_two_turns_of_the_same_role_meet_where_folded_ones_were(s: dict[str, Any]) -> None:
    facts, p = _plan(s)
    if not p.changed:
        return
    out, _ = assemble(s["messages"], p, {"role": p.handoff_role, "content": HEADER}, s["seqs"])
    roles = [m["role"] for m in out]
    handoff_at = len(p.head)
    units = units_of(facts)
    head_end = max(p.head) + 1 if p.head else 0
    body = [u for u in units if u.start >= head_end]
    # The handoff never meets its own role unless the original offers nothing to put between.
    assert (
        handoff_at == 0
        or roles[handoff_at - 1] not in (roles[handoff_at],)
        or roles[handoff_at - 1] == "tool"
    )
    if handoff_at == 0:
        assert roles[0] == "user"
    if handoff_at + 1 < len(roles) and roles[handoff_at + 1] == roles[handoff_at]:
        first = p.keep[0]
        before = [u for u in body if u.end <= first and u.well_formed]
        if p.handoff_role == "user":  # wanted an assistant unit right before the first kept one
            assert (
                not before
                or before[-1].end != first
                or s["messages"][before[-1].start]["role"] != "assistant"
            )
        else:  # wanted a user message somewhere before it
            assert not any(s["messages"][u.start]["role"] == "user" for u in before)
    # Kept units that were not neighbours: two requests meet only if the first had no reply.
    kept = list(p.keep)
    for a, b in zip(kept, kept[1:], strict=False):
        if b == a + 1:
            continue
        ra, rb = s["messages"][a]["role"], s["messages"][b]["role"]
        if ra == rb == "user":
            assert s["messages"][a + 1]["role"] != "assistant" or a + 1 in p.head


@given(st.integers(min_value=0, max_value=50_000))
def test_one_rule_turns_tokens_into_characters_and_back(tokens: int) -> None:
    text = "x" * chars_for_tokens(tokens)
    assert estimate_tokens({"role": "user", "content": text}) == tokens + MESSAGE_OVERHEAD
    assert chars_for_tokens(tokens) == tokens * CHARS_PER_TOKEN
