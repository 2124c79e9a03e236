"""The compaction engine against a real store (in memory and a WAL file).

A scripted host plays Hermes: it grows the live list, calls compress() when the engine's policy
says so, takes the returned list, and moves the conversation to a new session id after each
compaction (as Hermes' rotation does). Every check reads back through the public surface:
expand, status, the chronicle.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_compaction_support import conversation, core_for, wire

from chronicle_engine.capture import shortened
from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.chronicle.writers import ExtractiveWriter, ModelWriter
from chronicle_engine.compaction.handoff import HEADER, cited
from chronicle_engine.compaction.policy import Policy, policy_from_config
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.bookkeeping import BOOKKEEPING_NAMESPACE
from chronicle_engine.messages import content_text, estimate_list_tokens, is_own_handoff


@pytest.fixture
def core(store_core: ChronicleCore) -> ChronicleCore:
    return store_core  # SQLite in memory, in a file, and PostgreSQL (conftest.py)


def small_policy(**overrides: Any) -> Policy:
    config = Config(
        {"context": overrides.pop("context", {})},
        compression={
            "threshold": 0.5,
            "target_ratio": 0.2,
            "protect_first_n": 2,
            "protect_last_n": 6,
        },
    )
    # A small window keeps the tests quick; the arithmetic is the same at any size.
    return policy_from_config(config, overrides.pop("window", 16_000))


class Host:
    """Plays Hermes around one conversation: grow, compress when due, rotate the session."""

    def __init__(self, core: ChronicleCore, policy: Policy, session: str = "s0") -> None:
        self.core = core
        self.policy = policy
        self.session = session
        self.messages: list[dict[str, Any]] = []
        self.outcomes: list[Any] = []
        self.handoffs: list[str] = []
        self.everything: list[dict[str, Any]] = []  # every message ever added, in order
        self.rotations = 0
        self.tokens = 0

    def add(self, *messages: dict[str, Any]) -> None:
        self.messages.extend(messages)
        self.everything.extend(messages)
        self.tokens += estimate_list_tokens(list(messages))
        # What sync_turn records: the whole live list, every turn (capture is idempotent).
        self.core.capture.capture_messages(self.session, self.messages)

    def due(self) -> bool:
        return self.tokens >= self.policy.high_tokens

    def compress(self, **kwargs: Any) -> Any:
        outcome = self.core.compaction.compress(
            self.session, self.messages, policy=self.policy, **kwargs
        )
        self.outcomes.append(outcome)
        if outcome.messages is not None:
            self.messages = outcome.messages
            self.tokens = estimate_list_tokens(self.messages)
            handoff = next(m for m in self.messages if is_own_handoff(m))
            self.handoffs.append(content_text(handoff))
            self.rotations += 1
            new = f"s{self.rotations}"
            self.core.sessions.switch(new, parent_session_id=self.session, reason="compression")
            self.session = new
        return outcome

    def expand_all(self, label: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            result = self.core.compaction.expand(
                self.session, section_id=label, page=page, page_size=50
            )
            out.extend(item["message"] for item in result["messages"])
            if "next" not in result:
                return out
            page = result["next"]["page"]


def turn(n: int, *, size: int = 900, instruction: str | None = None) -> list[dict[str, Any]]:
    user = instruction or f"request {n}: look into ticket OPS-{n} for host db-{n % 5}"
    pad = "detail " * (size // 7)
    return [
        {"role": "user", "content": user},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {
                        "name": "terminal",
                        "arguments": json.dumps({"command": f"cat /var/log/app-{n}.log"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"call_{n}",
            "content": f"exit 0\nline {n}: value {7000 + n}\n{pad}",
        },
        {"role": "assistant", "content": f"Decided: ticket OPS-{n} is handled. {pad}"},
    ]


def test_expanding_the_cited_sections_returns_exactly_the_folded_messages(
    core: ChronicleCore,
) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    before = list(host.messages)
    outcome = host.compress()
    assert outcome.messages is not None and outcome.written
    handoff = host.handoffs[-1]
    citations = cited(handoff)
    assert [f"{lo}-{hi}" for _, _, lo, hi in citations] == outcome.view
    kept = [m for m in outcome.messages if not is_own_handoff(m)]
    seqs = core.capture.capture_messages(host.session, before)
    for _level, section_id, lo, hi in citations:
        folded = [
            wire(m) for m, s in zip(before, seqs, strict=True) if s is not None and lo <= s <= hi
        ]
        assert host.expand_all(section_id) == folded
        assert json.dumps(host.expand_all(section_id)) == json.dumps(folded)  # byte for byte
    # Everything that left the context sits inside a cited range.
    gone = [
        (m, s) for m, s in zip(before, seqs, strict=True) if wire(m) not in [wire(k) for k in kept]
    ]
    assert gone and all(any(lo <= s <= hi for _, _, lo, hi in citations) for _, s in gone)
    assert estimate_list_tokens(outcome.messages) <= host.policy.low_tokens


def test_twenty_compactions_keep_every_standing_instruction(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    instructions = {
        3: "Never push to the main branch without asking me first.",
        17: "From now on always answer in British English.",
        41: "Don't delete anything under /srv/backups, ever.",
        88: "You must run the test suite before every commit.",
    }
    n = 0
    while len(host.handoffs) < 20:
        host.add(*turn(n, instruction=instructions.get(n)))
        n += 1
        if host.due():
            assert host.compress().messages is not None
        assert n < 2000
    # Each stays in view verbatim: in the handoff's standing instructions once its turn is
    # folded (the request itself, not its tool traffic), citing its seq.
    handoff = content_text(next(m for m in host.messages if is_own_handoff(m)))
    for text in instructions.values():
        assert any(f"] {text}" in line for line in handoff.splitlines())
    assert not any('"call_3"' in json.dumps(m) for m in host.messages)
    # ... and verbatim messages are still whole, and the lineage reaches every pass.
    assert core.compaction.status(host.session)["passes"] == 20


@pytest.mark.parametrize("store_core", ["file", "postgres"], indirect=True)
def test_a_hundred_compactions_stay_bounded_and_reach_every_original(
    store_core: ChronicleCore,
) -> None:
    core = store_core
    policy = small_policy()
    host = Host(core, policy)
    n = 0
    rebases = 0
    extended = 0
    while len(host.handoffs) < 100:
        host.add(*turn(n, size=300))
        n += 1
        if host.due():
            previous = host.handoffs[-1] if host.handoffs else None
            outcome = host.compress()
            assert outcome.messages is not None
            current = host.handoffs[-1]
            assert len(current) // 4 <= policy.handoff_tokens
            if outcome.rebased:
                rebases += 1
            elif previous is not None:
                assert current.startswith(previous)  # the bytes already sent stay put
                extended += 1
    assert rebases >= 2 and extended >= 20
    # Every message ever added is in the context or inside a section the handoff cites.
    in_context = {json.dumps(wire(m), sort_keys=True) for m in host.messages}
    reachable: set[str] = set()
    for level, section_id, _lo, _hi in cited(host.handoffs[-1]):
        label = section_id if level == 1 else f"L{level}:{section_id}"
        reachable.update(json.dumps(m, sort_keys=True) for m in host.expand_all(label))
    # A kept message cut to fit names its seq; chronicle_expand returns its original.
    for m in host.messages:
        seq = shortened.origin(m)
        if seq is not None:
            result = core.compaction.expand(host.session, from_seq=seq, to_seq=seq)
            reachable.update(json.dumps(i["message"], sort_keys=True) for i in result["messages"])
    for m in host.everything:
        key = json.dumps(wire(m), sort_keys=True)
        assert key in in_context or key in reachable
    status = core.compaction.status(host.session, policy)
    assert status["passes"] == 100 and status["tokens_saved"] > 0
    assert any(s["level"] >= 2 for s in status["handoff"]["sections"])


def test_background_sections_are_reused_and_need_no_model_call(core: ChronicleCore) -> None:
    calls: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("draw")
        return ModelResponse(parts=[TextPart("User: model-written summary")])

    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    seqs = core.capture.capture_messages(host.session, host.messages)
    name = core.sessions.chronicle_name(host.session)
    # Background consolidation already wrote sections over the first closed units.
    core.chronicle(name).append(
        Section(
            Anchor(f"{seqs[2]}-{seqs[41]}", seqs[2], seqs[41], seqs[41]),
            "Background: turns 0-9 done.",
            meta={"messages": 40},
        )
    )
    core.compaction.writer = ModelWriter(
        lambda: FunctionModel(model), core.store, core.types, timeout=10
    )
    outcome = host.compress()
    assert outcome.reused == [f"{seqs[2]}-{seqs[41]}"]
    assert len(calls) == len(outcome.written) == 1  # only the gap after it was drawn
    assert "Background: turns 0-9 done." in host.handoffs[-1]
    assert "model-written summary" in host.handoffs[-1]
    pins = list(core.store.read(namespaces=[BOOKKEEPING_NAMESPACE]))
    assert len(pins) == 1  # the draw is pinned in the log
    section = core.compaction.resolve(name, outcome.written[0])
    assert section is not None and section.section.pins == (pins[0].payload["key"],)


@pytest.mark.parametrize("failure", ["raises", "empty", "slow"])
def test_a_failed_model_call_falls_back_to_the_extractive_summary(
    core: ChronicleCore, failure: str
) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if failure == "raises":
            raise ConnectionError("summary server is down")
        if failure == "slow":
            time.sleep(2)
        return ModelResponse(parts=[TextPart("")])

    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    core.compaction.writer = ModelWriter(
        lambda: FunctionModel(model), core.store, core.types, timeout=0.5
    )
    started = time.perf_counter()
    outcome = host.compress()
    assert time.perf_counter() - started < 1.8
    assert outcome.messages is not None and outcome.fell_back
    extractive = ExtractiveWriter()
    assert "User: request 2: look into ticket OPS-2" in host.handoffs[-1]
    assert extractive.name == "extractive"
    for label in outcome.written:
        assert host.expand_all(label)  # nothing was lost because the model failed


def test_focus_and_memory_context_reach_the_handoff(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(
            *turn(
                n,
                instruction=f"billing question {n}: invoice INV-{n} is wrong"
                if n % 9 == 0
                else None,
            )
        )
    outcome = host.compress(
        focus_topic="billing invoice", memory_context="User prefers terse answers."
    )
    assert outcome.messages is not None
    handoff = host.handoffs[-1]
    assert "focus: billing invoice" in handoff
    assert "Memory recalled when this was folded:\nUser prefers terse answers." in handoff
    assert "invoice INV-9 is wrong" in handoff


def test_pins_keep_a_message_verbatim_and_follow_the_lineage(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    seqs = core.capture.capture_messages(host.session, host.messages)
    core.compaction.pin(host.session, seqs[10], seqs[10], "the config the user pasted")
    host.compress()
    assert host.messages[1:].count(next(m for m in host.messages if m == turn(2)[2])) == 1
    for n in range(60, 120):
        host.add(*turn(n))
    host.compress()  # a second pass, under the rotated session id
    assert turn(2)[2] in host.messages
    status = core.compaction.status(host.session)
    assert status["pins"] == [
        {"from_seq": seqs[10], "to_seq": seqs[10], "note": "the config the user pasted"}
    ]
    assert status["passes"] == 2


def test_a_conversations_reads_and_whole_log_reads_see_each_event_once(
    core: ChronicleCore,
) -> None:
    # A pass reads its own lineage's context events only; a status or ledger read reads every
    # conversation's. Mixed in any order, each one sees every event of its conversation once.
    a, b = Host(core, small_policy(), session="a"), Host(core, small_policy(), session="b")
    for n in range(60):
        a.add(*turn(n))
        b.add(*turn(n))
    seqs = core.capture.capture_messages(a.session, a.messages)
    b_seqs = core.capture.capture_messages(b.session, b.messages)
    compaction = core.compaction
    compaction.pin(a.session, seqs[10], seqs[10], "first")
    a.compress()  # reads a's events (its pin)
    compaction.pin(b.session, b_seqs[12], b_seqs[12], "b's")
    compaction.set_focus("a", "billing")  # under a's first session, after a's read
    assert compaction.status(b.session)["passes"] == 0  # a whole-log read
    compaction.pin("a", seqs[14], seqs[14], "second")
    for n in range(60, 120):
        a.add(*turn(n))
    a.compress()  # a's events since its last read, and none twice
    a_state = compaction.lineage_state(a.session)
    assert len(a_state.passes) == 2 and a_state.focus == "billing"
    assert sorted(a_state.pins.values()) == ["first", "second"]
    b_state = compaction.lineage_state(b.session)
    assert b_state.passes == [] and list(b_state.pins.values()) == ["b's"]
    assert compaction.status(a.session)["passes"] == 2
    assert [len(compaction.ledgers(h.session)) for h in (a, b)] == [2, 0]
    assert len(compaction.lineage_state(a.session).passes) == 2  # (after the whole-log reads)


def test_tools_of_a_later_session_reach_sections_cited_before(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    host.compress()
    first = host.outcomes[-1].written[0]
    for n in range(60, 120):
        host.add(*turn(n))
    host.compress()
    assert host.session == "s2"  # two rotations later
    lo, hi = (int(x) for x in first.split("-"))
    seqs = core.capture.capture_messages("s0", host.everything)
    expected = [
        wire(m)
        for m, s in zip(host.everything, seqs, strict=True)
        if s is not None and lo <= s <= hi
    ]
    assert host.expand_all(first) == expected
    by_range = core.compaction.expand(host.session, from_seq=lo, to_seq=lo)
    assert [item["message"] for item in by_range["messages"]] == expected[:1]


def test_nothing_to_fold_leaves_the_list_alone(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    host.add(*turn(0))
    outcome = host.compress()
    assert outcome.messages is None and "nothing to fold" in outcome.reason
    assert core.compaction.has_content(host.messages, host.policy) is False


def test_another_compressors_summary_is_kept_verbatim(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    builtin = {
        "role": "user",
        "content": "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary below. ## Active Task: ship v2",
    }
    host.add(turn(0)[0], turn(0)[3], builtin)
    for n in range(1, 60):
        host.add(*turn(n))
    outcome = host.compress()
    assert outcome.messages is not None
    assert builtin in outcome.messages
    assert sum(1 for m in outcome.messages if content_text(m).startswith(HEADER[:30])) == 2


def test_the_compaction_entry_is_recorded_in_the_session_tree(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    instruction = "Never run migrations on a Friday."
    for n in range(60):
        host.add(*turn(n, instruction=instruction if n == 5 else None))
    outcome = host.compress()
    assert outcome.messages is not None
    entries = [e for e in core.sessions.path("s0") if e.kind == "compaction"]
    assert len(entries) == 1
    (payload,) = core.sessions.payloads([entries[0].seq]).values()
    assert payload["section_ids"] == outcome.view
    assert (payload["tokens_before"], payload["tokens_after"]) == (
        outcome.tokens_before,
        outcome.tokens_after,
    )
    # The tree's projection holds what the model holds: the same messages, the handoff as summary.
    projected = core.sessions.projection("s0")
    handoff = next(m for m in outcome.messages if is_own_handoff(m))
    assert {"role": "user", "content": handoff["content"]} in projected
    key = lambda m: json.dumps(wire(m), sort_keys=True)  # noqa: E731
    assert sorted(key(m) for m in projected if not is_own_handoff(m)) == sorted(
        key(m) for m in outcome.messages if not is_own_handoff(m)
    )
    assert any(instruction in content_text(m) for m in projected)


def test_scripted_conversation_helper_is_well_formed() -> None:
    messages = conversation(5)
    assert [m["role"] for m in messages[:4]] == ["user", "assistant", "tool", "assistant"]


def test_expand_pages_stay_under_hermes_tool_result_limit(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n, size=9000))  # ~9 KB per message: a page of 20 would pass 100 KB
    outcome = host.compress()
    label = outcome.written[0]
    pages: list[dict[str, Any]] = []
    page = 1
    while True:
        result = core.compaction.expand(host.session, section_id=label, page=page, page_size=200)
        pages.append(result)
        if "next" not in result:
            break
        page = result["next"]["page"]
    assert len(pages) > 1 and all(p["pages"] == len(pages) for p in pages)
    assert all(len(json.dumps(p, ensure_ascii=False)) < 100_000 for p in pages)
    restored = [m["message"] for p in pages for m in p["messages"]]
    assert restored == host.expand_all(label)  # paging by size or by characters: same messages


def test_expand_leaves_out_what_the_user_had_forgotten(core: ChronicleCore) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    seqs = core.capture.capture_messages(host.session, host.messages)
    outcome = host.compress()
    label = outcome.written[0]
    before = host.expand_all(label)
    target = seqs[4]  # turn 1's user request, folded into the section
    assert turn(1)[0] in before
    core.recall.forget(f"m{target}", include_source=True, session_id=host.session)
    result = core.compaction.expand(host.session, section_id=label, page_size=200)
    assert result["forgotten"] == 1
    assert target not in [m["seq"] for m in result["messages"]]
    assert len(host.expand_all(label)) == len(before) - 1


def test_memory_context_reaches_the_handoff_when_every_part_was_consolidated(
    core: ChronicleCore,
) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    seqs = core.capture.capture_messages(host.session, host.messages)
    name = core.sessions.chronicle_name(host.session)
    core.chronicle(name).append(  # consolidation already covered everything foldable
        Section(Anchor(f"{seqs[2]}-{seqs[-1]}", seqs[2], seqs[-1], seqs[-1]), "Background: all.")
    )
    outcome = host.compress(memory_context="User prefers terse answers.")
    assert outcome.written == [] and outcome.reused
    assert host.handoffs[-1].endswith(
        "Memory recalled at this compaction:\nUser prefers terse answers."
    )


def _chat_events(core: ChronicleCore, after: int) -> list[Any]:
    return [
        e
        for e in core.store.read(after=after)
        if e.envelope.type in ("MessageCaptured", "BranchSummarized")
    ]


def test_a_shortened_copy_is_its_original_to_capture(core: ChronicleCore) -> None:
    # The newest request alone is larger than the whole budget: the pass keeps it, cut.
    host = Host(core, small_policy())
    for n in range(40):
        host.add(*turn(n))
    request = {"role": "user", "content": "paste: " + "log line 42 failed\n" * 6_000}
    host.add(request)
    original_seq = core.capture.capture_messages(host.session, host.messages)[-1]
    outcome = host.compress()
    assert outcome.messages is not None
    cut = host.messages[-1]
    assert cut["content"].startswith("paste: log line 42")
    assert "shortened by Chronicle" in cut["content"]
    assert len(cut["content"]) < len(request["content"]) // 4
    assert outcome.tokens_after <= host.policy.low_tokens

    # The next turns (the host's list as compress returned it, then new messages) record only
    # what is new: the cut copy stands for its original, it is neither new nor a branch.
    mark = core.store.last_seq()
    seqs = core.capture.capture_messages(host.session, host.messages)
    assert seqs[-1] == original_seq
    assert _chat_events(core, mark) == []
    reply = {"role": "assistant", "content": "The failure is on line 42."}
    host.add(reply)
    new = _chat_events(core, mark)
    assert [e.envelope.type for e in new] == ["MessageCaptured"]
    assert new[0].payload["message"] == reply
    # A later pass cuts the copy again (or folds it): still no branch, and expand returns the
    # original byte for byte.
    for n in range(40, 80):
        host.add(*turn(n))
    assert host.compress().messages is not None
    host.add({"role": "user", "content": "next"})
    assert not [e for e in _chat_events(core, mark) if e.envelope.type == "BranchSummarized"]
    expanded = core.compaction.expand(host.session, from_seq=original_seq, to_seq=original_seq)
    assert expanded["messages"][0]["message"] == request


def test_a_bridged_region_aligns_with_the_branch(core: ChronicleCore) -> None:
    # The tail starts at an answer, so the pass also keeps the request before it (a bridge):
    # what follows the handoff has folded messages between its parts. The next capture of that
    # list must find it on the branch, not start a new branch with copies of it.
    host = Host(core, small_policy())
    for n in range(40):
        host.add(*turn(n))
    host.add({"role": "user", "content": "paste " + "y" * 12_000})
    before = core.capture.capture_messages(host.session, host.messages)
    outcome = host.compress()
    assert outcome.messages is not None
    kept = host.messages[
        host.messages.index(next(m for m in host.messages if is_own_handoff(m))) + 1 :
    ]
    positions = [host.everything.index(m) for m in kept]
    assert positions != list(range(positions[0], positions[0] + len(positions)))  # a gap
    mark = core.store.last_seq()
    seqs = core.capture.capture_messages(host.session, host.messages)
    assert _chat_events(core, mark) == []
    assert [s for s in seqs if s is not None][3:] == [before[i] for i in positions]


def test_a_message_kept_below_the_first_section_is_covered_before_it_leaves(
    core: ChronicleCore,
) -> None:
    # The first body message after the head is pinned, so the first pass keeps it while it folds
    # what follows. Unpinned, a later pass lets it go: it must lie inside a cited section then.
    host = Host(core, small_policy())
    for n in range(40):
        host.add(*turn(n))
    seqs = core.capture.capture_messages(host.session, host.messages)
    first_body = seqs[3]  # turn 0's answer: the head is turn 0's request, call and result
    core.compaction.pin(host.session, first_body, first_body, "keep the first answer")
    assert host.compress().messages is not None
    original = host.everything[3]
    assert original in host.messages  # kept verbatim by the pin
    core.compaction.unpin(host.session, first_body, first_body)
    for n in range(40, 80):
        host.add(*turn(n))
    later = core.capture.capture_messages(host.session, host.messages)[-160:]
    assert host.compress().messages is not None
    assert original not in host.messages
    # Nothing left the context without a cited section covering it, and expand returns it.
    in_context = {json.dumps(wire(m), sort_keys=True) for m in host.messages}
    ranges = [(lo, hi) for _, _, lo, hi in cited(host.handoffs[-1])]
    seq_of = {
        json.dumps(wire(m), sort_keys=True): s
        for m, s in zip(host.everything, [*seqs, *later], strict=True)
    }
    for key, seq in seq_of.items():
        assert key in in_context or any(lo <= seq <= hi for lo, hi in ranges), seq
    for level, section_id, lo, hi in cited(host.handoffs[-1]):
        if lo <= first_body <= hi:
            label = section_id if level == 1 else f"L{level}:{section_id}"
            assert original in host.expand_all(label)
            break
    else:
        raise AssertionError("no cited section covers the unpinned message")


def test_compaction_plans_again_when_consolidation_writes_over_its_range(
    core: ChronicleCore,
) -> None:
    # Consolidation (the mem-sync thread) writes a section over the pass's range after the pass
    # read the chronicle and before it writes: the pass plans again once, reusing that section.
    host = Host(core, small_policy())
    for n in range(40):
        host.add(*turn(n))
    name = core.sessions.chronicle_name(host.session)
    raced: list[str] = []

    class Racing(ExtractiveWriter):
        def summarize(self, fold: Any) -> Any:
            if not raced:
                lo, hi = (int(x) for x in fold.label.split("-"))
                mid = (lo + hi) // 2
                section = Section(
                    Anchor(f"{lo}-{mid}", lo, mid, mid), "Background: the first half.", meta={}
                )
                worker = threading.Thread(target=lambda: core.chronicle(name).append(section))
                worker.start()
                worker.join()
                raced.append(f"{lo}-{mid}")
            return super().summarize(fold)

    core.compaction.writer = Racing()
    outcome = host.compress()
    assert raced and outcome.messages is not None, outcome.reason
    assert raced[0] in outcome.reused and raced[0] in outcome.view
    assert "Background: the first half." in host.handoffs[-1]
    current = core.chronicle(name).current()
    for a, b in itertools.pairwise(current):
        assert a.anchor.to_seq < b.anchor.from_seq  # no overlap
    passes = [e for e in core.store.read() if e.envelope.type == "ContextCompacted"]
    assert len(passes) == 1


def test_the_sections_and_the_tree_entry_are_written_together(
    core: ChronicleCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host(core, small_policy())
    for n in range(40):
        host.add(*turn(n))
    name = core.sessions.chronicle_name(host.session)
    mark = core.store.last_seq()

    def refuse(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("disk went away while recording the compaction entry")

    monkeypatch.setattr(core.sessions, "record_compaction", refuse)
    with pytest.raises(RuntimeError):
        core.compaction.compress(host.session, host.messages, policy=host.policy)
    assert len(core.chronicle(name)) == 0  # no section without its tree entry
    assert not [e for e in core.store.read(after=mark) if e.envelope.type == "ContextCompacted"]
    monkeypatch.undo()
    outcome = host.compress()
    assert outcome.messages is not None and len(core.chronicle(name)) == len(outcome.written)
    entries = [e for e in core.store.read(after=mark) if e.envelope.type == "CompactionRecorded"]
    assert len(entries) == 1


def test_a_pass_caps_its_total_time_for_model_calls(tmp_path: Any) -> None:
    calls: list[float] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(time.perf_counter())
        time.sleep(0.4)
        return ModelResponse(parts=[TextPart("model-written summary")])

    core = core_for(tmp_path / "capped.db", Config({"context": {"summarizer_pass_seconds": 0.6}}))
    host = Host(core, small_policy())
    for n in range(40):
        host.add(*turn(n))
    seqs = core.capture.capture_messages(host.session, host.messages)
    name = core.sessions.chronicle_name(host.session)
    # Background sections every few turns leave many gaps, so the pass would draw many times.
    for k in range(2, 34, 8):
        core.chronicle(name).append(
            Section(
                Anchor(
                    f"{seqs[4 * k]}-{seqs[4 * k + 3]}",
                    seqs[4 * k],
                    seqs[4 * k + 3],
                    seqs[4 * k + 3],
                ),
                f"Background {k}.",
                meta={},
            )
        )
    core.compaction.writer = ModelWriter(
        lambda: FunctionModel(model), core.store, core.types, timeout=10
    )
    started = time.perf_counter()
    outcome = host.compress()
    took = time.perf_counter() - started
    assert outcome.messages is not None and len(outcome.written) >= 3
    assert 1 <= len(calls) <= 2 and took < 0.6 + 0.4 + 1.5  # not one 0.4 s call per gap
    fell = [core.compaction.resolve(name, label) for label in outcome.written]
    spent = [v for v in fell if v and "spent its time" in str(v.section.meta.get("fell_back"))]
    assert spent  # the rest were written extractively, and say why
    core.shutdown()


class _Text(str):
    """A str subclass: `shortened.origin` reads its note like any text's."""


def _calls(arguments: str) -> dict[str, object]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@pytest.mark.parametrize(
    "make",
    [
        lambda seq: {"role": "tool", "content": shortened.note("x" * 50, seq)},
        lambda seq: {"role": "tool", "content": _Text(shortened.note("x" * 50, seq))},
        lambda seq: {"role": "user", "content": "words" + shortened.edited_note("edited", seq)},
        lambda seq: _calls(shortened.arguments_note("{}" * 40, 4, seq)),
        lambda seq: {"role": "tool", "content": shortened.note("x" * 50, seq + 1)},
        lambda seq: {"role": "user", "content": "plain words]"},
        lambda seq: {"role": "user", "content": None},
        lambda seq: {"role": "user", "content": [{"type": "text", "text": "part]"}]},
        lambda seq: _calls("{}"),
        lambda seq: "not a dict",
    ],
)
def test_a_pass_reads_the_logged_original_of_every_copy_that_stands_for_one(
    core: ChronicleCore, make: Any
) -> None:
    # `_original` answers the messages that cannot carry a note without asking `origin`: the
    # answer is the one `origin` gives (the log's original of the seq it names, else the
    # message itself).
    (seq,) = core.capture.capture_messages("s", [{"role": "tool", "content": "the original"}])
    assert seq is not None
    message = make(seq)
    got = core.compaction._original(seq, message)
    if shortened.origin(message) == seq:
        assert got == {"role": "tool", "content": "the original"}
    else:
        assert got is message
