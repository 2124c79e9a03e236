"""A credential pasted into a conversation stays in the raw log and nowhere else (review finding
#6): not in a section's prose, the handoff, a model summariser's prompt, a consolidation's
section, search results, prefetch or beliefs; `chronicle_expand` still returns it byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_compaction_engine import Host, small_policy, turn
from test_compaction_support import wire
from test_scheduler_support import FakeClock, open_core, places

from chronicle_engine.capture.secrets import mask
from chronicle_engine.chronicle.sections import Consolidation
from chronicle_engine.chronicle.writers import FoldInput, ModelWriter
from chronicle_engine.core import ChronicleCore
from chronicle_engine.messages import content_text

OPENAI = "sk-proj-Q7xW2mZ9kL4pR8tV1nB6cY3hJ5gF0dS"
GITHUB = "ghp_R4nd0mT0k3nV4lu3Xy9Zq8Wp7Lm6Kj5Hg4Fd"
AWS = "AKIAZ7Q2M4X9L1P8R3T6"
PASSWORD = "Tr0ub4dor-and-3"
PIN = "90417"
URL_PASSWORD = "pa55w0rdQz"
JWT = (
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjaHJvbmljbGUtdGVzdCJ9.c2lnbmF0dXJlLXZhbHVlLWZvci10ZXN0aW5nLTEy"
)
SECRETS = [OPENAI, GITHUB, AWS, PASSWORD, PIN, URL_PASSWORD, JWT]

# Things that look technical but are not credentials: they must survive into the prose.
COMMIT = "9fceb02d0ae598e95dc970b74767f19372d61af8"
UUID_PATH = "/srv/runs/550e8400-e29b-41d4-a716-446655440000/report.json"


def leaky_turn() -> list[dict[str, Any]]:
    """A turn that hands over credentials every way a conversation does."""
    return [
        {
            "role": "user",
            "content": (
                f"My deploy password is {PASSWORD} and the door PIN is {PIN}. Use the api key "
                f"{OPENAI} for the deploy of commit {COMMIT}, results go to {UUID_PATH}."
            ),
        },
        {
            "role": "assistant",
            "content": f"I'll push with {GITHUB} once the checks pass.",
            "tool_calls": [
                {
                    "id": "call_leak",
                    "type": "function",
                    "function": {
                        "name": "terminal",
                        "arguments": json.dumps(
                            {
                                "command": f"curl -H 'Authorization: Bearer {JWT}' "
                                f"https://deploy:{URL_PASSWORD}@ci.example.com/run"
                            }
                        ),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_leak",
            "content": f"error: denied for AWS_ACCESS_KEY_ID={AWS}\nexit 1",
        },
        {
            "role": "assistant",
            "content": f"Decided: deploy {COMMIT} failed; key {AWS} lacks rights.",
        },
    ]


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into {where}"


@pytest.fixture
def core(store_core: ChronicleCore) -> ChronicleCore:
    return store_core  # SQLite in memory, in a file, and PostgreSQL (conftest.py)


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """A scheduler test's place: a SQLite file, then a schema of its own on PostgreSQL."""
    with places(request, tmp_path) as place:
        yield place


def fold_a_leak(core: ChronicleCore) -> tuple[Host, list[dict[str, Any]], list[int | None]]:
    host = Host(core, small_policy())
    host.add(*turn(0))
    host.add(*leaky_turn())
    for n in range(1, 60):
        host.add(*turn(n))
    before = list(host.messages)
    outcome = host.compress()
    assert outcome.messages is not None and outcome.written
    seqs = core.capture.capture_messages(host.session, before)
    return host, before, seqs


def sections_prose(core: ChronicleCore, session: str) -> list[str]:
    return [s.prose for s in core.chronicle(core.sessions.chronicle_name(session)).current()]


def test_a_folded_credential_reaches_no_prose_nor_handoff_and_expand_returns_it(
    core: ChronicleCore,
) -> None:
    host, before, seqs = fold_a_leak(core)
    prose = sections_prose(core, host.session)
    assert prose
    for text in prose:
        assert_no_secret(text, "section prose")
    assert_no_secret(host.handoffs[-1], "the handoff")
    assert_no_secret(json.dumps(host.messages), "the compacted context")
    # The prose still says what happened, with the masks in place of the values only.
    everything = "\n".join(prose)
    assert "«masked:password»" in everything and "«masked:openai_key»" in everything
    assert COMMIT in everything and UUID_PATH in everything
    # The raw archive is exact: expanding the folded range gives the credentials back.
    leaked = [
        (m, s) for m, s in zip(before, seqs, strict=True) if s is not None and m in leaky_turn()
    ]
    lo, hi = leaked[0][1], leaked[-1][1]
    assert lo is not None and hi is not None
    result = core.compaction.expand(host.session, from_seq=lo, to_seq=hi, page_size=50)
    expanded = [item["message"] for item in result["messages"]]
    assert json.dumps(expanded) == json.dumps([wire(m) for m in leaky_turn()])
    for secret in SECRETS:
        assert secret in json.dumps(expanded)


def test_search_prefetch_and_beliefs_hold_no_folded_credential(core: ChronicleCore) -> None:
    host, _, _ = fold_a_leak(core)
    outputs = [
        json.dumps(core.recall.search("deploy password api key commit", session_id=host.session)),
        json.dumps(core.recall.search(PASSWORD)),
        json.dumps(core.recall.search("door PIN")),
        core.recall.prefetch("what was the deploy password and the api key?", session_id="later"),
        json.dumps(core.recall.beliefs()),
    ]
    assert any("deploy" in out for out in outputs)
    for out in outputs:
        assert_no_secret(out, "recall")


def prompts_of(messages: list[ModelMessage]) -> str:
    parts: list[str] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            parts.extend(str(getattr(part, "content", "")) for part in message.parts)
            parts.append(message.instructions or "")
    return "\n".join(parts)


def test_the_model_summariser_never_sees_nor_writes_a_credential(core: ChronicleCore) -> None:
    prompts: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = prompts_of(messages)
        prompts.append(prompt)
        # A model may echo what it read, or write a credential-shaped string of its own.
        return ModelResponse(parts=[TextPart(f"Facts: {GITHUB}\n{prompt[-3000:]}")])

    core.compaction.writer = ModelWriter(
        lambda: FunctionModel(model), core.store, core.types, timeout=10
    )
    host, _, _ = fold_a_leak(core)
    assert prompts and any("deploy" in p for p in prompts)
    for prompt in prompts:
        assert_no_secret(prompt, "a model prompt")
    for text in sections_prose(core, host.session):
        assert_no_secret(text, "model-written prose")
    assert_no_secret(host.handoffs[-1], "the handoff")
    # Condensing sections written before the masker knew a shape: the prompt is masked too.
    drawn = core.compaction.writer.condense(
        [("1-4", f"User: my deploy password is {PASSWORD}, key {OPENAI}")],
        label="L2:1-4",
        focus=None,
        budget_chars=2000,
    )
    assert_no_secret(prompts[-1], "a condensation prompt")
    assert_no_secret(drawn.prose, "condensed prose")


def test_an_oversized_fold_sends_the_model_the_masked_digest(core: ChronicleCore) -> None:
    prompts: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts.append(prompts_of(messages))
        return ModelResponse(parts=[TextPart("User: deploy attempted.")])

    writer = ModelWriter(lambda: FunctionModel(model), core.store, core.types, timeout=10)
    bulk = [{"role": "tool", "tool_call_id": "x", "content": "detail " * 20_000}]
    messages = [*leaky_turn(), *bulk * 10, *leaky_turn()]
    drawn = writer.summarize(FoldInput(messages, "1-30", None, 3000))
    assert len(prompts) == 1 and not drawn.fell_back
    assert_no_secret(prompts[0], "the digest sent to the model")


def test_a_consolidation_section_holds_no_credential_and_expand_still_does(where: Any) -> None:
    core = open_core(where, {"maintenance": {"schedules": {"consolidate": "* * * * *"}}})
    try:
        # the shipped wiring (the section writer); the tick's budgets run on the test's clock,
        # so a busy machine cannot end the tick before the section is written
        clock = FakeClock()
        sched = core.new_scheduler(clock=clock, timer=clock)
        messages = leaky_turn()
        core.capture.capture_messages("s1", messages)
        core.capture.record_session_end("s1", len(messages), len(messages))
        sched.tick("sync_turn")
        (section,) = core.chronicle(core.sessions.chronicle_name("s1")).current()
        assert section.meta["source"] == "consolidation"
        assert_no_secret(section.prose, "a consolidation section")
        assert COMMIT in section.prose
        events = core.sessions.message_events("s1", section.anchor.from_seq, section.anchor.to_seq)
        assert [e.payload["message"] for e in events] == [wire(m) for m in messages]
    finally:
        core.shutdown()


def test_a_summariser_that_copies_raw_text_still_writes_masked_prose(where: Any) -> None:
    def raw(events: Any) -> Consolidation:
        return Consolidation("\n".join(content_text(e.payload["message"]) for e in events))

    core = open_core(where, {"maintenance": {"schedules": {"consolidate": "* * * * *"}}})
    try:
        clock = FakeClock()
        sched = core.new_scheduler(clock=clock, timer=clock, summarize=raw)
        messages = leaky_turn()
        core.capture.capture_messages("s1", messages)
        core.capture.record_session_end("s1", len(messages), len(messages))
        sched.tick("sync_turn")
        (section,) = core.chronicle(core.sessions.chronicle_name("s1")).current()
        assert_no_secret(section.prose, "a consolidation section")
        assert section.prose == mask(section.prose)
    finally:
        core.shutdown()


def test_a_memory_context_quoting_a_credential_is_masked_in_the_handoff(
    core: ChronicleCore,
) -> None:
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n))
    memory = f"<memory-context>the staging api key is {OPENAI}</memory-context>"
    outcome = host.compress(memory_context=memory)
    assert outcome.messages is not None
    assert "<memory-context>the staging api key is «masked:" in host.handoffs[-1]
    assert_no_secret(host.handoffs[-1], "the handoff")
    for section in core.chronicle(core.sessions.chronicle_name(host.session)).current():
        assert_no_secret(json.dumps(section.meta), "a section's meta")


def test_only_messages_capture_found_a_credential_in_are_masked_again(
    core: ChronicleCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capture masks every message it records, so a fold re-masks only the messages whose
    captured text carries a mask; the prose is as clean as when every message is re-masked."""
    import chronicle_engine.messages as messages_module

    masked: list[str] = []
    real_view = messages_module.masked_view

    def counting_view(message: Any) -> Any:
        masked.append(content_text(message))
        return real_view(message)

    monkeypatch.setattr("chronicle_engine.chronicle.extractive.masked_view", counting_view)
    host, before, seqs = fold_a_leak(core)
    leaky = [s for m, s in zip(before, seqs, strict=True) if s is not None and m in leaky_turn()]
    lo, hi = min(s for s in seqs if s is not None), max(s for s in seqs if s is not None)
    marked = core.compaction._marked(lo, hi)
    # The user's request, the tool call, the tool result and the answer each held one.
    assert marked == set(leaky)
    assert masked, "the leaky messages were read through the masking view"
    leaky_texts = {content_text(m) for m in leaky_turn()}
    assert set(masked) <= leaky_texts
    for text in sections_prose(core, host.session):
        assert_no_secret(text, "section prose")
