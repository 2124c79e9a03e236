"""The events capture writes. The message is kept exactly as it went over the wire.

`MessageCaptured.message` is the OpenAI-style message dict as Hermes held it (role, content as a
string or a list of parts, tool_calls with their arguments, tool_call_id, name), minus the host's
private markers (keys starting with "_"), so `json.dumps(message)` restores it byte for byte.
Everything derived for reading (the masked text, the person's own words) sits beside it, never in
place of it.
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
from collections.abc import Iterator, Mapping
from typing import Literal

from ..log.events import DomainEvent, EventTypeRegistry
from ..log.store import register_payload_template

__all__ = [
    "NAMESPACE",
    "HOST_NAMESPACE",
    "TurnStarted",
    "SessionEnded",
    "MemoryWritten",
    "DelegationObserved",
    "CompressionAhead",
    "HANDOFF_MARKER",
    "HANDOFF_OPENING",
    "Speaker",
    "MessageCaptured",
    "MESSAGE_FIELDS",
    "MESSAGE_DEFAULTS",
    "register_capture_events",
    "message_text",
    "text_parts",
]

NAMESPACE = "chronicle.chat"
HOST_NAMESPACE = "chronicle.host"  # what the host told the memory slot, beside the messages

HANDOFF_MARKER = "[CONTEXT COMPACTION — REFERENCE ONLY]"
"""The first line of every handoff message the context engine writes. Capture never records a
message that starts with it as conversation: it is derived from the log, not part of it."""
HANDOFF_OPENING = HANDOFF_MARKER[0]
"""The marker's first character: a text that opens with anything else (but whitespace) is no
handoff, which most readers learn from that one character rather than a stripped copy."""

Speaker = Literal["person", "assistant", "tool", "host", "automation"]


class MessageCaptured(DomainEvent, frozen=True):
    """One message of a conversation, as sent or received."""

    role: str
    message: dict[str, object]
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
    # The session-tree entry this message follows: an entry id, "" for a root, or None for "the
    # session's leaf when the tree folds it" (events written without a parent still chain).
    parent: str | None = None
    # The message as received, as ASCII JSON, when `message` is an escaped copy of it (a lone
    # surrogate has no UTF-8 form): json.loads(original) gives it back exactly.
    original: str | None = None


class TurnStarted(DomainEvent, frozen=True):
    turn: int
    preview: str = ""  # the start of the user's message, credentials masked
    model: str | None = None
    platform: str | None = None


class SessionEnded(DomainEvent, frozen=True):
    messages: int = 0  # how many messages the host's final list held
    captured: int = 0  # how many of them were new to the log


class MemoryWritten(DomainEvent, frozen=True):
    """The host's built-in memory tool wrote an entry (mirrored; content masked)."""

    action: str
    target: str
    content: str = ""
    metadata: dict[str, object] = {}


class DelegationObserved(DomainEvent, frozen=True):
    """A subagent finished; what it was asked and what it said (masked). Never memory about the
    user: a subagent's words are automation."""

    task: str = ""
    result: str = ""
    child_session_id: str = ""


class CompressionAhead(DomainEvent, frozen=True):
    """The host is about to compress the live list; every message in it was captured first."""

    messages: int = 0
    captured: int = 0


MESSAGE_FIELDS = (
    "role",
    "message",
    "fingerprint",
    "speaker",
    "text",
    "person_text",
    "host_spans",
    "turn",
    "user_id",
    "profile",
    "agent_context",
    "tool_name",
    "tool_call_ids",
    "parent",
    "original",
)
MESSAGE_DEFAULTS: dict[str, object] = {
    "text": "",
    "person_text": "",
    "host_spans": [],
    "turn": None,
    "user_id": None,
    "profile": None,
    "agent_context": "primary",
    "tool_name": None,
    "tool_call_ids": [],
    "parent": None,
    "original": None,
}
MESSAGE_COPIES: dict[str, tuple[str, ...]] = {
    "role": ("message", "role"),
    "text": ("message", "content"),
}
"""The stored form of a MessageCaptured payload (template 1 of the log): its fields in order,
the defaults a row leaves out, and the fields left out when they repeat the message's own (the
role; the searchable text of a message without credentials or tool calls is its content). Part
of the stored format: a change takes a new tag."""

register_payload_template(
    NAMESPACE,
    "MessageCaptured",
    1,
    tag=1,
    fields=MESSAGE_FIELDS,
    defaults=MESSAGE_DEFAULTS,
    copies=MESSAGE_COPIES,
)


def register_capture_events(types: EventTypeRegistry) -> None:
    types.register(NAMESPACE, "MessageCaptured", MessageCaptured)
    for cls in (TurnStarted, SessionEnded, MemoryWritten, DelegationObserved, CompressionAhead):
        types.register(HOST_NAMESPACE, cls.__name__, cls)


def text_parts(content: object) -> Iterator[str]:
    """The text of a wire message's content, part by part: a string content is one part; of a
    list, every part that is a string or carries a string `text`. Anything else holds none."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    yield text
            elif isinstance(part, str):
                yield part


def message_text(message: Mapping[str, object]) -> str:
    """The readable text of a wire message: its content (every text part) and its tool calls."""
    pieces = list(text_parts(message.get("content")))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list | tuple) else ():
        if isinstance(call, dict):
            fn = call.get("function") or {}
            name = fn.get("name", "") if isinstance(fn, dict) else ""
            args = fn.get("arguments", "") if isinstance(fn, dict) else ""
            pieces.append(f"{name}({args if isinstance(args, str) else str(args)})")
    return "\n".join(p for p in pieces if p)
