"""Captured chat for recall's tests, recorded through the real capture path
(`core.capture.capture_messages`), one live list per session as Hermes hands it over."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
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
    """A core over ":memory:", a WAL file in `tmp_path`, or (`kind` a PostgreSQL connection
    string) PostgreSQL as config.yaml's `chronicle.store` selects it, with optional config values
    (`recall__embeddings__url=...` sets chronicle.recall.embeddings.url)."""
    path = ":memory:" if kind == "memory" else tmp_path / "chronicle.db"
    values: dict[str, Any] = {}
    if kind not in ("memory", "file"):
        path, values["store"] = kind, kind
    for dotted, value in config.items():
        node = values
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return ChronicleCore(path, Config(values))


@contextlib.contextmanager
def core_on(kind: str, request: Any, tmp_path: Any, **config: Any) -> Iterator[ChronicleCore]:
    """`open_core` for a fixture's param: "memory", "file", or "postgres" (a schema of its own on
    the test session's server, dropped after the test); shut down at the end."""
    if kind != "postgres":
        core = open_core(kind, tmp_path, **config)
        try:
            yield core
        finally:
            core.shutdown()
        return
    from postgres_support import own_schema

    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        core = open_core(conninfo, tmp_path, **config)
        try:
            yield core
        finally:
            core.shutdown()
