"""A wire message described for reading: masked text, speaker, host spans, tool names.

Invariant: pure. The same message in the same context gives the same `MessageCaptured`, whether
capture records it live or an import migrates it from an old export.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .events import MessageCaptured, message_text
from .secrets import mask
from .speaker import attribute

__all__ = ["describe", "message_id", "digest"]


def digest(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode("utf-8"), digest_size=16).hexdigest()


def message_id(session: str, anchor: str, fp: str) -> str:
    """A captured message's event id: its session, the message it follows, its fingerprint."""
    return "m" + digest(session, anchor, fp)


def describe(
    obj: Any,
    wire: dict[str, Any],
    fp: str,
    *,
    parent: str | None,
    turn: int | None,
    tool_name: str | None = None,
    user_id: str | None = None,
    profile: str | None = None,
    agent_context: str = "primary",
    platform: str | None = None,
) -> MessageCaptured:
    role = str(wire.get("role") or "unknown")
    text = mask(message_text(wire))
    attribution = attribute(
        obj if isinstance(obj, dict) else wire,
        text,
        agent_context=agent_context,
        platform=platform,
    )
    call_ids: list[str] = []
    if role == "assistant":
        for call in wire.get("tool_calls") or ():
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
    return MessageCaptured(
        role=role,
        message=wire,
        fingerprint=fp,
        speaker=attribution.speaker,
        text=text,
        person_text=attribution.person_text,
        host_spans=attribution.host_spans,
        turn=turn,
        user_id=user_id,
        profile=profile,
        agent_context=agent_context,
        tool_name=tool_name,
        tool_call_ids=call_ids,
        parent=parent,
    )
