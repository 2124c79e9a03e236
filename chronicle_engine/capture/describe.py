"""A wire message described for reading: masked text, speaker, host spans, tool names.

Invariant: pure. The same message in the same context gives the same `MessageCaptured`, whether
capture records it live or an import migrates it from an old export.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Required, TypedDict, Unpack

from pydantic import TypeAdapter

from .align import EscapedWire, plain_json
from .events import MessageCaptured, message_text
from .secrets import mask
from .speaker import attribute

__all__ = [
    "describe",
    "describe_payload",
    "message_id",
    "message_position",
    "legacy_message_id",
    "digest",
    "session_digest",
    "searchable",
    "INDEXED_CHARS",
]

INDEXED_CHARS = 64_000
"""The longest searchable `text` a message gets. A longer one (a huge tool output, a pasted log)
is indexed by its head and its tail with a note of what was left out between them; the wire
message keeps every character, and expanding the message returns it whole."""
_TAIL_CHARS = 16_000
# Masked beyond the cut, so a credential that straddles it is recognised whole before the cut.
_MASK_MARGIN = 4_096


def searchable(text: str) -> str:
    """`text` with credentials masked, bounded to about INDEXED_CHARS (see there)."""
    if len(text) <= INDEXED_CHARS:
        return mask(text)
    head = INDEXED_CHARS - _TAIL_CHARS
    left_out = len(text) - head - _TAIL_CHARS
    return (
        mask(text[: head + _MASK_MARGIN])[:head]
        + f"\n[… {left_out:,} characters of this message are not indexed; expanding the"
        " message returns all of it …]\n"
        + mask(text[-(_TAIL_CHARS + _MASK_MARGIN) :])[-_TAIL_CHARS:]
    )


def digest(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode("utf-8"), digest_size=16).hexdigest()


def message_id(session: str, anchor: str, fp: str, position: int) -> str:
    """A captured message's event id, a function of its session, the message it follows (the
    anchor), its fingerprint and its position on the branch (how many messages precede it, which
    the anchor already fixes), so capturing the same message twice gives the same id.

    The session and the position lead, the digest follows: a session's messages sit side by
    side in the log's id index, in branch order, so a turn's ids land on the one index page at
    the end of its session's run instead of on ten random pages, and a turn's commit writes
    fewer pages. Ids written before this layout (`"m"` and the digest alone) stay as they are.
    The one reader of the position is `message_position`."""
    return (
        f"m{session_digest(session)}{position & 0xFFFFFFFF:08x}{digest(session, anchor, fp)[:16]}"
    )


@functools.lru_cache(maxsize=1024)
def session_digest(session: str) -> str:
    """The first 8 digits of `digest(session)`, as a session's message ids begin (every
    message of a turn asks for the same one)."""
    return digest(session)[:8]


def message_position(entry_id: str, session_digest: str) -> int | None:
    """The position `message_id` put in an id of this session (`session_digest`: the first 8
    digits of `digest(session)`), or None when the id does not have that layout. An id of the
    old layout passes by chance once in 2**32: a caller trusts positions only when a run of
    consecutive messages reads back as consecutive positions."""
    if len(entry_id) != 33 or entry_id[0] != "m" or entry_id[1:9] != session_digest:
        return None
    try:
        return int(entry_id[9:17], 16)
    except ValueError:
        return None


def legacy_message_id(session: str, anchor: str, fp: str) -> str:
    """The id layout before `message_id` led with session and position. Version-1 session
    files are still migrated to it, so importing the same old file again stays a no-op."""
    return "m" + digest(session, anchor, fp)


class DescribeContext(TypedDict, total=False):
    """The keyword arguments of `describe_payload`."""

    parent: Required[str | None]
    turn: Required[int | None]
    tool_name: str | None
    user_id: str | None
    profile: str | None
    agent_context: str
    platform: str | None


def describe(
    obj: object, wire: dict[str, object], fp: str, **context: Unpack[DescribeContext]
) -> MessageCaptured:
    """The message described as an event (`describe_payload`'s arguments)."""
    return MessageCaptured.model_validate(describe_payload(obj, wire, fp, **context))


def describe_payload(
    obj: object,
    wire: dict[str, object],
    fp: str,
    *,
    parent: str | None,
    turn: int | None,
    tool_name: str | None = None,
    user_id: str | None = None,
    profile: str | None = None,
    agent_context: str = "primary",
    platform: str | None = None,
    plain: bool = False,
) -> dict[str, object]:
    """`describe(...).model_dump(mode="json")`, built directly: capture stores one of these for
    every message of every turn, and validating a model only to dump it again was a tenth of a
    turn's cost. The same fields, in the same order, with the same JSON types
    (tests/test_capture.py checks the two agree on a corpus of messages). `plain`: `wire` is
    plain JSON data, as `align.plain_wire` found it."""
    role = str(wire.get("role") or "unknown")
    text = searchable(message_text(wire))
    attribution = attribute(
        obj if isinstance(obj, dict) else wire,
        text,
        agent_context=agent_context,
        platform=platform,
    )
    call_ids: list[str] = []
    if role == "assistant":
        calls = wire.get("tool_calls")
        for call in calls if isinstance(calls, list | tuple) else ():
            if isinstance(call, dict) and call.get("id"):
                call_ids.append(str(call["id"]))
    elif role in ("tool", "function"):
        call_id = str(wire.get("tool_call_id") or "")
        if call_id:
            call_ids.append(call_id)
        name = wire.get("name")
        tool_name = str(name) if name else tool_name
    else:
        tool_name = None
    return {
        "role": role,
        # A wire message is plain JSON data unless json.dumps took it only leniently (a NaN, a
        # tuple, a non-string key deeper down): then it is dumped as the model would.
        "message": wire if plain or plain_json(wire) else _wire().dump_python(wire, mode="json"),
        "fingerprint": str(fp),
        "speaker": attribution.speaker,
        "text": text,
        "person_text": attribution.person_text,
        "host_spans": [[int(a), int(b)] for a, b in attribution.host_spans],
        "turn": None if turn is None else int(turn),
        "user_id": _text_or_none(user_id),
        "profile": _text_or_none(profile),
        "agent_context": str(agent_context),
        "tool_name": _text_or_none(tool_name),
        "tool_call_ids": call_ids,
        "parent": _text_or_none(parent),
        "original": wire.original if isinstance(wire, EscapedWire) else None,
    }


@functools.cache
def _wire() -> TypeAdapter[dict[str, object]]:
    """How the model dumps a wire message (built on first use: nearly every message is plain
    JSON, and building it at import was a tenth of the plugin's start-up)."""
    return TypeAdapter(dict[str, object])


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)
