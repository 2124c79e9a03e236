"""The events capture writes. The message is kept exactly as it went over the wire.

`MessageCaptured.message` is the OpenAI-style message dict as Hermes held it (role, content as a
string or a list of parts, tool_calls with their arguments, tool_call_id, name), minus the host's
private markers (keys starting with "_"), so `json.dumps(message)` restores it byte for byte.
Everything derived for reading (the masked text, the person's own words) sits beside it, never in
place of it.
"""

from __future__ import annotations

from typing import Any, Literal

from ..log.events import DomainEvent, EventTypeRegistry

__all__ = [
    "NAMESPACE",
    "HANDOFF_MARKER",
    "Speaker",
    "MessageCaptured",
    "register_capture_events",
    "message_text",
]

NAMESPACE = "chronicle.chat"

HANDOFF_MARKER = "[CONTEXT COMPACTION — REFERENCE ONLY]"
"""The first line of every handoff message the context engine writes. Capture never records a
message that starts with it as conversation: it is derived from the log, not part of it."""

Speaker = Literal["person", "assistant", "tool", "host", "automation"]


class MessageCaptured(DomainEvent, frozen=True):
    """One message of a conversation, as sent or received."""

    role: str
    message: dict[str, Any]
    fingerprint: str  # identity of the message within its conversation (idempotent capture)
    speaker: Speaker  # who wrote the message as a whole
    text: str = ""  # searchable text: content + tool calls, credentials masked
    person_text: str = ""  # only the person's own words (host frames removed), masked
    host_spans: list[tuple[int, int]] = []  # char ranges of `text` that are host text
    turn: int | None = None
    user_id: str | None = None
    profile: str | None = None
    agent_context: str = "primary"
    tool_name: str | None = None
    tool_call_ids: list[str] = []


def register_capture_events(types: EventTypeRegistry) -> None:
    types.register(NAMESPACE, "MessageCaptured", MessageCaptured)


def message_text(message: dict[str, Any]) -> str:
    """The readable text of a wire message: its content (every text part) and its tool calls."""
    content = message.get("content")
    pieces: list[str] = []
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    pieces.append(text)
            elif isinstance(part, str):
                pieces.append(part)
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            fn = call.get("function") or {}
            name = fn.get("name", "") if isinstance(fn, dict) else ""
            args = fn.get("arguments", "") if isinstance(fn, dict) else ""
            pieces.append(f"{name}({args if isinstance(args, str) else str(args)})")
    return "\n".join(p for p in pieces if p)
