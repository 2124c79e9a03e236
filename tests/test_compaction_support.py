"""Shared set-up for the compaction tests (no tests of its own).

`core_for(path)` returns a core whose capture and session-tree subsystems are the real ones when
they are on this branch, and otherwise stand-ins built on the lower layers, as the brief allows
until the capture issue lands: they write real `MessageCaptured` events with
`core.types.pending` + `core.store.append` and answer the contract's questions from the log.
They are deliberately minimal (idempotence by content, lineage by switch) and go away the moment
`chronicle_engine.capture.capture` and `chronicle_engine.sessions.tree` exist.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from chronicle_engine.capture.events import (
    HANDOFF_MARKER,
    MessageCaptured,
    message_text,
    register_capture_events,
)
from chronicle_engine.capture.events import (
    NAMESPACE as CHAT,
)
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.store import StoredEvent

ROOT = Path(__file__).resolve().parents[1]


def _real(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


REAL_CAPTURE = _real("chronicle_engine.capture.capture") and _real("chronicle_engine.sessions.tree")


def wire(message: dict[str, Any]) -> dict[str, Any]:
    """The message as the log keeps it: without the host's private `_` keys."""
    return {k: v for k, v in message.items() if not str(k).startswith("_")}


class StandInCapture:
    def __init__(self, core: ChronicleCore) -> None:
        self.core = core
        register_capture_events(core.types)
        self._known: dict[str, int] = {}

    def capture_messages(self, session_id: str, messages: list[Any], **_: Any) -> list[int | None]:
        sessions: SessionStandIn = self.core.sessions  # type: ignore[assignment]
        root = sessions.root(session_id)
        seqs: list[int | None] = []
        pending = []
        ids: list[str | None] = []
        for message in messages:
            if not isinstance(message, dict) or message.get("role") == "system":
                ids.append(None)
                continue
            if message_text(message).lstrip().startswith(HANDOFF_MARKER):
                ids.append(None)
                continue
            body = json.dumps(wire(message), sort_keys=True, ensure_ascii=False)
            event_id = hashlib.sha256(f"{root}\n{body}".encode()).hexdigest()
            ids.append(event_id)
            role = str(message.get("role") or "")
            pending.append(
                self.core.types.pending(
                    MessageCaptured(
                        role=role,
                        message=wire(message),
                        fingerprint=event_id,
                        speaker={"user": "person", "assistant": "assistant", "tool": "tool"}.get(
                            role, "host"
                        ),
                        text=message_text(message),
                    ),
                    session=session_id,
                    id=event_id,
                )
            )
        for stored in self.core.store.append_new([p for p in pending if p.id not in self._known]):
            self._known[stored.envelope.id] = stored.seq
        for event_id in ids:
            if event_id is None:
                seqs.append(None)
            elif event_id in self._known:
                seqs.append(self._known[event_id])
            else:
                found = self.core.store.get_by_id(event_id)
                if found is not None:
                    self._known[event_id] = found.seq
                seqs.append(found.seq if found else None)
        return seqs


class SessionStandIn:
    def __init__(self, core: ChronicleCore) -> None:
        self.core = core
        self.parent: dict[str, str] = {}
        self.compactions: list[dict[str, Any]] = []
        self.switches: list[tuple[str, str, str]] = []

    def root(self, session_id: str) -> str:
        while session_id in self.parent:
            session_id = self.parent[session_id]
        return session_id

    def switch(self, new_session_id: str, *, parent_session_id: str = "", reason: str = "") -> None:
        self.switches.append((new_session_id, parent_session_id, reason))
        if (
            parent_session_id
            and parent_session_id != new_session_id
            and reason
            in (
                "compression",
                "resume",
            )
        ):
            self.parent.setdefault(new_session_id, parent_session_id)

    def lineage(self, session_id: str) -> list[str]:
        root = self.root(session_id)
        return [root] + [s for s in self.parent if self.root(s) == root]

    def chronicle_name(self, session_id: str) -> str:
        return f"conversation/{self.root(session_id)}"

    def record_compaction(self, session_id: str, **entry: Any) -> None:
        self.compactions.append({"session_id": session_id, **entry})

    def message_events(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredEvent]:
        return [
            e
            for e in self.core.store.read(
                after=from_seq - 1,
                upto=to_seq,
                sessions=self.lineage(session_id),
                namespaces=[CHAT],
            )
            if e.envelope.type == "MessageCaptured"
        ]


class _StandInCore(ChronicleCore):
    @property
    def capture(self) -> Any:  # type: ignore[override]
        return self._subsystem("capture", StandInCapture)

    @property
    def sessions(self) -> Any:  # type: ignore[override]
        return self._subsystem("sessions", SessionStandIn)


def core_for(path: Any, config: Any = None) -> ChronicleCore:
    if str(path) == ":memory:":
        core = ChronicleCore(path, config)
    else:
        core = ChronicleCore.get(path, config=config)
    if not REAL_CAPTURE:
        core.__class__ = _StandInCore
    return core


def load_plugin() -> Any:
    """The repo root imported as a package, the way Hermes' loaders import the plugin."""
    name = "chronicle_plugin_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "__init__.py", submodule_search_locations=[str(ROOT)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def conversation(
    turns: int, *, tool_every: int = 2, size: int = 400, instructions: dict[int, str] | None = None
) -> list[dict[str, Any]]:
    """A scripted chat: user requests, assistant replies, tool calls with results."""
    instructions = instructions or {}
    filler = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    out: list[dict[str, Any]] = []
    for t in range(turns):
        out.append(
            {
                "role": "user",
                "content": instructions.get(t, f"request {t}: please look at item-{t}. {filler}"),
            }
        )
        if tool_every and t % tool_every == 0:
            call = f"call_{t}"
            out.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {
                                "name": "terminal",
                                "arguments": json.dumps({"command": f"cat /srv/app/file-{t}.txt"}),
                            },
                        }
                    ],
                }
            )
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": f"exit 0\nresult {t}: value {1000 + t}\n{filler}",
                }
            )
        out.append(
            {"role": "assistant", "content": f"Answer {t}: decided to keep item-{t}. {filler}"}
        )
    return out
