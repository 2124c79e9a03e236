"""Who wrote each part of a message: the person, the assistant, a tool, automation or the host.

Invariant: `person_text` holds only words the person typed. Hermes writes into the user's message
too (recalled `<memory-context>` blocks, `[System note: ...]` frames, background-process results,
the gateway's sender and reply headers, skill scaffolding, compaction handoffs); those spans are
host text, kept in the captured message and its searchable text but never attributed to the person.
A turn run for automation (cron, a subagent, the memory flush) has no person in it at all.

The frames recognised here are the ones hermes-agent 0.19.0 writes (agent/memory_manager.py,
gateway/run.py, tools/process_registry.py, agent/skill_commands.py, agent/context_compressor.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .events import HANDOFF_MARKER, HANDOFF_OPENING, Speaker, message_text, text_parts

__all__ = [
    "Attribution",
    "attribute",
    "host_spans",
    "conversation_of",
    "is_handoff",
    "is_person_request",
    "PERSON_CONTEXTS",
]

PERSON_CONTEXTS = frozenset({"primary"})
"""agent_context values whose user messages come from a person. Hermes also runs "cron",
"subagent" and "flush" agents; their user messages are written by automation."""

_LEGACY_SUMMARY_PREFIX = "[CONTEXT SUMMARY]:"
# What a handoff's text starts with, once leading whitespace is stripped.
_HANDOFF_OPENINGS = frozenset((HANDOFF_OPENING, _LEGACY_SUMMARY_PREFIX[:1]))
_COMPRESSED_SUMMARY_KEY = "_compressed_summary"
# Hermes' built-in compressor can merge its summary into a tail message: header, the message's
# old text, delimiter, summary (agent/context_compressor.py).
_MERGED_PRIOR_CONTEXT_HEADER = "[PRIOR CONTEXT — for reference only; not a new message]"
_MERGED_SUMMARY_DELIMITER = "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]"

# Whole messages the host writes in the user role (Hermes marks some with private flags).
_SYNTHETIC_FLAGS = (
    "_todo_snapshot_synthetic",
    "_empty_recovery_synthetic",
    "_verification_stop_synthetic",
    "_pre_verify_synthetic",
)
_WHOLE_MESSAGE_PREFIXES = (
    "[System: ",
    "[IMPORTANT: Background process ",
    "[Background process ",
    "[Your active task list was preserved",
)

# Bracketed frames Hermes puts inside a user message, before or after the person's words.
_FRAME_PREFIXES = (
    "[System note:",
    "[System: ",
    "[IMPORTANT:",
    "[Background process ",
    "[Replying to",
    "[Triggering message id:",
    "[Delivered from ",
    "[The user sent ",
    "[User sent ",
    "[If you need a closer look",
    "[Voice channel now:",
    "[Session was just handed off",
    "[Runtime note:",
    "[Loaded as part of the ",
    "[user did not respond",
    "[Your active task list was preserved",
)
_FRAME_START = re.compile("|".join(re.escape(p) for p in _FRAME_PREFIXES))
_MEMORY_OPEN = re.compile(r"<\s*memory-context\s*>", re.IGNORECASE)
_MEMORY_CLOSE = re.compile(r"</\s*memory-context\s*>", re.IGNORECASE)
_NEW_MESSAGE = "[New message]\n"
# The gateway prefixes a shared chat's message with the sender's display name: "[Name] text".
_SENDER = re.compile(r"\[[^\[\]\n]{1,80}\] ")
_NOT_A_PERSON_PLATFORMS = frozenset({"cron"})
_LOCAL_PLATFORMS = frozenset({"", "cli", "local", "tui", "acp"})

# Skill scaffolding (agent/skill_commands.py): only the instruction the user typed is theirs.
_SKILL_PREFIX = "[IMPORTANT: The user has invoked the "
_SKILL_SINGLE_MARKER = "The full skill content is loaded below.]"
_SKILL_SINGLE_INSTRUCTION = (
    "The user has provided the following instruction alongside the skill invocation: "
)
_SKILL_RUNTIME_NOTE = "\n\n[Runtime note:"
_SKILL_BUNDLE_MARKER = " skill bundle,"
_SKILL_BUNDLE_INSTRUCTION = "\nUser instruction: "
_SKILL_BUNDLE_FIRST_BLOCK = "\n\n[Loaded as part of the "


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who wrote a message, which parts of its text the host wrote, and the person's own words."""

    speaker: Speaker
    host_spans: list[tuple[int, int]]  # ranges of the text that are host-written
    person_text: str  # the person's own words ("" unless speaker == "person")


def is_handoff(message: object) -> bool:
    """A compaction handoff (ours or Hermes' built-in one): derived from the log, not part of it."""
    if not isinstance(message, dict):
        return False
    if message.get(_COMPRESSED_SUMMARY_KEY):
        return True
    content = message.get("content")
    if isinstance(content, str):
        first = content[:1]
        if first not in _HANDOFF_OPENINGS and not first.isspace():
            return False  # (most texts: no stripped copy of a long text to learn it)
        text: str | None = content
    else:
        text = next(text_parts(content), None)
    if text is None:
        return False
    text = text.lstrip()
    return text.startswith(HANDOFF_MARKER) or text.startswith(_LEGACY_SUMMARY_PREFIX)


def conversation_of(items: Sequence[object]) -> tuple[list[int], int]:
    """The indices of `items` that are conversation (not the system prompt, not a handoff), in
    order, and the index of the last handoff (-1: none)."""
    conversational: list[int] = []
    keep = conversational.append
    last_handoff = -1
    for i, msg in enumerate(items):
        if type(msg) is dict:
            if msg.get("role") == "system":
                continue
            content = msg.get("content")
            if type(content) is str:
                first = content[:1]
                if (
                    first not in _HANDOFF_OPENINGS
                    and not first.isspace()
                    and not msg.get(_COMPRESSED_SUMMARY_KEY)
                ):
                    keep(i)  # (most messages: `is_handoff`'s first tests, without its call)
                    continue
        elif isinstance(msg, dict) and msg.get("role") == "system":
            continue
        if is_handoff(msg):
            last_handoff = i
            continue
        keep(i)
    return conversational, last_handoff


def _bracket_end(text: str, start: int) -> int:
    """End (exclusive) of the bracketed frame opening at `start`; the text's end if unclosed."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i + 1
    # Unbalanced (a frame quoting program output): the frame runs to the end of its paragraph.
    para = text.find("\n\n", start)
    return len(text) if para < 0 else para


def _frame_end(text: str, start: int) -> int:
    if text.startswith("[Replying to", start):
        # The quoted snippet may hold brackets of its own; the frame closes with `"]`.
        close = text.find('"]', start)
        if close >= 0:
            return close + 2
    return _bracket_end(text, start)


def _skill_spans(text: str) -> list[tuple[int, int]] | None:
    if not text.startswith(_SKILL_PREFIX):
        return None
    if _SKILL_BUNDLE_MARKER in text:
        at = text.find(_SKILL_BUNDLE_INSTRUCTION)
        if at < 0:
            return [(0, len(text))]
        lo = at + len(_SKILL_BUNDLE_INSTRUCTION)
        hi = text.find(_SKILL_BUNDLE_FIRST_BLOCK, lo)
        hi = len(text) if hi < 0 else hi
        return _complement([(lo, hi)], len(text))
    if _SKILL_SINGLE_MARKER in text:
        at = text.rfind(_SKILL_SINGLE_INSTRUCTION)
        if at < 0:
            return [(0, len(text))]
        lo = at + len(_SKILL_SINGLE_INSTRUCTION)
        hi = text.find(_SKILL_RUNTIME_NOTE, lo)
        hi = len(text) if hi < 0 else hi
        return _complement([(lo, hi)], len(text))
    return [(0, len(text))]


def _complement(keep: list[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    cursor = 0
    for lo, hi in keep:
        if lo > cursor:
            spans.append((cursor, lo))
        cursor = max(cursor, hi)
    if cursor < length:
        spans.append((cursor, length))
    return spans


def host_spans(text: str, *, platform: str | None = None) -> list[tuple[int, int]]:
    """Char ranges of a user message's text that the host wrote, sorted and merged."""
    if not text:
        return []
    skill = _skill_spans(text)
    if skill is not None:
        return skill
    spans: list[tuple[int, int]] = []
    # Channel backfill before "[New message]" is other people's messages, relayed by the gateway.
    backfill = text.find(_NEW_MESSAGE)
    body_start = 0
    if backfill >= 0 and (platform or "") not in _LOCAL_PLATFORMS:
        body_start = backfill + len(_NEW_MESSAGE)
        spans.append((0, body_start))
    for opened in _MEMORY_OPEN.finditer(text, body_start):
        close = _MEMORY_CLOSE.search(text, opened.end())
        spans.append((opened.start(), close.end() if close else len(text)))
    pos = body_start
    while True:
        frame = _FRAME_START.search(text, pos)
        if frame is None:
            break
        end = _frame_end(text, frame.start())
        spans.append((frame.start(), end))
        pos = max(end, frame.start() + 1)
    if (platform or "") not in _LOCAL_PLATFORMS:
        # Headers the gateway stacks before the person's words: "[Name] ", reply and id frames.
        cursor = body_start
        covered = _merge(spans)
        while True:
            cursor = _skip_covered_and_space(text, cursor, covered)
            m = _SENDER.match(text, cursor)
            if m is None:
                break
            spans.append((m.start(), m.end()))
            cursor = m.end()
    return _merge(spans)


def _skip_covered_and_space(text: str, cursor: int, covered: list[tuple[int, int]]) -> int:
    moved = True
    while moved:
        moved = False
        while cursor < len(text) and text[cursor].isspace():
            cursor += 1
        for lo, hi in covered:
            if lo <= cursor < hi:
                cursor = hi
                moved = True
    return cursor


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans = sorted(s for s in spans if s[1] > s[0])
    out: list[tuple[int, int]] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _outside(text: str, spans: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    cursor = 0
    for lo, hi in spans:
        pieces.append(text[cursor:lo])
        cursor = hi
    pieces.append(text[cursor:])
    return "\n".join(p.strip() for p in pieces if p.strip())


def _wholly_host(message: Mapping[str, object], text: str) -> bool:
    """A user-role message the host wrote from its first character to its last."""
    if is_handoff(message) or any(map(message.get, _SYNTHETIC_FLAGS)):
        return True
    stripped = text.lstrip()
    if stripped.startswith(_WHOLE_MESSAGE_PREFIXES) and not stripped.startswith(_SKILL_PREFIX):
        return True
    return stripped.startswith(_MERGED_PRIOR_CONTEXT_HEADER) or _MERGED_SUMMARY_DELIMITER in text


def is_person_request(message: object) -> bool:
    """A user message holding words the person typed: not a handoff, not host scaffolding, not
    only frames. Read as a local chat in the primary context (the caller knows no platform), on
    the unmasked text: masking changes no frame, so the answer is the one capture records."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str) and not message.get("tool_calls"):
        text = content
    else:
        text = message_text(message)
    if "[" not in text and "<" not in text:
        # Every frame and memory block opens with one of these: without them `attribute` finds
        # no span, and compaction asks this of every message, so it is answered here.
        return bool(text) and not text.isspace() and not _wholly_host(message, text)
    return attribute(message, text).speaker == "person"


def attribute(
    message: object,
    text: str,
    *,
    agent_context: str = "primary",
    platform: str | None = None,
) -> Attribution:
    """Attribute a message whose (masked) readable text is `text`."""
    role = message.get("role") if isinstance(message, dict) else None
    if role == "assistant":
        return Attribution("assistant", [], "")
    if role in ("tool", "function"):
        return Attribution("tool", [], "")
    if role != "user" or not isinstance(message, dict):
        return Attribution("host", [(0, len(text))] if text else [], "")
    automated = agent_context not in PERSON_CONTEXTS or (platform or "") in _NOT_A_PERSON_PLATFORMS
    if _wholly_host(message, text):
        return Attribution("host", [(0, len(text))] if text else [], "")
    spans = host_spans(text, platform=platform)
    if automated:
        return Attribution("automation", spans, "")
    person = _outside(text, spans)
    if not person:
        return Attribution("host", spans, "")
    return Attribution("person", spans, person)
