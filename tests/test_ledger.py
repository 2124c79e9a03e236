"""The ledger of each pass: what it folded, and what its prose kept and left out, by entity and by
message; recorded with the pass, read through the status tool and `chronicle ledger`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_compaction_engine import Host, core, small_policy, turn  # noqa: F401 - fixture

from chronicle_engine.chronicle.extractive import STRIP, _candidate_words, _take, facts_in
from chronicle_engine.cli import Exit, main
from chronicle_engine.compaction.ledger import _pieces, _quoted, _words
from chronicle_engine.compaction.tools import CONTEXT_TOOLS
from chronicle_engine.core import ChronicleCore
from chronicle_engine.tools import dispatch


def _run(store: ChronicleCore, turns: int = 120) -> Host:
    host = Host(store, small_policy())
    for n in range(turns):
        host.add(*turn(n, size=300))
        if host.due():
            host.compress()
    return host


def _seqs(runs: list[list[int]]) -> int:
    return sum(hi - lo + 1 for lo, hi in runs)


def test_each_pass_records_a_ledger_whose_lists_add_up(core: ChronicleCore) -> None:  # noqa: F811
    host = _run(core)
    passes = core.compaction.lineage_state(host.session).passes
    ledgers = core.compaction.ledgers(host.session)
    assert len(passes) >= 2 and len(ledgers) == len(passes)
    for record, entry in zip(passes, ledgers, strict=True):
        assert entry["seq"] == record.seq + 1  # written with the pass, right after its record
        assert entry["entities"] == (
            entry["entities_in_handoff"]
            + entry["entities_in_sections"]
            + entry["entities_left_out"]
        )
        assert entry["folded_messages"] == entry["messages_kept"] + _seqs(
            entry["messages_left_out"]
        )
        assert entry["folded_messages"] > 0 and entry["entities"] > 0
    # What the ledger says matches the prose: an entity in the handoff is named there, and one
    # it calls left out is named in neither the handoff nor the sections the pass wrote.
    last = core.compaction.lineage_state(host.session).passes[-1].event
    handoff = host.handoffs[-1].lower()
    assert all(e.lower() in handoff for e in ledgers[-1]["in_handoff"])
    prose = "\n".join(
        (core.compaction.expand(host.session, section_id=label).get("prose") or "")
        for label in last.written
    ).lower()
    # Named means named as a word: "51" is not named by "151" or "ops-51".
    words = {w.strip(STRIP) for w in (handoff + "\n" + prose).split()}
    assert ledgers[-1]["left_out"]
    assert all(e.lower() not in words for e in ledgers[-1]["left_out"])
    # A ticket of the folded range the handoff names is listed as in the handoff.
    named = [e for e in ledgers[-1]["in_handoff"] if e.startswith("OPS-")]
    assert named


def test_the_status_tool_and_the_command_line_read_the_ledger(
    core: ChronicleCore,  # noqa: F811
    tmp_path: Path,
    capsys: Any,
) -> None:
    host = _run(core, turns=60)
    status = json.loads(
        dispatch(
            CONTEXT_TOOLS,
            core.compaction,
            "chronicle_context_status",
            {},
            session_id=host.session,
        )
    )
    ledger = status["ledger"]
    assert ledger["passes"] == status["passes"] >= 1
    assert ledger["folded_messages"] == sum(
        e["folded_messages"] for e in core.compaction.ledgers(host.session)
    )
    assert set(ledger["last_pass"]) >= {"left_out", "in_handoff", "messages_left_out"}
    if str(core.db_path) == ":memory:":
        return  # the command line opens a database file
    # (PostgreSQL: the command line finds the store in the Hermes home's config.yaml)
    where = ["--hermes-home", str(core.config.hermes_home)] if core.postgres else []
    where = where or ["--db", str(core.db_path)]
    code = main(["ledger", "--session", host.session, *where, "--json"])
    assert code == Exit.OK
    out = json.loads(capsys.readouterr().out)
    assert len(out["passes"]) == ledger["passes"]
    assert main(["ledger", "--session", host.session, *where]) == Exit.OK
    assert "messages folded" in capsys.readouterr().out


def test_forgetting_a_message_withdraws_the_words_of_its_ledgers(core: ChronicleCore) -> None:  # noqa: F811
    from chronicle_engine.compaction.events import NAMESPACE
    from chronicle_engine.compaction.ledger import LEDGER_WORDS
    from chronicle_engine.sessions import redact

    assert redact._LEDGER == (NAMESPACE, "PassLedger") and redact._LEDGER_WORDS == LEDGER_WORDS
    host = _run(core, turns=60)
    first = core.compaction.ledgers(host.session)[0]
    assert first["in_handoff"]
    target = first["from_seq"] + 4
    core.recall.forget(f"m{target}", include_source=True, session_id=host.session)
    after = core.compaction.ledgers(host.session)[0]
    # (a reader is not shown `own`, the text the pass recorded for counting)
    assert all(after[k] == [] for k in LEDGER_WORDS if k != "own") and "own" not in after
    assert after["entities"] == first["entities"]  # the counts stay
    # An export blanks the words of both events of the pass's ledger: its record and its count.
    forgotten = redact.Forgotten.read(core.store, [target])
    stored = core.store.get(first["seq"])
    assert stored is not None and stored.payload["counted"] is False
    (count,) = [
        e for e in core.store.read(namespaces=[NAMESPACE]) if e.payload.get("of") == first["seq"]
    ]
    assert count.payload["in_handoff"] == first["in_handoff"]
    for event in (stored, count):
        exported = redact.redact(event, forgotten)
        assert all(exported.payload[k] == [] for k in LEDGER_WORDS)


_TEXT = st.text(alphabet=st.sampled_from("ab c\n.\u00e9"), max_size=60)


@given(text=_TEXT, start=st.integers(0, 60), length=st.integers(0, 60), other=_TEXT)
def test_an_opening_is_found_quoted_exactly_where_a_substring_search_finds_it(
    text: str, start: int, length: int, other: str
) -> None:
    # An opening as the ledger forms it (whitespace-normalised), from this text or another.
    for source in (text, other):
        opening = " ".join(source[start : start + length].split())
        lowered = text.lower()
        assert _quoted(opening, lowered, _pieces(lowered)) == (opening in lowered)


@given(st.text(alphabet=st.sampled_from("aΣσς.'\" \n!İ"), max_size=40))
def test_the_words_of_a_text_are_its_words_each_stripped_and_lower_cased(text: str) -> None:
    assert _words(text) == {w.strip(STRIP).lower() for w in text.split()}


@given(
    st.text(alphabet=st.sampled_from("ab Ab9/@_.,()\n\t\r\x0b\x1fXY«masked:»"), max_size=60),
    st.integers(1, 12),
)
def test_the_facts_of_an_ascii_text_are_the_words_the_pattern_finds(text: str, limit: int) -> None:
    # facts_in reads an ASCII text through its byte marks; the regex path (every other text)
    # is the definition, and both find the same words in the same order.
    ascii_text = text.encode("ascii", "ignore").decode()
    expected: list[str] = []
    for start, end in _candidate_words(ascii_text):
        if _take(ascii_text[start:end], expected) and len(expected) >= limit:
            break
    assert facts_in(ascii_text, limit) == expected


def test_a_ledger_counted_from_the_log_is_the_one_the_pass_held(tmp_path: Path) -> None:
    # The pass records its ledger cheaply and counts it on the first read: in the process that
    # ran it from what the pass held, in any other from the log. Both read the same text, the
    # folded messages the log holds otherwise included (recorded with the pass: a lone
    # surrogate, content that is not plain JSON, a context edit's copy).
    from chronicle_engine.compaction.ledger import ledger_of

    path = tmp_path / "chronicle.db"
    core = ChronicleCore(path)  # noqa: F811 - a file of its own (another core opens it)
    try:
        host = Host(core, small_policy())
        for n in range(120):
            host.add(*turn(n, size=300))
            if n == 3:
                host.add({"role": "user", "content": f"ticket OPS-{n}9 \ud800 broke db-7"})
                host.add({"role": "user", "content": [{"type": "text", "text": "see OPS-77"}]})
                host.add({"role": "user", "content": 12.5})
            if n == 5:
                seq = core.capture.capture_messages(host.session, host.messages)[-1]
                assert seq is not None
                edited = core.compaction.edit_context(host.session, seq, "now OPS-555 instead")
                host.messages[-1] = edited
            if host.due():
                host.compress()
        compaction = core.compaction
        compaction.lineage_state(host.session)  # (reads the log: the book sees the records)
        book = compaction.ledgers_book
        pending = book.pending()
        assert len(pending) >= 2 and all(book.inputs(d.seq) is not None for d in pending)
        own = {seq for d in pending for seq, _ in d.event.own}
        assert len(own) == 3  # the surrogate, the float, the edited copy, and nothing else
        held = {d.seq: book.inputs(d.seq) for d in pending}
        for d in pending:
            assert book.logged(d) == held[d.seq]
        # Another process counts them from the log, and records the counts.
        other = ChronicleCore(path)
        try:
            counted = other.compaction.ledgers(host.session)
        finally:
            other.shutdown()
        assert [c["seq"] for c in counted] == [d.seq for d in pending]
        for c, d in zip(counted, pending, strict=True):
            i = held[d.seq]
            assert i is not None
            want = ledger_of(d.event.chronicle, i.folded, handoff=i.handoff, prose=i.prose)
            recorded = ("of", "own", "folded", "sections")  # (not shown to a reader)
            assert c == {
                "seq": d.seq,
                "session": d.envelope.session,
                **want.model_dump(exclude=set(recorded)),
            }
            assert c["counted"] and c["entities"] > 0
        # This process sees those counts and counts nothing again.
        assert compaction.count_ledgers() == 0
        assert compaction.ledgers(host.session) == counted
    finally:
        core.shutdown()


def test_a_forget_counts_the_ledgers_before_it_redraws_their_prose(core: ChronicleCore) -> None:  # noqa: F811
    host = _run(core, turns=60)
    core.compaction.lineage_state(host.session)
    book = core.compaction.ledgers_book
    pending = book.pending()
    assert pending
    first = pending[0].seq
    target = pending[0].event.from_seq + 4
    core.recall.forget(f"m{target}", include_source=True, session_id=host.session)
    # counted before the redraw purged the prose it read: the inputs the pass held were used
    assert not book.pending() and book.inputs(first) is None
    ledger = core.compaction.ledgers(host.session)[0]
    assert ledger["seq"] == first and ledger["counted"] and ledger["entities"] > 0


_CONTENT = (
    st.text(alphabet=st.sampled_from("ab ]\n\ud800\u00e9"), max_size=8)
    | st.builds(lambda n: "x" * n, st.integers(1590, 1610))
    | st.sampled_from(
        [
            "",
            " lead",
            "[CONTEXT COMPACTION] earlier turns",
            "cut\\n[… shortened by Chronicle to fit the context: 9 characters left out; "
            "chronicle_expand(from_seq=3, to_seq=3) returns the original]",
        ]
    )
    | st.none()
    | st.floats(allow_nan=True)
    | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=4)}))
)


@settings(deadline=None)  # (a busy machine is not a failure)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"content": _CONTENT},
            optional={"role": st.sampled_from(["user", "tool", "assistant"]) | st.integers()},
        )
        | st.integers(),
        max_size=8,
    ),
    st.lists(st.integers(0, 7), max_size=8),
)
def test_what_a_pass_records_of_its_folded_messages_is_what_each_message_says(
    messages: list[Any], fold: list[int]
) -> None:
    # `folded_of` checks the common message inline; `held` is the definition for every one.
    from chronicle_engine.compaction.ledger import folded_of, held
    from chronicle_engine.messages import handoff_kind

    fold = [i for i in fold if i < len(messages)]
    seqs = [None if i == 2 else i + 10 for i in range(len(messages))]
    folded, own = folded_of(messages, seqs, fold)
    want = [(seqs[i], held(messages[i])) for i in fold]
    want = [
        (s, h)
        for (s, h), i in zip(want, fold, strict=True)
        if s is not None and not handoff_kind(messages[i])
    ]
    assert folded == [(s, text) for s, (text, _) in want]
    assert own == [(s, json.dumps(text)) for s, (text, differs) in want if differs]


def test_a_ledger_never_lists_a_credential_of_the_messages_it_folded(
    core: ChronicleCore,  # noqa: F811
    capsys: Any,
) -> None:
    # Each request carries a credential beside its ticket; the writers read masked views, so the
    # ledger (read through the status tool, the engine and the command line) must too.
    keys = [f"sk-proj-{n:04d}AbCdEf0123456789AbCdEf0123456789xyz" for n in range(60)]
    host = Host(core, small_policy())
    for n in range(60):
        host.add(*turn(n, size=300, instruction=f"ticket OPS-{n}: use key {keys[n]} on db-{n}"))
        if host.due():
            host.compress()
    status = dispatch(
        CONTEXT_TOOLS, core.compaction, "chronicle_context_status", {}, session_id=host.session
    )
    ledgers = core.compaction.ledgers(host.session)
    assert json.loads(status)["ledger"]["passes"] == len(ledgers) >= 1
    listed = {
        e for entry in ledgers for k in ("in_handoff", "in_sections", "left_out") for e in entry[k]
    }
    assert any(e.startswith("OPS-") for e in listed)  # the tickets are still counted and listed
    shown = status + json.dumps(ledgers)
    if str(core.db_path) != ":memory:":
        where = ["--hermes-home", str(core.config.hermes_home)] if core.postgres else []
        assert (
            main(
                [
                    "ledger",
                    "--session",
                    host.session,
                    *(where or ["--db", str(core.db_path)]),
                    "--json",
                ]
            )
            == Exit.OK
        )
        shown += capsys.readouterr().out
    folded = sum(entry["folded_messages"] for entry in ledgers)
    assert folded > 0
    assert not [key for key in keys if key in shown or key[:20] in shown]


def test_a_read_counts_its_own_conversation_and_each_ledger_once(core: ChronicleCore) -> None:  # noqa: F811
    # A status read counts the ledgers of the conversation it reads, not every conversation's;
    # a ledger counted and not read back yet is not counted again (one count per ledger).
    from chronicle_engine.compaction.events import NAMESPACE, PassLedger

    hosts = [Host(core, small_policy(), session=name) for name in ("a", "b")]
    for n in range(60):
        for host in hosts:
            host.add(*turn(n, size=300))
            if host.due():
                host.compress()
    compaction = core.compaction
    for session in ("a", "b"):  # (reads each one's events: the book sees the records)
        compaction.lineage_state(session)
    book = compaction.ledgers_book
    assert book.pending(["a"]) and book.pending(["b"])

    def counts() -> list[tuple[str, int]]:
        found = []
        for event in core.store.read(namespaces=[NAMESPACE]):
            decoded = core.reader.decode(event)
            if isinstance(decoded, PassLedger) and decoded.of:
                found.append((event.envelope.session or "", decoded.of))
        return found

    dispatch(CONTEXT_TOOLS, compaction, "chronicle_context_status", {}, session_id="a")
    assert {session for session, _ in counts()} == {"a"}
    assert not book.pending(["a"]) and book.pending(["b"])
    # Two counts in a row, the first one's events not read back in between: one count each.
    b_ledgers = len(book.pending(["b"]))
    assert book.count(["b"]) == b_ledgers and book.count(["b"]) == 0
    found = counts()
    assert len(found) == len(set(found)) and sum(s == "b" for s, _ in found) == b_ledgers


def test_a_count_an_older_build_recorded_unmasked_shows_no_credential(core: ChronicleCore) -> None:  # noqa: F811
    # Builds before the ledger read messages masked recorded counts listing credentials as
    # entities; the log keeps them, and every read leaves those words out.
    host = _run(core, turns=60)
    compaction = core.compaction
    compaction.lineage_state(host.session)  # (reads the log: the book sees the records)
    (first, *_) = compaction.ledgers_book.pending()
    key = "sk-proj-0042AbCdEf0123456789AbCdEf0123456789xyz"
    older = first.event.model_copy(
        update={"of": first.seq, "counted": True, "left_out": [key, "OPS-1"], "in_handoff": [key]}
    )
    core.store.append([core.types.pending(older, session=first.envelope.session)])
    shown = json.dumps(compaction.ledgers(host.session)) + dispatch(
        CONTEXT_TOOLS, compaction, "chronicle_context_status", {}, session_id=host.session
    )
    assert key not in shown and key[:20] not in shown
    (entry,) = [e for e in compaction.ledgers(host.session) if e["seq"] == first.seq]
    assert entry["left_out"] == ["OPS-1"] and entry["in_handoff"] == []
