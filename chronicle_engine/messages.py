"""Reading OpenAI-style wire messages: their text, their rough cost, who wrote them.

Everything here is a pure function of one message dict and never raises on a malformed one: the
host's live list can hold anything, and compaction must degrade rather than fail on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeGuard, TypeVar, overload

from .capture.events import HANDOFF_MARKER, HANDOFF_OPENING, text_parts
from .capture.secrets import mask
from .capture.speaker import is_person_request

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD",
    "HANDOFF_SIGNATURE",
    "content_text",
    "chars_for_tokens",
    "estimate_tokens",
    "estimate_list_tokens",
    "tool_call_ids",
    "tool_calls",
    "handoff_kind",
    "is_own_handoff",
    "latest_own_handoff",
    "is_foreign_handoff",
    "is_real_user",
    "is_standing_instruction",
    "states_a_rule",
    "fresh_copy",
    "masked_view",
]

HANDOFF_SIGNATURE = "Chronicle folded earlier turns of this conversation"
"""The second line of every handoff this engine writes; tells ours from another compressor's."""

CHARS_PER_TOKEN = 4
"""The one rough rule between characters and tokens (the host's own estimate uses it too): every
token budget Chronicle turns into a character budget, and back, goes through it."""
MESSAGE_OVERHEAD = 4
"""Role and framing tokens a provider adds per message."""
_IMAGE_TOKENS = 1500

# Matched against lower-cased text (faster than IGNORECASE on long alternations).
_INSTRUCTION = re.compile(
    r"\b(?:never|always|must|mustn'?t|don'?t|do not|shall not|from now on|going forward|"
    r"make sure|remember to|keep in mind|avoid|under no circumstances|at all times)\b"
)
# Every alternative of `_INSTRUCTION` holds one of these: a text without any cannot match, and
# these substring searches cost about half of the regex trying its alternation at every position.
_INSTRUCTION_WORDS = (
    "never",
    "always",
    "must",
    "don",
    "do not",
    "shall not",
    "from now on",
    "going forward",
    "make sure",
    "remember to",
    "keep in mind",
    "avoid",
    "under no circumstances",
    "at all times",
)
_INSTRUCTION_MAX_CHARS = 1500

# What a summariser reads of a long text is its start and its end; only those are masked. The
# readers take at most 2,400 characters of a start (a request shown twice its 1,200 cap, the
# model's 2,000 a message), 300 of an end and 300 of a call's arguments; the views are wider,
# so a credential cut where a view ends lies past anything a reader shows.
_VIEW_HEAD_CHARS = 3_000
_VIEW_TAIL_CHARS = 1_000
_VIEW_ARGS_CHARS = 1_000


def content_text(message: Mapping[str, object]) -> str:
    """The text of a message's content (every text part), without tool calls.

    Both read parts through capture's `text_parts`, but this is not `message_text`: it leaves
    out tool calls, keeps empty parts in the join and reads a scalar content as its `str`. Those
    differences predate the shared helper and are kept on purpose (no figure changes)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_parts(content))
    return "" if content is None else str(content)


def tool_calls(message: Mapping[str, object]) -> list[tuple[str, str, str]]:
    """(id, name, arguments) of every tool call an assistant message makes."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    out: list[tuple[str, str, str]] = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        fn = call.get("function")
        name = args = ""
        if isinstance(fn, dict):
            name = str(fn.get("name") or "")
            raw = fn.get("arguments")
            args = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
        out.append((str(call.get("id") or ""), name, args))
    return out


def tool_call_ids(message: Mapping[str, object]) -> tuple[str, ...]:
    """The ids of `tool_calls(message)` (without reading their names and arguments)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ()
    if len(calls) == 1:  # (most messages that call: one call, read without a generator)
        call = calls[0]
        return (str(call.get("id") or ""),) if isinstance(call, dict) else ()
    return tuple(str(call.get("id") or "") for call in calls if isinstance(call, dict))


def estimate_tokens(message: object) -> int:
    """A cheap upper-ish estimate (4 characters a token), like the host's own rough count."""
    if not isinstance(message, dict):
        return MESSAGE_OVERHEAD
    content = message.get("content")
    calls = message.get("tool_calls")
    if calls is None and isinstance(content, str):  # most messages: the general case's sum
        return (len(content) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + MESSAGE_OVERHEAD
    chars = 0
    images = 0
    if isinstance(content, str):
        chars += len(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                if part.get("type") in {"image", "image_url", "input_image"}:
                    images += 1
                text = part.get("text")
                if isinstance(text, str):
                    chars += len(text)
            elif isinstance(part, str):
                chars += len(part)
    elif content is not None:
        chars += len(str(content))
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                chars += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
            chars += 24  # id and framing
    return (
        (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + MESSAGE_OVERHEAD + images * _IMAGE_TOKENS
    )


def chars_for_tokens(tokens: int) -> int:
    """About how many characters `tokens` tokens hold."""
    return tokens * CHARS_PER_TOKEN


def estimate_list_tokens(messages: Sequence[object]) -> int:
    return sum(estimate_tokens(m) for m in messages)


_LEAD = len(HANDOFF_MARKER) + len(HANDOFF_SIGNATURE) + 64


def _lead(message: Mapping[str, object]) -> str:
    """The start of the content, leading whitespace removed (without copying a long text)."""
    content = message.get("content")
    if isinstance(content, str):
        return content[:_LEAD].lstrip()
    return content_text(message)[:_LEAD].lstrip()


def handoff_kind(message: object) -> str | None:
    """'own' for a handoff this engine wrote (marker line, then Chronicle's signature), 'foreign'
    for another compressor's (Hermes' built-in shares the marker), None for anything else."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        first = content[:1]
        if first != HANDOFF_OPENING and not first.isspace():
            return None  # (what `_lead` would return does not start with the marker)
    lead = _lead(message)
    if not lead.startswith(HANDOFF_MARKER):
        return None
    rest = lead[len(HANDOFF_MARKER) :].lstrip("\n")
    return "own" if rest.startswith(HANDOFF_SIGNATURE) else "foreign"


def is_own_handoff(message: object) -> TypeGuard[dict[str, object]]:
    return handoff_kind(message) == "own"


def latest_own_handoff(messages: Sequence[object]) -> dict[str, object] | None:
    """The last message of `messages` that `is_own_handoff`, or None."""
    for message in reversed(messages):
        if type(message) is dict:
            content = message.get("content")
            if type(content) is str:
                first = content[:1]
                if first != HANDOFF_OPENING and not first.isspace():
                    continue  # (most messages: `handoff_kind`'s first test, without its calls)
        if is_own_handoff(message):
            return message
    return None


def is_foreign_handoff(message: object) -> bool:
    """Another compressor's summary. It is not in the log, so it is the only record of what it
    summarised: kept verbatim, never dropped."""
    return handoff_kind(message) == "foreign"


def is_real_user(message: object) -> bool:
    """A request the person wrote, not host scaffolding that travels as role "user". Capture's
    speaker rules decide it, so compaction and the log never disagree on who wrote a message."""
    return is_person_request(message)


def is_standing_instruction(message: object) -> bool:
    """A short request of the person's that states a rule ("never ...", "always ...")."""
    return (
        isinstance(message, dict) and is_real_user(message) and states_a_rule(content_text(message))
    )


def states_a_rule(text: str) -> bool:
    """Whether a request's text (`content_text`) is short and states a rule: the half of
    `is_standing_instruction` for a caller that already knows the message is the person's."""
    if len(text) > _INSTRUCTION_MAX_CHARS:
        return False
    lowered = text.lower()
    return (
        any(word in lowered for word in _INSTRUCTION_WORDS)
        and _INSTRUCTION.search(lowered) is not None
    )


_M = TypeVar("_M")
_V = TypeVar("_V")


@overload
def fresh_copy(message: dict[str, _V]) -> dict[str, _V]: ...
@overload
def fresh_copy(message: _M) -> _M: ...
def fresh_copy(message: object) -> object:
    """A copy for the compacted list, without the host's persistence marker."""
    if not isinstance(message, dict):
        return message
    copy = dict(message)
    copy.pop("_db_persisted", None)
    return copy


def _masked_text(text: str, head: int, tail: int) -> str:
    if len(text) <= head + tail:
        return mask(text)
    middle = len(text) - head - tail
    end = f"\n{mask(text[-tail:])}" if tail else ""
    return f"{mask(text[:head])}\n[…{middle} characters…]{end}"


@overload
def masked_view(message: dict[str, _V]) -> dict[str, object]: ...
@overload
def masked_view(message: _M) -> _M: ...
def masked_view(message: object) -> object:
    """What a summariser may read of a message: its text and tool-call arguments with every
    credential masked, a long text cut to its start and end (all a summariser reads of it).
    The wire message itself is untouched: the log keeps it exact for `chronicle_expand`."""
    if not isinstance(message, dict):
        return message
    view = dict(message)
    view["content"] = _masked_text(content_text(message), _VIEW_HEAD_CHARS, _VIEW_TAIL_CHARS)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        view["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": mask(name),
                    "arguments": _masked_text(arguments, _VIEW_ARGS_CHARS, 0),
                },
            }
            for call_id, name, arguments in tool_calls(message)
        ]
    return view
