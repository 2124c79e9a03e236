"""Capture: every message once, exactly as sent, with who said what."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import chat_places

from chronicle_engine.capture.align import plain_json
from chronicle_engine.capture.events import HANDOFF_MARKER
from chronicle_engine.core import ChronicleCore
from chronicle_engine.sessions.projection import BRANCH_SUMMARY_MARKER


@pytest.fixture
def core(chat_core):
    return chat_core


def captured(core: ChronicleCore, session: str | None = None) -> list[dict]:
    return [
        e.payload
        for e in core.store.read(session=session, namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


def contents(core: ChronicleCore, session: str | None = None) -> list[str]:
    return [p["message"].get("content") for p in captured(core, session)]


def u(text: str) -> dict:
    return {"role": "user", "content": text}


def a(text: str) -> dict:
    return {"role": "assistant", "content": text}


def fresh(messages: list[dict]) -> list[dict]:
    """The same messages as new dict objects (what a restart or a compaction copy hands us)."""
    return json.loads(json.dumps(messages))


def test_replay_records_nothing_twice(core):
    live = [{"role": "system", "content": "You are Hermes."}, u("hi"), a("hello")]
    first = core.capture.capture_messages("s1", live)
    again = core.capture.capture_messages("s1", live)
    assert first == again
    assert first[0] is None and first[1] is not None and first[2] is not None
    assert contents(core) == ["hi", "hello"]


def test_growing_list_records_only_the_new_messages(core):
    live = [u("plan the trip"), a("Where to?")]
    core.capture.capture_messages("s1", live)
    live += [u("Lisbon"), a("Booked.")]
    seqs = core.capture.capture_messages("s1", live)
    assert contents(core) == ["plan the trip", "Where to?", "Lisbon", "Booked."]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4


@pytest.mark.parametrize("return_seqs", [True, False])
@pytest.mark.parametrize("same_objects", [True, False])
def test_identical_messages_said_twice_are_two_messages(core, same_objects, return_seqs):
    live = [u("start"), a("ready")]
    core.capture.capture_messages("s1", live, return_seqs=return_seqs)
    for _ in range(3):
        live += [u("ok"), a("Done.")]
        for _again in range(2):
            seqs = core.capture.capture_messages(
                "s1", live if same_objects else fresh(live), return_seqs=return_seqs
            )
            if return_seqs:
                assert None not in seqs
    assert contents(core) == ["start", "ready"] + ["ok", "Done."] * 3


def test_the_fast_path_fills_only_new_seqs_and_follows_host_edits(core):
    live = [u("hello"), a("hi")]
    core.capture.capture_messages("s1", live, return_seqs=False)
    live += [u("ok")]  # an interrupted turn: no reply yet
    seqs = core.capture.capture_messages("s1", live, return_seqs=False)
    assert seqs[:2] == [None, None] and seqs[2] is not None
    # Hermes merges the next user message into the unanswered one, in place: a new message,
    # on a new branch from the reply before it (the unmerged one stays in the old branch).
    live[2]["content"] = "ok\n\nand also this"
    live.append(a("Both done."))
    core.capture.capture_messages("s1", live, return_seqs=False)
    assert contents(core) == ["hello", "hi", "ok", "ok\n\nand also this", "Both done."]
    kinds = [e.kind for e in core.sessions.path("s1")]
    assert kinds == ["message", "message", "branch_summary", "message", "message"]


def test_result_is_aligned_with_the_live_list(core):
    live = [{"role": "system", "content": "sys"}, u("a"), a("b")]
    seqs = core.capture.capture_messages("s1", live)
    by_seq = {e.seq: e.payload["message"] for e in core.store.read()}
    assert seqs[0] is None
    assert [by_seq[s] for s in seqs[1:]] == live[1:]


def test_wire_message_round_trips_byte_for_byte(core):
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Let me look — ünïcode ✓"}],
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "/etc/hosts"}'},
            }
        ],
        "reasoning": "thinking…",
        "_db_persisted": True,
    }
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "127.0.0.1 localhost\n"}
    seqs = core.capture.capture_messages("s1", [u("read hosts"), message, tool])
    stored = core.store.get(seqs[1])
    assert stored is not None
    expected = {k: v for k, v in message.items() if not k.startswith("_")}
    assert json.dumps(stored.payload["message"]) == json.dumps(expected)
    assert stored.payload["tool_call_ids"] == ["call_1"]
    result = core.store.get(seqs[2])
    assert result is not None and result.payload["tool_name"] == "read_file"
    assert result.payload["speaker"] == "tool"


def test_api_content_is_archived_but_never_read_as_the_persons_words(core):
    recalled = (
        "<memory-context>\n[System note: The following is recalled memory context, NOT new "
        "user input. Treat as authoritative reference data — this is the agent's persistent "
        "memory and should inform all responses.]\n\nUser lives in Porto.\n</memory-context>"
    )
    message = {
        "role": "user",
        "content": "what's the weather?",
        "api_content": "what's the weather?\n\n" + recalled,
    }
    (seq,) = core.capture.capture_messages("s1", [message])
    payload = core.store.get(seq).payload
    assert payload["message"]["api_content"].endswith("</memory-context>")
    assert payload["person_text"] == "what's the weather?"
    assert "Porto" not in payload["text"]


def test_host_frames_inside_a_user_message_are_not_the_persons_words(core):
    content = (
        "[System note: The user's previous session expired due to inactivity. This is a fresh "
        "conversation with no prior context.]\n\nmy cat is called Miso\n\n<memory-context>\n"
        "[System note: recalled]\nUser likes tea\n</memory-context>"
    )
    (seq,) = core.capture.capture_messages("s1", [u(content)])
    payload = core.store.get(seq).payload
    assert payload["speaker"] == "person"
    assert payload["person_text"] == "my cat is called Miso"
    spans = payload["host_spans"]
    host = "".join(payload["text"][lo:hi] for lo, hi in spans)
    assert "expired due to inactivity" in host and "User likes tea" in host
    assert "Miso" not in host


def test_whole_host_messages_and_automation(core):
    notice = u(
        "[IMPORTANT: Background process proc_1 completed normally (exit code 0).\nCommand: make\nOutput:\nok]"
    )
    seqs = core.capture.capture_messages("s1", [notice, a("noted")])
    assert core.store.get(seqs[0]).payload["speaker"] == "host"
    assert core.store.get(seqs[0]).payload["person_text"] == ""
    cron = core.capture.capture_messages("cron_1", [u("Summarise my inbox")], agent_context="cron")
    payload = core.store.get(cron[0]).payload
    assert payload["speaker"] == "automation"
    assert payload["person_text"] == ""
    assert payload["agent_context"] == "cron"


def test_credentials_are_masked_everywhere_but_the_archived_message(core):
    key = "sk-proj-Ab3dEf5hIj7kLm9nOp1qRs3tUv5wXy7z"
    (seq,) = core.capture.capture_messages("s1", [u(f"use {key} for the api")])
    payload = core.store.get(seq).payload
    assert payload["message"]["content"] == f"use {key} for the api"
    assert key not in payload["text"] and key not in payload["person_text"]
    assert "«masked:openai_key»" in payload["person_text"]


def test_system_prompt_and_handoffs_are_not_conversation(core):
    live = [u("one"), a("two")]
    core.capture.capture_messages("s1", live)
    handoff = {"role": "user", "content": HANDOFF_MARKER + " Chronicle folded 2 messages."}
    builtin = {"role": "assistant", "content": "summary", "_compressed_summary": True}
    seqs = core.capture.capture_messages(
        "s1", [{"role": "system", "content": "sys"}, handoff, builtin, *live]
    )
    assert seqs[:3] == [None, None, None]
    assert contents(core) == ["one", "two"]


def test_malformed_messages_are_still_stored(core):
    class Weird:
        def __init__(self) -> None:
            self.role = "assistant"
            self.content = "from an object"

    live = [u("hi"), None, "plain string", Weird(), {"role": "user", "content": {1, 2}}]
    seqs = core.capture.capture_messages("s1", live)
    assert all(s is not None for s in seqs)
    kinds = [p["message"] for p in captured(core)]
    assert kinds[1] == {"role": "unknown", "content": None}
    assert kinds[2] == {"role": "unknown", "content": "plain string"}
    assert kinds[3] == {"role": "assistant", "content": "from an object"}
    assert core.capture.capture_messages("s1", live) == seqs


def test_compaction_shaped_list_after_a_recorded_compaction(core):
    live = [u("start"), a("ready")] + [u("ok"), a("Done.")] * 3
    seqs = core.capture.capture_messages("s1", live)
    core.sessions.record_compaction(
        "s1", section_ids=["1-4"], first_kept_seq=seqs[4], tokens_before=900, tokens_after=300
    )
    handoff = {"role": "user", "content": HANDOFF_MARKER + " folded 1-4"}
    compacted = [live[0], handoff, *fresh(live[4:])]
    again = core.capture.capture_messages("s1", compacted)
    assert again == [seqs[0], None, *seqs[4:]]
    compacted += [u("ok"), a("Done.")]
    core.capture.capture_messages("s1", fresh(compacted))
    assert contents(core) == ["start", "ready"] + ["ok", "Done."] * 4


def test_compression_continuation_under_a_new_session_id(core):
    live = [u("what is 2+2"), a("4"), u("and 3+3"), a("6")]
    core.capture.capture_messages("old", live)
    handoff = {"role": "user", "content": HANDOFF_MARKER + " folded"}
    core.sessions.switch("new", parent_session_id="old", reason="compression")
    compacted = [live[0], handoff, *fresh(live[2:]), u("and 4+4"), a("8")]
    seqs = core.capture.capture_messages("new", compacted)
    assert contents(core, "old") == ["what is 2+2", "4", "and 3+3", "6"]
    assert contents(core, "new") == ["and 4+4", "8"]
    assert seqs[1] is None and None not in seqs[2:]
    assert core.sessions.lineage("new") == ["old", "new"]
    assert core.sessions.chronicle_name("new") == core.sessions.chronicle_name("old")


def test_a_rewind_starts_a_branch_and_keeps_the_old_one(core):
    live = [u("write a poem"), a("Roses..."), u("make it longer"), a("Roses, longer...")]
    core.capture.capture_messages("s1", live)
    rewound = fresh(live[:2]) + [u("make it rhyme"), a("Roses rhyme...")]
    core.capture.capture_messages("s1", rewound)
    assert contents(core) == [m["content"] for m in live] + ["make it rhyme", "Roses rhyme..."]
    path = core.sessions.path("s1")
    kinds = [e.kind for e in path]
    assert kinds == ["message", "message", "branch_summary", "message", "message"]
    summary = core.store.get(path[2].seq).payload
    assert "make it longer" in summary["summary"]
    # Seen again, the rewound list records nothing more.
    core.capture.capture_messages("s1", fresh(rewound))
    assert len(captured(core)) == 6


def test_a_new_core_on_the_same_file_resumes_alignment(target):
    live = [u("x"), a("y")] * 3
    first = target.tree()
    before = first.capture.capture_messages("s1", live)
    first.shutdown()
    second = target.tree()
    live = fresh(live) + [u("x"), a("y")]
    after = second.capture.capture_messages("s1", live)
    assert after[:6] == before
    assert len(captured(second)) == 8
    second.shutdown()


def test_concurrent_captures_record_each_message_once(target):
    core = target.tree()
    live: list[dict] = []
    for turn in range(20):
        live += [u(f"q{turn % 3}"), a("same answer")]
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for end in range(2, len(live) + 1, 2):
                core.capture.capture_messages("s1", fresh(live[:end]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert contents(core) == [m["content"] for m in live]
    core.shutdown()


_ALPHABET = st.sampled_from(
    [
        u("ok"),
        a("Done."),
        u("again"),
        a("Sure."),
        {"role": "tool", "tool_call_id": "t", "content": "x"},
    ]
)


@pytest.mark.parametrize("kind", ["memory", "postgres"])  # each example a store of its own
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    messages=st.lists(_ALPHABET, min_size=1, max_size=24),
    cuts=st.lists(st.integers(min_value=1, max_value=24), max_size=6),
)
def test_law_every_prefix_seen_in_any_order_of_growth_records_each_message_once(
    kind, messages, cuts, tmp_path, request
):
    with chat_places(kind, request, tmp_path) as (place,):
        _every_prefix_once(place.open(), messages, cuts)


def _every_prefix_once(core, messages, cuts) -> None:
    ends = sorted({min(c, len(messages)) for c in cuts} | {len(messages)})
    for end in ends:
        core.capture.capture_messages("s", fresh(messages[:end]))
        core.capture.capture_messages("s", fresh(messages[:end]))
    assert [p["message"] for p in captured(core)] == messages
    core.shutdown()


@pytest.mark.parametrize("kind", ["memory", "postgres"])  # each example a store of its own
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    messages=st.lists(_ALPHABET, min_size=4, max_size=30),
    data=st.data(),
)
def test_law_compactions_with_recorded_kept_tail_lose_and_repeat_nothing(
    kind, messages, data, tmp_path, request
):
    with chat_places(kind, request, tmp_path) as (place,):
        _kept_tails(place.open(), messages, data)


def _kept_tails(core, messages, data) -> None:
    live: list[dict] = []
    for message in messages:
        live.append(message)
        seqs = core.capture.capture_messages("s", fresh(live))
        conversation = [
            i
            for i, m in enumerate(live)
            if not str(m.get("content", "")).startswith(HANDOFF_MARKER)
        ]
        if len(conversation) > 3 and data.draw(st.booleans()):
            keep = data.draw(st.integers(min_value=1, max_value=len(conversation) - 1))
            first_kept = conversation[-keep]
            core.sessions.record_compaction(
                "s",
                section_ids=["x"],
                first_kept_seq=seqs[first_kept],
                tokens_before=1,
                tokens_after=1,
            )
            live = [{"role": "user", "content": HANDOFF_MARKER + " folded"}] + live[first_kept:]
    assert [p["message"] for p in captured(core)] == messages
    core.shutdown()


def test_a_resumed_list_with_a_message_the_host_rewrote_records_nothing_twice(core):
    live = [u(f"question {i}") if i % 2 == 0 else a(f"answer {i}") for i in range(20)]
    seqs = core.capture.capture_messages("s1", live)
    core.capture.forget("s1")  # a restart: no live dicts known
    resumed = fresh(live)
    resumed[3]["content"] = "answer 3 (redacted on replay)"
    again = core.capture.capture_messages("s1", resumed)
    assert again == seqs
    resumed += [u("next"), a("reply")]
    core.capture.forget("s1")
    core.capture.capture_messages("s1", resumed, return_seqs=False)
    assert len(captured(core)) == 22


def test_sessions_evicted_from_the_cache_reload_from_the_tree(core, monkeypatch):
    import chronicle_engine.sessions.capture as capture_module

    monkeypatch.setattr(capture_module, "_CACHED_SESSIONS", 2)
    lives = {f"s{i}": [u("ok"), a("Done.")] for i in range(5)}
    for _ in range(3):
        for session, live in lives.items():
            live += [u("ok"), a("Done.")]
            core.capture.capture_messages(session, live, return_seqs=False)
    assert len(core.capture._paths) == 2
    for session, live in lives.items():
        assert contents(core, session) == [m["content"] for m in live]


_PAYLOAD_CORPUS = [
    u("plain words from the person"),
    u("<memory-context>\nold facts\n</memory-context>\n\nwhat did we decide?"),
    u("[System note: the user pasted a file]\nmy api_key=sk-proj-Ab3dEf5gHi7jKl9mNo1pQr3sTu5vWx"),
    {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url"}]},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "ok\n" * 50, "name": "terminal"},
    {"role": "tool", "tool_call_id": "c2", "content": "no name here"},
    {"role": "assistant", "content": "ünïcode ✓ and 数字 42"},
    {"role": "user", "content": 12345},
    {"role": "user", "content": None},
    {"content": "no role at all"},
    {"role": "user", "content": "x" * 70_000},
    # json.dumps takes these leniently; stored, they must be what the model's JSON dump gives.
    {"role": "assistant", "content": "x", "usage": {"cost": float("nan")}},
    {"role": "assistant", "content": "x", "usage": {"cost": float("inf")}},
    {"role": "assistant", "content": "x", "meta": {None: 1, 2: "two"}},
    {"role": "assistant", "content": "x", "parts": (1, (2, 3))},
]


@pytest.mark.parametrize("message", _PAYLOAD_CORPUS)
@pytest.mark.parametrize(
    "context",
    [
        {"parent": "", "turn": None},
        {"parent": "m1", "turn": 3, "user_id": "u1", "profile": "work", "tool_name": "t"},
        {"parent": None, "turn": 1, "agent_context": "cron", "platform": "telegram"},
    ],
)
def test_the_payload_capture_builds_is_the_models_dump(message, context):
    """Capture stores describe_payload's dict without building the model: it must be exactly
    the model's JSON dump, field for field and byte for byte once encoded."""
    from chronicle_engine.capture.align import fingerprint, wire_message
    from chronicle_engine.capture.describe import describe, describe_payload
    from chronicle_engine.capture.events import MessageCaptured

    wire = wire_message(message)
    fp = fingerprint(wire)
    payload = describe_payload(message, wire, fp, **context)
    dumped = MessageCaptured(**payload).model_dump(mode="json")
    assert payload == dumped
    assert list(payload) == list(dumped)
    assert json.dumps(payload, ensure_ascii=False) == json.dumps(dumped, ensure_ascii=False)
    assert describe(message, wire, fp, **context).model_dump(mode="json") == payload


def test_a_sessions_message_ids_sort_in_branch_order(core):
    """Ids are laid out for the log's id index: one session's messages side by side, in the
    order of the branch, so a turn's appends touch the end of its run and not random pages."""
    live = []
    for n in range(30):
        live += [u(f"question {n}"), a(f"answer {n}")]
        core.capture.capture_messages("s1", live, return_seqs=False)
        core.capture.capture_messages("s2", live[-2:], return_seqs=False)
    by_seq = [
        e.envelope.id
        for e in core.store.read(session="s1", namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    assert len(by_seq) == 60 and by_seq == sorted(by_seq)
    other = {e.envelope.id[:9] for e in core.store.read(session="s2")}
    assert other.isdisjoint({i[:9] for i in by_seq})


def test_a_log_with_ids_of_the_old_layout_goes_on_without_duplicates(tmp_path, monkeypatch):
    """A database written before ids led with session and position: a new process aligns with
    it by fingerprint, records only what is new, and chains the new ids onto the old ones."""
    import chronicle_engine.capture.plan as capture_module
    from chronicle_engine.capture.describe import digest, legacy_message_id

    monkeypatch.setattr(
        capture_module,
        "message_id",
        lambda session, anchor, fp, position: legacy_message_id(session, anchor, fp),
    )
    path = tmp_path / "old.db"
    first = ChronicleCore(path)
    live = [u("one"), a("two"), u("three")]
    first.capture.capture_messages("s1", live)
    first.shutdown()
    monkeypatch.undo()

    second = ChronicleCore(path)
    try:
        fresh_list = [dict(m) for m in live] + [a("four"), u("five")]
        second.capture.capture_messages("s1", fresh_list)
        second.capture.capture_messages("s1", fresh_list, return_seqs=False)
        assert contents(second, "s1") == ["one", "two", "three", "four", "five"]
        ids = [e.envelope.id for e in second.store.read(session="s1")]
        assert [len(i) for i in ids] == [33] * 5
        assert ids[3][1:9] == digest("s1")[:8] and ids[0][1:9] != digest("s1")[:8]
        assert second.sessions.projection("s1")[-1]["content"] == "five"
    finally:
        second.shutdown()


def test_a_stored_payload_is_strict_json(core):
    core.capture.capture_messages(
        "s", [{"role": "assistant", "content": "x", "score": float("nan")}]
    )
    with core.store.reading() as conn:
        (raw,) = conn.execute(
            "SELECT payload FROM events WHERE type = 'MessageCaptured'"
        ).fetchone()

    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token} stored")

    assert json.loads(raw, parse_constant=refuse)["message"]["score"] is None


def test_an_edited_last_turn_after_a_restart_branches(target):
    """No cached branch (a restart): a list that rewrites the last turn branches, even when an
    earlier reply has the abandoned reply's fingerprint ("Done." twice)."""
    first = target.tree()
    first.capture.capture_messages(
        "s", [u("rename the file"), a("Done."), u("delete the tmp dir"), a("Done.")]
    )
    first.shutdown()
    second = target.tree()
    try:
        edited = [u("rename the file"), a("Done."), u("keep the tmp dir"), a("Kept.")]
        second.capture.capture_messages("s", edited, return_seqs=False)
        projected = [m.get("content") for m in second.sessions.projection("s")]
        assert projected[-2:] == ["keep the tmp dir", "Kept."]
        assert "delete the tmp dir" not in projected
    finally:
        second.shutdown()


def test_a_turn_another_process_stored_first_stays_on_the_branch(target):
    """Two processes capture the same conversation: the second finds the turn already on the
    branch after its last known message and records nothing, rather than branching away from
    the very same messages."""
    one, two = target.tree(), target.tree()
    try:
        live_one = [u("one"), a("two")]
        live_two = [dict(m) for m in live_one]
        one.capture.capture_messages("s", live_one, return_seqs=False)
        two.capture.capture_messages("s", live_two, return_seqs=False)
        live_one += [u("three"), a("four")]
        live_two += [u("three"), a("four")]
        one.capture.capture_messages("s", live_one, return_seqs=False)
        assert two.capture.capture_turn("s", live_two) == 0
        two.sessions.refresh()
        projected = [m.get("content") for m in two.sessions.projection("s")]
        assert projected == ["one", "two", "three", "four"]
        assert "BranchSummarized" not in [e.envelope.type for e in two.store.read(session="s")]
        live_two.append(u("five"))
        assert two.capture.capture_turn("s", live_two) == 1
        assert [m.get("content") for m in one.sessions.projection("s")][-1] == "five"
    finally:
        one.shutdown()
        two.shutdown()


_WORDS = [u("ok"), a("Done."), u("again"), a("Sure."), a("Done.")]


@pytest.mark.parametrize("kind", ["memory", "postgres"])  # each example a store of its own
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_law_the_projection_is_the_list_the_host_holds(kind, data, tmp_path, request):
    """Whatever the host does to its list between captures (a new turn, a regenerated reply, an
    edited last request, a restart that hands over fresh dicts, a repeat of the same call), the
    session's projection is the host's list, and a message is stored again only when the host
    has a new one. Replies repeat on purpose ("Done." twice) so fingerprints collide. (A list
    that is only a prefix of the branch records nothing and moves nothing: a stale or repeated
    call must not rewind the session; a rewind the host reports is recorded by the provider.)"""
    with chat_places(kind, request, tmp_path) as (place,):
        _projection_is_the_list(place.open(), data)


def _projection_is_the_list(core, data) -> None:
    try:
        live: list[dict] = [dict(data.draw(st.sampled_from(_WORDS)))]
        for n in range(data.draw(st.integers(min_value=1, max_value=12))):
            step = data.draw(st.sampled_from(["turn", "regenerate", "edit", "restart", "repeat"]))
            if step == "turn":
                live += [dict(data.draw(st.sampled_from(_WORDS))) for _ in range(2)]
            elif step == "regenerate" and live[-1]["role"] == "assistant":
                live[-1] = dict(data.draw(st.sampled_from(_WORDS[1::2])))
            elif step == "edit":
                users = [i for i, m in enumerate(live) if m["role"] == "user"]
                if users:
                    live = live[: users[-1]] + [u(f"edited at step {n}"), a("Done.")]
            elif step == "restart":
                core.capture.forget("s")
                live = fresh(live)
            if data.draw(st.booleans()):
                core.capture.capture_messages("s", live)
            else:
                core.capture.capture_turn("s", live)
            core.sessions.refresh()
            projected = [
                m
                for m in core.sessions.projection("s")
                if not str(m.get("content", "")).startswith(BRANCH_SUMMARY_MARKER)
            ]
            assert projected == live
    finally:
        core.shutdown()


def test_an_edited_last_request_among_repeated_ones_branches(core):
    """The host edits its last request where the requests before it read the same: the edited
    one leaves the branch where the host's list does. (On PostgreSQL a plan that branches is
    refused unlocked and made again under the tree's lock; the live dicts stay known.)"""
    live = [u("ok"), u("ok"), u("ok")]
    core.capture.capture_turn("s", live)
    live = [*live[:2], u("edited"), a("Done.")]
    core.capture.capture_turn("s", live)
    core.sessions.refresh()
    projected = [m["content"] for m in core.sessions.projection("s")]
    assert projected[:2] == ["ok", "ok"] and projected[-2:] == ["edited", "Done."]
    assert len(projected) == 5 and projected[2].startswith(BRANCH_SUMMARY_MARKER)


def test_an_edited_first_request_whose_reply_repeats_is_a_new_branch(core):
    """A different first request with the same reply is a different history, even though the
    reply alone matches the end of the branch (no handoff: the list is the host's own)."""
    core.capture.capture_messages("s", [u("rename it"), a("Done.")])
    core.capture.forget("s")  # a restart: no live dicts to recognise
    assert core.capture.capture_turn("s", [u("delete it"), a("Done.")]) == 2
    assert [m["content"] for m in core.sessions.projection("s")][-2:] == ["delete it", "Done."]


def test_going_back_to_a_reply_left_earlier_returns_to_that_branch(core):
    """Regenerating a reply back to one the branch already held (Done., then Sure., then Done.
    again) returns to the entry the log has, and the session's leaf follows."""
    live = [u("ok"), a("Done.")]
    core.capture.capture_messages("s", live)
    live[-1] = a("Sure.")
    core.capture.capture_messages("s", live)
    live[-1] = a("Done.")
    assert core.capture.capture_turn("s", live) == 0  # the entry is already in the log
    core.sessions.refresh()
    assert [m["content"] for m in core.sessions.projection("s")] == ["ok", "Done."]


_LEAVES = (
    st.text(alphabet=st.sampled_from("a\u00e9\ud800"), max_size=3)
    | st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.tuples(st.integers())
)
_JSONISH = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(alphabet=st.sampled_from("k\ud800"), max_size=2) | st.integers(),
            inner,
            max_size=3,
        )
    ),
    max_leaves=12,
)


def _plain_by_definition(value: object, depth: int = 0) -> bool:
    """json.dumps takes it as it is: str keys, no lone surrogate, finite floats, no tuples."""
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if value is None or isinstance(value, (bool, int)):
        return True
    if isinstance(value, float):
        return value == value and abs(value) != float("inf")
    if depth > 32:
        return False
    if isinstance(value, list):
        return all(_plain_by_definition(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and _plain_by_definition(k) and _plain_by_definition(v, depth + 1)
            for k, v in value.items()
        )
    return False


@given(value=_JSONISH)
def test_plain_json_agrees_with_its_definition(value: object) -> None:
    assert plain_json(value) == _plain_by_definition(value)
    assert plain_json([value]) == _plain_by_definition([value])
    assert plain_json({"k": value}) == _plain_by_definition({"k": value})
