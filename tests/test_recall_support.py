"""Builds captured chat for recall's tests through the lower layers (MessageCaptured events
appended to the log), the way capture records it."""

from __future__ import annotations

import itertools
from typing import Any

from chronicle_engine.capture.events import MessageCaptured, register_capture_events
from chronicle_engine.core import ChronicleCore

_counter = itertools.count()


def say(
    core: ChronicleCore,
    session: str,
    text: str,
    *,
    role: str = "user",
    speaker: str | None = None,
    user_id: str | None = None,
    profile: str | None = None,
    name: str | None = None,
    agent_context: str = "primary",
    created_at: str | None = None,
) -> int:
    """Append one captured message and return its seq."""
    register_capture_events(core.types)
    if speaker is None:
        speaker = {"user": "person", "assistant": "assistant", "tool": "tool"}.get(role, "host")
    message: dict[str, Any] = {"role": role, "content": text}
    if name:
        message["name"] = name
    event = MessageCaptured(
        role=role,
        message=message,
        fingerprint=f"fp{next(_counter)}",
        speaker=speaker,  # type: ignore[arg-type]
        text=text,
        person_text=text if speaker == "person" else "",
        user_id=user_id,
        profile=profile,
        agent_context=agent_context,
    )
    extra = {"created_at": created_at} if created_at else {}
    return core.store.append([core.types.pending(event, session=session, **extra)])[0].seq


def open_core(kind: str, tmp_path: Any, **config: Any) -> ChronicleCore:
    """A core over ":memory:" or a WAL file in `tmp_path`, with optional config values."""
    from chronicle_engine.config import Config

    path = ":memory:" if kind == "memory" else tmp_path / "chronicle.db"
    values: dict[str, Any] = {}
    for dotted, value in config.items():
        node = values
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return ChronicleCore(path, Config(values))
