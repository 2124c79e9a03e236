"""Capture and compaction agree on which user messages are the person's request.

Compaction keeps the person's latest request and standing instructions in view; capture records who
wrote each message. Both read the same speaker rules, so the table below must hold for both.
"""

from __future__ import annotations

from typing import Any

import pytest

from chronicle_engine.capture.events import HANDOFF_MARKER, message_text
from chronicle_engine.capture.speaker import attribute, is_person_request
from chronicle_engine.messages import is_real_user

HOST: list[dict[str, Any]] = [
    {"role": "user", "content": "[System: Your previous response was truncated by the output cap]"},
    {"role": "user", "content": "[System note: The user's session was reset.]"},
    {"role": "user", "content": "[IMPORTANT: Background process 42 finished with exit code 0]"},
    {"role": "user", "content": "[Background process 42 exited: 3 lines of output]"},
    {"role": "user", "content": "[Your active task list was preserved across compaction: ...]"},
    {"role": "user", "content": f"{HANDOFF_MARKER}\nEarlier turns were summarised."},
    {"role": "user", "content": "[CONTEXT SUMMARY]: what happened before"},
    {"role": "user", "content": "go on", "_compressed_summary": True},
    {
        "role": "user",
        "content": "[PRIOR CONTEXT — for reference only; not a new message]\nold words\n\n"
        "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]\n\nthe summary",
    },
    {"role": "user", "content": "keep going", "_todo_snapshot_synthetic": True},
    {"role": "user", "content": "try again", "_empty_recovery_synthetic": True},
    {"role": "user", "content": "<memory-context>\nUser likes tea.\n</memory-context>"},
    {"role": "user", "content": ""},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]},
    {"role": "assistant", "content": "book a table for two"},
    {"role": "tool", "tool_call_id": "c1", "content": "book a table for two"},
    {"role": "system", "content": "You are Hermes."},
]

PERSON: list[dict[str, Any]] = [
    {"role": "user", "content": "book a table for two"},
    {"role": "user", "content": [{"type": "text", "text": "what is in this picture?"}]},
    {
        "role": "user",
        "content": "[System note: The previous turn was interrupted by a restart.]\n\n"
        "did the deploy finish?",
    },
    {"role": "user", "content": "never push to main\n\n<memory-context>\nold\n</memory-context>"},
    {"role": "user", "content": "[draft] please tidy the README"},
    {
        "role": "user",
        "content": '[IMPORTANT: The user has invoked the "review" skill. The full skill '
        "content is loaded below.]\n\nThe user has provided the following instruction "
        "alongside the skill invocation: check the parser",
    },
]


@pytest.mark.parametrize("message", HOST + PERSON)
def test_capture_and_compaction_agree(message: dict[str, Any]) -> None:
    request = message in PERSON
    captured = attribute(message, message_text(message)).speaker == "person"
    assert captured is request
    assert is_person_request(message) is request
    assert is_real_user(message) is request


@pytest.mark.parametrize("bad", [None, "text", 3, ["a"], {"content": "no role"}])
def test_malformed_message_is_no_request(bad: Any) -> None:
    assert not is_person_request(bad)
    assert not is_real_user(bad)
