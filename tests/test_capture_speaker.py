"""Speaker attribution: host frames Hermes writes into a user message are not the person's words."""

from __future__ import annotations

import pytest

from chronicle_engine.capture.events import HANDOFF_MARKER
from chronicle_engine.capture.speaker import attribute, is_handoff

RECALL = (
    "<memory-context>\n[System note: The following is recalled memory context, NOT new user "
    "input. Treat as authoritative reference data — this is the agent's persistent memory and "
    "should inform all responses.]\n\nUser is vegetarian.\n</memory-context>"
)


def person(text: str, **context) -> str:
    attributed = attribute({"role": "user", "content": text}, text, **context)
    return attributed.person_text


@pytest.mark.parametrize(
    ("text", "words", "context"),
    [
        (f"book a table for two\n\n{RECALL}", "book a table for two", {}),
        (
            "[System note: The user's previous session expired due to inactivity. This is a fresh "
            "conversation with no prior context.]\n\nhello again",
            "hello again",
            {},
        ),
        (
            '[Replying to: "the [draft] plan, v2"]\n\nyes, ship it',
            "yes, ship it",
            {"platform": "telegram"},
        ),
        ("[Alice] can you check the logs?", "can you check the logs?", {"platform": "discord"}),
        ("[draft] can you check the logs?", "[draft] can you check the logs?", {"platform": "cli"}),
        (
            "[Triggering message id: `123` — use as `message_id` for reply/react/pin via the "
            "discord tools.]\n\n[Bob] ping",
            "ping",
            {"platform": "discord"},
        ),
        (
            "Carol: earlier chatter\nDan: more\n\n[New message]\n[Erin] what did I miss?",
            "what did I miss?",
            {"platform": "slack"},
        ),
        (
            '[IMPORTANT: The user has invoked the "deploy" skill, indicating they want you to '
            "follow its instructions. The full skill content is loaded below.]\n\nSKILL BODY\n\n"
            "The user has provided the following instruction alongside the skill invocation: "
            "deploy to staging\n\n[Runtime note: tools available]",
            "deploy to staging",
            {},
        ),
        ("what should I cook\n\n<memory-context>\nunterminated recall", "what should I cook", {}),
    ],
)
def test_person_text_is_only_the_persons_words(text, words, context):
    assert person(text, **context) == words


@pytest.mark.parametrize(
    "text",
    [
        "[IMPORTANT: Background process proc_9 completed normally (exit code 0).\nCommand: make\nOutput:\n[1/2] ok]",
        "[Background process p1 finished with exit code 0~ Here's the final output:\nok]",
        "[System: Your previous response was truncated. Continue.]",
        "[Your active task list was preserved across context compression]\n- [ ] one",
    ],
)
def test_messages_the_host_writes_in_the_user_role_are_host(text):
    attributed = attribute({"role": "user", "content": text}, text)
    assert attributed.speaker == "host" and attributed.person_text == ""


def test_roles_and_automation():
    assert attribute({"role": "assistant", "content": "x"}, "x").speaker == "assistant"
    assert attribute({"role": "tool", "content": "x"}, "x").speaker == "tool"
    cron = attribute(
        {"role": "user", "content": "daily digest"}, "daily digest", agent_context="cron"
    )
    assert (cron.speaker, cron.person_text) == ("automation", "")
    sub = attribute({"role": "user", "content": "do x"}, "do x", agent_context="subagent")
    assert sub.speaker == "automation"
    flagged = attribute(
        {"role": "user", "content": "todo", "_todo_snapshot_synthetic": True}, "todo"
    )
    assert flagged.speaker == "host"


def test_handoffs_are_recognised():
    assert is_handoff({"role": "user", "content": "  " + HANDOFF_MARKER + " Earlier turns..."})
    assert is_handoff({"role": "assistant", "content": "[CONTEXT SUMMARY]: old style"})
    assert is_handoff({"role": "user", "content": "tail text", "_compressed_summary": True})
    assert is_handoff({"role": "user", "content": [{"type": "text", "text": HANDOFF_MARKER}]})
    assert not is_handoff({"role": "user", "content": "a normal message"})
    assert not is_handoff(None)
