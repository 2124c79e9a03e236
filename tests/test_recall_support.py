"""Captured chat for recall's tests, recorded through the real capture path
(`core.capture.capture_messages`), one live list per session as Hermes hands it over."""

from __future__ import annotations

import weakref
from typing import Any

from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore

_live: weakref.WeakKeyDictionary[ChronicleCore, dict[str, list[dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def say(
    core: ChronicleCore,
    session: str,
    text: str,
    *,
    role: str = "user",
    user_id: str | None = None,
    profile: str | None = None,
    name: str | None = None,
    agent_context: str = "primary",
    created_at: str | None = None,
) -> int:
    """Add one message to the session's live list, capture the list, return the message's seq."""
    message: dict[str, Any] = {"role": role, "content": text}
    if name:
        message["name"] = name
    if role == "tool":
        message["tool_call_id"] = f"call-{len(_live.get(core, {}).get(session, []))}"
    messages = _live.setdefault(core, {}).setdefault(session, [])
    messages.append(message)
    seqs = core.capture.capture_messages(
        session,
        messages,
        user_id=user_id,
        profile=profile,
        agent_context=agent_context,
        created_at=created_at,
    )
    seq = seqs[-1]
    assert seq is not None
    return seq


def open_core(kind: str, tmp_path: Any, **config: Any) -> ChronicleCore:
    """A core over ":memory:" or a WAL file in `tmp_path`, with optional config values
    (`recall__embeddings__url=...` sets chronicle.recall.embeddings.url)."""
    path = ":memory:" if kind == "memory" else tmp_path / "chronicle.db"
    values: dict[str, Any] = {}
    for dotted, value in config.items():
        node = values
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return ChronicleCore(path, Config(values))
