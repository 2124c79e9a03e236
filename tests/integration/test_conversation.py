"""A long conversation through the real Hermes: Chronicle fills both slots, compacts more than
once, hands off, keeps the tail verbatim, prefetches memory, answers its own tool calls, and
brings memory back after restarts.

Every turn is its own `hermes chat -Q -q ... --resume <id>` process, so every turn is a restart.
The assertions read what the stub model received, and Chronicle's database after Hermes exited.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from chronicle_engine.capture import shortened
from chronicle_engine.compaction.handoff import cited, label_of
from chronicle_engine.core import ChronicleCore

from .harness import HermesHome
from .stub_server import Reply, StubModel, ToolCall

FACT = "The deploy key for project Heron is kept at vault path kv/heron/deploy-7731."
FACT_NEEDLE = "kv/heron/deploy-7731"
MARKER = "[CONTEXT COMPACTION — REFERENCE ONLY]"
TURN_LIMIT = 12  # bounded: the test fails rather than chatting on if compaction never fires

# Chronicle compacts above 75% of the 65,536-token window (its floor below a 512K window), down
# to 2 x threshold x target_ratio = 37.5%; turns of ~15k tokens cross it every two or three turns.
COMPRESSION = {"threshold": 0.75, "target_ratio": 0.25, "protect_first_n": 1, "protect_last_n": 4}


def filler(n: int, words: int = 1500) -> str:
    body = " ".join(f"w{n}x{i % 97}" for i in range(words))
    return f"Turn {n} notes (MARKER-{n:02d}): {body}"


def note(n: int, k: int, words: int = 2200) -> str:
    """A long assistant message (about 3.5k tokens), one per tool step, each unique."""
    body = " ".join(f"n{n}s{k}y{i % 89}" for i in range(words))
    return f"Working notes NOTE-{n:02d}-{k} before checking status: {body}"


STEPS = 3  # tool steps per turn: the agent loop runs STEPS + 1 model calls per user turn


def _shape(request: dict[str, Any]) -> str:
    rows = []
    for m in request["messages"]:
        ids = [c["id"] for c in m.get("tool_calls") or []]
        rows.append(f"{m['role']} {m.get('tool_call_id', '')} {ids} {text_of(m)[:60]!r}")
    return "\n".join(rows)


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def handoffs(request: dict[str, Any]) -> list[str]:
    return [text_of(m) for m in request["messages"] if text_of(m).startswith(MARKER)]


def last_user(request: dict[str, Any]) -> str:
    return next(text_of(m) for m in reversed(request["messages"]) if m["role"] == "user")


def make_home(
    tmp_path: Path,
    stub: StubModel,
    source: Path,
    chronicle: dict[str, Any] | None = None,
    **compression: Any,
) -> HermesHome:
    home = HermesHome(
        tmp_path / "h", stub, chronicle=chronicle or {}, compression={**COMPRESSION, **compression}
    )
    home.write_config()
    home.install_plugin(source)
    return home


@pytest.fixture
def chat_home(tmp_path: Path, stub: StubModel, plugin_source: Path) -> HermesHome:
    return make_home(tmp_path, stub, plugin_source)


@dataclass
class Conversation:
    """One long conversation through real Hermes, run once per compaction mode."""

    in_place: bool
    home: HermesHome
    stub: StubModel
    session: str = ""
    turns: int = 0
    sent: dict[int, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    first_tools: set[str] = field(default_factory=set)
    log_after_first_turn: str = ""
    expand_request: dict[str, Any] = field(default_factory=dict)
    prefetch_request: dict[str, Any] = field(default_factory=dict)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.stub.chat_requests()

    @property
    def distinct_handoffs(self) -> list[str]:
        return list(dict.fromkeys(h for r in self.requests for h in handoffs(r)))


def _run_conversation(conv: Conversation) -> None:
    home, stub = conv.home, conv.stub
    stub.script(Reply(text="Noted."))
    session = home.chat(filler(1)).session_id
    conv.log_after_first_turn = home.log_text()
    conv.first_tools = {t["function"]["name"] for t in stub.chat_requests()[0].get("tools", [])}

    # Long turns, each an agent loop of several tool steps, until Chronicle has compacted at
    # least twice (bounded). Each step is a long assistant message plus a Chronicle tool call
    # (chronicle_context_status), which Hermes dispatches to the engine and answers.
    turn = 1
    while turn < TURN_LIMIT:
        turn += 1
        # The fact rides in turn 2: turn 1 is the protected head and never leaves the context.
        conv.sent[turn] = FACT if turn == 2 else filler(turn)
        for k in range(1, STEPS + 1):
            conv.notes[f"NOTE-{turn:02d}-{k}"] = note(turn, k)
            stub.script(
                Reply(text=note(turn, k), tool_calls=(ToolCall("chronicle_context_status", {}),))
            )
        stub.script(Reply(text=f"Read turn {turn}."))
        session = home.chat(conv.sent[turn], resume=session).session_id
        if len(conv.distinct_handoffs) >= 2:
            break
    conv.turns = turn

    # After a restart, the model expands the first section its handoff cites.
    def expand_first_cited(body: dict[str, Any], index: int) -> Reply:
        (handoff,) = handoffs(body)[:1]
        level, section_id, _, _ = cited(handoff)[0]
        # A small page: Hermes swaps any tool result over 100,000 characters for a preview.
        args = {"section_id": label_of(level, section_id), "page_size": 3}
        return Reply(tool_calls=(ToolCall("chronicle_expand", args),))

    stub.script(expand_first_cited, Reply(text="Expanded."))
    before = len(stub.chat_requests())
    session = home.chat("Show me the start of our conversation again.", resume=session).session_id
    conv.expand_request = stub.chat_requests()[before + 1]

    # One more resumed turn asks about the fact from turn 2, long compacted.
    stub.script(Reply(text="It is in the vault."))
    before = len(stub.chat_requests())
    session = home.chat(
        "Remind me: which vault path holds the Heron deploy key?", resume=session
    ).session_id
    conv.prefetch_request = stub.chat_requests()[before]
    conv.session = session


# Hermes 0.19.0 ships `compression.in_place: true` in its default config: a compaction keeps the
# session id. With `in_place: false` it continues under a new id (a lineage). Both must work,
# and the default one again with config.yaml's `chronicle.store` naming PostgreSQL (a schema of
# its own on the session's throwaway server, tests/postgres_support.py).
@pytest.fixture(
    scope="module",
    params=[(True, "sqlite"), (False, "sqlite"), (True, "postgres")],
    ids=["in-place", "rotating", "in-place-postgres"],
)
def conversation(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    plugin_source: Path,
) -> Iterator[Conversation]:
    in_place, store = request.param
    with contextlib.ExitStack() as stack:
        chronicle: dict[str, Any] = {}
        if store == "postgres":
            from postgres_support import own_schema

            cluster = request.getfixturevalue("postgres_cluster")
            chronicle["store"] = stack.enter_context(own_schema(cluster))
        stub = stack.enter_context(StubModel())
        root = tmp_path_factory.mktemp("conversation")
        home = make_home(root, stub, plugin_source, chronicle, in_place=in_place)
        conv = Conversation(in_place=in_place, home=home, stub=stub)
        _run_conversation(conv)
        yield conv
        if store == "postgres":  # the store Hermes wrote was the server's: nothing on disk
            assert not home.db_path.exists()


def test_both_slots_are_chronicle(conversation: Conversation) -> None:
    log = conversation.log_after_first_turn
    assert "Memory provider 'chronicle' activated" in log
    assert "Context engine 'chronicle' not found" not in log
    assert "could not be safely copied" not in log
    assert {"chronicle_search", "chronicle_expand"} <= conversation.first_tools
    assert "falling back to built-in compressor" not in conversation.home.log_text()


def test_chronicle_compacted_more_than_once_and_its_handoffs_reached_the_model(
    conversation: Conversation,
) -> None:
    distinct = conversation.distinct_handoffs
    assert len(distinct) >= 2, (
        f"compaction fired {len(distinct)} times in {conversation.turns} turns"
    )
    core = ChronicleCore.get(conversation.home.location)
    try:
        name = core.sessions.chronicle_name(conversation.session)
        assert len(core.chronicle(name)) >= 1
        for handoff in distinct:
            blocks = cited(handoff)
            assert blocks, f"the handoff cites no section:\n{handoff[:500]}"
            for level, section_id, lo, hi in blocks:
                view = core.compaction.resolve(name, label_of(level, section_id))
                assert view is not None and (view.from_seq, view.to_seq) == (lo, hi)
        lineage = core.sessions.lineage(conversation.session)
    finally:
        core.shutdown()
    if conversation.in_place:
        assert lineage == [conversation.session]  # one id for the whole conversation
    else:
        assert len(lineage) >= 3  # two compactions: three Hermes sessions, one conversation


def test_the_tail_stayed_verbatim(conversation: Conversation) -> None:
    # In every request that follows a compaction, each message after the handoff is the one
    # first sent, unchanged: notes byte for byte, user turns whole (Hermes may add its
    # <memory-context> block around the current one), and no tool result orphaned. When the
    # protected tail alone is over the budget, Chronicle cuts a kept message instead: then it is
    # the original's first words plus a note naming its seq, and the log holds it whole.
    sent, notes = conversation.sent, conversation.notes
    checked = 0
    cut: list[tuple[str, int]] = []
    for request in conversation.requests:
        if not handoffs(request):
            continue
        start = next(i for i, m in enumerate(request["messages"]) if text_of(m).startswith(MARKER))
        kept = request["messages"][start + 1 :]
        assert kept
        # (the handoff itself may carry the tool call whose result follows it)
        call_ids = {c["id"] for m in request["messages"][start:] for c in m.get("tool_calls") or []}
        for m in kept:
            text = text_of(m)
            seq = shortened.origin(m)
            if "shortened by Chronicle" in text:
                assert seq is not None, text[-300:]
                cut.append((shortened.strip_note(text), seq))
                continue
            if m["role"] == "tool":
                assert m["tool_call_id"] in call_ids, _shape(request)
            found = re.match(r"Working notes (NOTE-\d\d-\d)", text)
            if found:
                assert text == notes[found.group(1)]
                checked += 1
            found = re.search(r"\(MARKER-(\d\d)\)", text)
            if found and m["role"] == "user":
                assert sent[int(found.group(1))] in text
    assert checked
    if cut:
        core = ChronicleCore.get(conversation.home.location)
        try:
            for start_text, seq in cut:
                event = core.store.get(seq)
                assert event is not None
                original = text_of(event.payload["message"])
                assert original.startswith(start_text) and len(original) > len(start_text)
                assert original in {*sent.values(), *notes.values()} or any(
                    t in original for t in sent.values()
                )
        finally:
            core.shutdown()


def test_chronicle_tool_calls_were_dispatched_and_answered(conversation: Conversation) -> None:
    results = [m for r in conversation.requests for m in r["messages"] if m["role"] == "tool"]
    status = [json.loads(text_of(m)) for m in results if '"engine": "chronicle"' in text_of(m)]
    assert status and all(s.get("engine") == "chronicle" for s in status)


def test_after_a_restart_expand_returns_the_original_messages(conversation: Conversation) -> None:
    answered = conversation.expand_request
    tool = next(m for m in reversed(answered["messages"]) if m["role"] == "tool")
    result = json.loads(text_of(tool))
    restored = [entry["message"] for entry in result["messages"]]
    assert restored, result
    # Every text the conversation held, as the test sent it or scripted the model to say it.
    originals = {
        filler(1),
        "Noted.",
        *conversation.sent.values(),
        *conversation.notes.values(),
        *(f"Read turn {n}." for n in conversation.sent),
    }
    texts = [text_of(m) for m in restored if m["role"] != "tool" and text_of(m)]
    assert texts and all(t in originals for t in texts), [t[:80] for t in texts]


def test_memory_was_prefetched_into_a_later_turn(conversation: Conversation) -> None:
    prompt = last_user(conversation.prefetch_request)
    block = re.search(r"<memory-context>(.*?)</memory-context>", prompt, re.DOTALL)
    assert block and FACT_NEEDLE in block.group(1)


def test_the_session_tree_records_the_compactions(conversation: Conversation) -> None:
    core = ChronicleCore.get(conversation.home.location)
    try:
        kinds = [e.kind for e in core.sessions.path(conversation.session)]
    finally:
        core.shutdown()
    assert "compaction" in kinds
    assert "branch_summary" not in kinds  # the conversation never branched


def test_memory_from_an_earlier_session_comes_back(chat_home: HermesHome, stub: StubModel) -> None:
    home = chat_home
    stub.script(Reply(text="Noted."))
    first = home.chat(FACT).session_id
    # A new conversation in a new process, then resumed in another: the earlier session's
    # memory is prefetched into the resumed turn.
    stub.script(Reply(text="Hello."))
    second = home.chat("Hello again, new topic today.").session_id
    assert second != first
    stub.script(Reply(text="Yes."))
    before = len(stub.chat_requests())
    home.chat("What do you remember about the Heron deploy key vault path?", resume=second)
    prompt = last_user(stub.chat_requests()[before])
    block = re.search(r"<memory-context>(.*?)</memory-context>", prompt, re.DOTALL)
    assert block and FACT_NEEDLE in block.group(1)


def test_first_turn_of_a_new_session_gets_earlier_memory(
    chat_home: HermesHome, stub: StubModel
) -> None:
    home = chat_home
    stub.script(Reply(text="Noted."))
    home.chat(FACT)
    stub.script(Reply(text="Yes."))
    before = len(stub.chat_requests())
    home.chat("What do you remember about the Heron deploy key vault path?")
    prompt = last_user(stub.chat_requests()[before])
    block = re.search(r"<memory-context>(.*?)</memory-context>", prompt, re.DOTALL)
    assert block and FACT_NEEDLE in block.group(1)


def test_memory_tool_call_is_dispatched_and_answered(
    chat_home: HermesHome, stub: StubModel
) -> None:
    home = chat_home
    stub.script(Reply(text="Noted."))
    first = home.chat(FACT).session_id
    stub.script(
        Reply(tool_calls=(ToolCall("chronicle_search", {"query": "Heron deploy key"}),)),
        Reply(text="ok"),
    )
    before = len(stub.chat_requests())
    home.chat("Search your memory for the Heron deploy key.", resume=first)
    results = [m for m in stub.chat_requests()[before + 1]["messages"] if m["role"] == "tool"]
    assert results and FACT_NEEDLE in text_of(results[-1])


def test_hermes_chronicle_shows_what_the_conversation_recorded(conversation: Conversation) -> None:
    home = conversation.home
    status = home.hermes("chronicle", "status", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["events"] > 0 and data["chronicles"]
    listing = home.hermes("chronicle", "sections", "--session", conversation.session, "--json")
    assert listing.returncode == 0, listing.stderr
    (sections,) = json.loads(listing.stdout).values()
    assert sections and all(s["from_seq"] <= s["to_seq"] for s in sections)
    tree = home.hermes("chronicle", "tree", "--session", conversation.session, "--json")
    assert tree.returncode == 0, tree.stderr
    (lineage,) = json.loads(tree.stdout)["lineages"]
    assert lineage["sessions"][-1]["session"] == conversation.session
