"""Context edits reach the agent and the command line: `chronicle_edit_context` hides or replaces
a message in the live list the host sends (in place) and records the edit in the session tree,
so the tree's projection stays the host's list and capture takes the edited copy for the
message it stands for (nothing is stored again, nothing branches); `chronicle edit-context`
records the same edit for a session from outside the agent. The log keeps every original."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_compaction_support import wire
from test_context_engine import chat, core, engine, home  # noqa: F401 - fixtures

from chronicle_engine.cli import Exit, main
from chronicle_engine.core import ChronicleCore


def _keys(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(wire(m), sort_keys=True) for m in messages]


def _call(slot: Any, messages: list[dict[str, Any]], **args: Any) -> dict[str, Any]:
    return json.loads(slot.handle_tool_call("chronicle_edit_context", args, messages=messages))


def test_the_agent_hides_and_replaces_messages_it_holds(engine: Any, core: ChronicleCore) -> None:  # noqa: F811
    messages = chat(6)
    engine.on_session_end("a1", messages)  # captured as the host would have it
    seqs = core.capture.capture_messages("a1", messages)
    stored = core.store.count()
    result_index = 2  # turn 0's tool result
    original = dict(messages[result_index])
    held = messages[result_index]
    hidden = _call(engine, messages, seq=seqs[result_index], hide=True)
    assert hidden["edited"] == seqs[result_index] and hidden["hidden"] is True
    assert messages[result_index] is held  # the host's own dict, edited in place
    assert original["content"] not in held["content"]
    assert held["tool_call_id"] == original["tool_call_id"]  # the call keeps its result
    replaced = _call(
        engine, messages, text="ticket OPS-1 is handled", replacement="Answer 1 was superseded."
    )
    assert replaced["hidden"] is False
    edited = next(m for m in messages if "superseded" in str(m.get("content")))
    assert edited["content"].startswith("Answer 1 was superseded.")

    # The host's next turn: nothing is stored again, nothing branches, and the projection is
    # the list the host sends.
    before = core.store.count()
    assert before > stored  # the two edits
    messages += [{"role": "user", "content": "next"}, {"role": "assistant", "content": "ok"}]
    assert core.capture.capture_turn("a1", messages) == 2
    core.capture.forget("a1")  # and after a restart, from fresh dicts
    assert core.capture.capture_turn("a1", json.loads(json.dumps(messages))) == 0
    assert _keys(core.sessions.projection("a1", branch_summaries=False)) == _keys(messages)
    # The log keeps the original: expand returns it.
    back = core.compaction.expand("a1", from_seq=seqs[result_index], to_seq=seqs[result_index])
    assert back["messages"][0]["message"] == wire(original)


def test_a_compaction_keeps_an_edited_message_as_the_context_holds_it(
    engine: Any,  # noqa: F811
    core: ChronicleCore,  # noqa: F811
) -> None:
    messages = chat(40)
    seqs = core.capture.capture_messages("a1", messages)
    index = len(messages) - 3  # in the protected tail
    _call(engine, messages, seq=seqs[index], replacement="(stale output removed)")
    out = engine.compress(messages)
    assert any("(stale output removed)" in str(m.get("content")) for m in out)
    projected = core.sessions.projection("a1", branch_summaries=False)
    assert sum("(stale output removed)" in str(m.get("content")) for m in projected) == 1


def test_what_the_agent_cannot_edit_is_refused_in_words(engine: Any, core: ChronicleCore) -> None:  # noqa: F811
    messages = chat(4)
    core.capture.capture_messages("a1", messages)
    for args, said in (
        ({"seq": 1, "replacement": ""}, "give the replacement words"),
        ({"seq": 10**9, "hide": True}, "is not in the current context"),
        ({"hide": True}, "give seq"),
        ({"text": "no such words anywhere", "hide": True}, "contains"),
        ({"text": "ticket OPS-3 is handled", "hide": True}, "latest message"),
    ):
        assert said in _call(engine, messages, **args)["error"]


def test_the_command_line_edits_a_sessions_context(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "c.db"
    first = ChronicleCore.get(db)
    messages = chat(3)
    seqs = first.capture.capture_messages("s1", messages)
    first.shutdown()
    code = main(
        ["edit-context", str(seqs[2]), "--session", "s1", "--hide", "--db", str(db), "--json"]
    )
    assert code == Exit.OK
    out = json.loads(capsys.readouterr().out)
    assert out["edited"] == seqs[2] and out["hidden"] is True
    code = main(
        ["edit-context", str(seqs[3]), "--session", "latest", "--replace", "short", "--db", str(db)]
    )
    assert code == Exit.OK
    assert "replaced" in capsys.readouterr().out
    assert (
        main(["edit-context", "999999", "--session", "s1", "--hide", "--db", str(db)])
        == Exit.NOT_FOUND
    )
    again = ChronicleCore.get(db)
    try:
        projected = again.sessions.projection("s1")
        assert messages[2]["content"] not in [m.get("content") for m in projected]
        assert projected[3]["content"].startswith("short")
        assert len(projected) == len(messages)
    finally:
        again.shutdown()
