"""A NUL byte in what Hermes hands over (a role, a name, the text, a session id, a tool call) is
stored on every store: the turn is captured, the log reads it back as sent, and search finds it.
PostgreSQL's text cannot hold the byte: there a text column keeps U+FFFD in its place
(log/pg_text.py), the same in every statement, while the log's payload keeps the exact text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chronicle_engine.log.pg_text import NUL_AS, storable
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
    kept = storable if store_core.postgres else str
    assert {e.envelope.session for e in events} == {kept(session)}
    # a second capture of the same list (the next hook call) finds every message stored
    assert store_core.capture.capture_turn(session, LIVE) == 0
    hits = store_core.recall.search("vault code ruby", limit=5)
    assert hits and hits[0]["text"] == kept(str(LIVE[0]["content"])), hits


@given(st.text(alphabet=st.sampled_from(["a", "0", "\x00", NUL_AS, "é"])))
def test_what_postgresql_keeps_holds_no_nul_and_keeps_itself(text: str) -> None:
    kept = storable(text)
    assert "\x00" not in kept
    assert storable(kept) == kept
    assert kept == text.replace("\x00", NUL_AS)


def test_an_event_is_found_by_the_session_it_was_stored_under(target) -> None:
    store = target.open()
    sessions = ("a\x00", "a\x00b", "a", "a\x00\x00")
    store.append([PendingEvent("test", "Thing", 1, {"s": s}, session=s) for s in sessions])
    for s in sessions:
        assert [e.payload["s"] for e in store.read(session=s)] == [s]
    store.close()
