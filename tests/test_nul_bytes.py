"""A NUL byte in what Hermes hands over (a role, a name, the text, a session id, a tool call) is
stored on every store: the turn is captured, the log reads it back as sent, and search finds it.
PostgreSQL's text cannot hold the byte: there a text column keeps it escaped (log/pg_text.py),
the same in every statement, and every column reads back as sent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chronicle_engine.log.pg_text import ESCAPE, readable, storable
from chronicle_engine.log.store import PendingEvent

LIVE = [
    {"role": "user", "content": "the vault code is 4\x0012 for ruby\x00"},
    {"role": "assis\x00tant", "content": "noted: vault\x00 code", "name": "bo\x00t"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c\x001",
                "type": "function",
                "function": {"name": "look\x00up", "arguments": '{"q": "a\\u0000b"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c\x001", "content": "found\x00 it"},
]


def test_a_turn_holding_nul_bytes_is_captured_and_read_back_as_sent(store_core) -> None:
    session = "s\x00one"
    assert store_core.capture.capture_turn(session, LIVE) == len(LIVE)
    assert store_core.sessions.projection(session) == LIVE
    events = [
        e for e in store_core.store.read(session=session) if e.envelope.type == "MessageCaptured"
    ]
    assert [e.payload["message"] for e in events] == LIVE
    assert {e.envelope.session for e in events} == {session}
    # a second capture of the same list (the next hook call) finds every message stored
    assert store_core.capture.capture_turn(session, LIVE) == 0
    hits = store_core.recall.search("vault code ruby", limit=5)
    assert hits and hits[0]["text"] == LIVE[0]["content"], hits


TRICKY = ["a", "0", "1", "\x00", ESCAPE, "\ufffd", "é"]


@given(st.text(alphabet=st.sampled_from(TRICKY)), st.text(alphabet=st.sampled_from(TRICKY)))
def test_what_postgresql_keeps_holds_no_nul_and_tells_every_text_apart(a: str, b: str) -> None:
    kept = storable(a)
    assert "\x00" not in kept
    assert readable(kept) == a
    assert (storable(a) == storable(b)) == (a == b)
    if "\x00" not in a and ESCAPE not in a:
        assert kept == a  # plain text, and the rows and indexes holding it, stay as they were


def test_text_holding_nul_the_escape_and_the_replacement_character_reads_back_exactly(
    target,
) -> None:
    """Through every text column of the log: the session, the type, the id, the payload."""
    store = target.open()
    texts = ["bob\x00", "bob\ufffd", f"bob{ESCAPE}", f"bob{ESCAPE}0", f"bob{ESCAPE}1", "bob"]
    texts += ["\x00\ufffd" + ESCAPE + "0\x00" + ESCAPE + ESCAPE + "1", ESCAPE, "\x00"]
    stored = store.append(
        [PendingEvent("test", f"T{t}", 1, {"t": t}, id=f"id{t}", session=t) for t in texts]
    )
    assert [e.envelope.session for e in stored] == texts
    for t, e in zip(texts, stored, strict=True):
        (got,) = store.read(session=t)
        assert got.envelope.session == t and got.payload == {"t": t}
        assert got.envelope.type == f"T{t}" and got.envelope.id == f"id{t}"
        assert store.get_by_id(f"id{t}") == got == store.get(e.envelope.seq)
    store.close()


def test_an_event_is_found_by_the_session_it_was_stored_under(target) -> None:
    store = target.open()
    sessions = ("a\x00", "a\x00b", "a", "a\x00\x00")
    store.append([PendingEvent("test", "Thing", 1, {"s": s}, session=s) for s in sessions])
    for s in sessions:
        assert [e.payload["s"] for e in store.read(session=s)] == [s]
    store.close()
